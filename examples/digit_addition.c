/* An encoder-decoder transformer learns to add two DIGITS-digit numbers written as digits
 * ("123+045" -> "0168"), trained on random problems; greedy decoding of held-out problems,
 * reported as the fraction whose every digit is right (exact match).
 * Twin: examples/pytorch/digit_addition.py. Usage: digit_addition [STEPS] */
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>

#define DIGITS 3
#define LIMIT 1000               /* 10^DIGITS: numbers are 0 .. LIMIT - 1 */
#define SRC_LEN (2 * DIGITS + 1) /* a, '+', b */
#define OUT_LEN (DIGITS + 1)     /* the sum's digits */
#define PLUS 10
#define BOS 11 /* starts the decoder's input */
#define VOCAB 12
#define DIM 64

typedef struct {
    nb_embedding_layer *tok_emb, *pos_emb;
    nb_transformer_block *encoder, *decoder;
    nb_layernorm *cross_norm, *norm_f;
    nb_mha *cross;
    nb_linear *head;
    nb_rng data;
} seq2seq;

static void write_digits(int64_t *out, int64_t v, int n) {
    for (int k = n - 1; k >= 0; k--, v /= 10) out[k] = v % 10;
}

/* n random problems: *src [n, SRC_LEN] and *tgt [n, 1 + OUT_LEN] (BOS, then the sum). */
static void problems(nb_rng *rng, int64_t n, nb_tensor **src, nb_tensor **tgt) {
    int64_t *s = malloc(sizeof *s * n * SRC_LEN), *t = malloc(sizeof *t * n * (OUT_LEN + 1));
    for (int64_t i = 0; i < n; i++) {
        int64_t a = nb_rng_next(rng) % LIMIT, b = nb_rng_next(rng) % LIMIT;
        write_digits(s + i * SRC_LEN, a, DIGITS);
        s[i * SRC_LEN + DIGITS] = PLUS;
        write_digits(s + i * SRC_LEN + DIGITS + 1, b, DIGITS);
        t[i * (OUT_LEN + 1)] = BOS;
        write_digits(t + i * (OUT_LEN + 1) + 1, a + b, OUT_LEN);
    }
    *src = nb_from_array(NB_I64, NB_SHAPE(n, SRC_LEN), s);
    *tgt = nb_from_array(NB_I64, NB_SHAPE(n, OUT_LEN + 1), t);
    free(s), free(t);
}

static nb_tensor *embed(seq2seq *m, const nb_tensor *tokens) {
    nb_tensor *pos = nb_arange(NB_I64, 0, (double)nb_size(tokens, 1), 1);
    return nb_add(nb_embedding_forward(m->tok_emb, tokens), nb_embedding_forward(m->pos_emb, pos));
}

/* Logits [B, T, VOCAB] of the next digit after each of the decoder's tokens dec_in [B, T]. */
static nb_tensor *decode(seq2seq *m, const nb_tensor *memory, const nb_tensor *dec_in) {
    nb_tensor *h =
        nb_transformer_block_forward(m->decoder, embed(m, dec_in), &(nb_mha_opts){.causal = true});
    h = nb_add(
        h, nb_mha_forward_cross(m->cross, nb_layernorm_forward(m->cross_norm, h), memory, NULL));
    return nb_linear_forward(m->head, nb_layernorm_forward(m->norm_f, h));
}

static nb_tensor *step(void *user, const nb_train_micro *mi, double *metrics) {
    (void)mi, (void)metrics;
    seq2seq *m = user;
    nb_tensor *src, *tgt;
    problems(&m->data, 64, &src, &tgt);
    nb_tensor *memory = nb_transformer_block_forward(m->encoder, embed(m, src), NULL);
    nb_tensor *logits = decode(m, memory, nb_narrow(tgt, 1, 0, OUT_LEN));
    return nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, VOCAB)),
                            nb_reshape(nb_narrow(tgt, 1, 1, OUT_LEN), NB_SHAPE(-1)), -100,
                            NB_REDUCE_MEAN);
}

/* Greedy decoding of 1000 held-out problems: the fraction with every digit right. */
static bool exact_match(void *user, int64_t steps_done, double *acc) {
    (void)steps_done;
    seq2seq *m = user;
    nb_rng rng;
    nb_rng_seed(&rng, 12345);
    nb_tensor *src, *tgt;
    problems(&rng, 1000, &src, &tgt);
    nb_tensor *memory = nb_transformer_block_forward(m->encoder, embed(m, src), NULL);
    nb_tensor *out = nb_narrow(tgt, 1, 0, 1); /* BOS */
    for (int k = 0; k < OUT_LEN; k++) {
        nb_tensor *last = nb_narrow(decode(m, memory, out), 1, k, 1);
        out = nb_concat(2, (nb_tensor *[]){out, nb_argmax(last, 2, false)}, 1);
    }
    nb_tensor *right = nb_sum_dims(nb_to_dtype(nb_eq(out, tgt), NB_F32), 1, (int[]){1}, false);
    int64_t n_right = nb_count_nonzero(nb_eq(right, nb_scalar(NB_F32, OUT_LEN + 1)));
    *acc = (double)n_right / 1000.0;
    return n_right >= 0;
}

int main(int argc, char **argv) {
    nb_module *model = nb_model_new(NB_F32, 1);
    seq2seq m = {.tok_emb = nb_embedding_new(model, "tok_emb", VOCAB, DIM),
                 .pos_emb = nb_embedding_new(model, "pos_emb", SRC_LEN, DIM),
                 .encoder = nb_transformer_block_new(model, "encoder", DIM, 4, 0.0),
                 .decoder = nb_transformer_block_new(model, "decoder", DIM, 4, 0.0),
                 .cross_norm = nb_layernorm_new(model, "cross_norm", DIM),
                 .cross = nb_mha_new(model, "cross", DIM, DIM, 4, false, 0.0),
                 .norm_f = nb_layernorm_new(model, "norm_f", DIM),
                 .head = nb_linear_new(model, "head", DIM, VOCAB, true)};
    nb_rng_seed(&m.data, 2);
    nb_optimizer *opt = nb_adamw_new_decay_split(model, nb_adamw_defaults(3e-3));
    nb_train_opts o = nb_train_defaults(argc > 1 ? atoll(argv[1]) : 3000);
    o.step = step, o.user = &m, o.quiet = true;
    o.eval = exact_match, o.eval_every = o.steps, o.eval_name = "exact_match", o.maximize = true;
    nb_train_result r;
    bool ok = opt && nb_train(model, opt, &o, &r);
    if (ok)
        printf("exact match %.4f after %lld steps (loss %.4f)\n", r.best_metric,
               (long long)r.steps_done, r.loss);
    else
        fprintf(stderr, "digit_addition: %s\n", nb_last_error());
    nb_optimizer_free(opt);
    nb_module_free(model);
    return ok ? 0 : 1;
}
