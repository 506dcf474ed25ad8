/* An encoder-decoder transformer learns to add two 3-digit numbers written as digits
 * ("123+045" -> "0168"), trained on random problems; greedy decoding of held-out problems,
 * reported as the fraction whose every digit is right (exact match).
 * Twin: examples/pytorch/digit_addition.py. Usage: digit_addition [STEPS] */
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>

#define SRC_LEN 7   /* "123+045" */
#define LINE_LEN 12 /* "123+045=0168": the source, '=' (starts the decoder) and the sum */
#define OUT_LEN 4
#define VOCAB 12 /* the characters of "+0123456789=", in byte order */
#define DIM 64

typedef struct {
    nb_embedding *tok_emb, *pos_emb;
    nb_transformer_block *encoder;
    nb_transformer_decoder_block *decoder;
    nb_layer_norm *norm_f;
    nb_linear *head;
} seq2seq;

/* n random problems as token ids [n, LINE_LEN]. */
static nb_tensor *problems(const nb_tokenizer *tok, nb_rng *rng, int64_t n) {
    nb_tensor *lines = nb_empty(NB_I64, NB_SHAPE(n, LINE_LEN));
    for (int64_t i = 0; i < n; i++) {
        int a = (int)(nb_rng_next(rng) % 1000), b = (int)(nb_rng_next(rng) % 1000);
        char line[LINE_LEN + 1];
        snprintf(line, sizeof line, "%03d+%03d=%04d", a, b, a + b);
        nb_tokenizer_encode(tok, line, LINE_LEN, (int64_t *)nb_data(lines) + i * LINE_LEN, NULL);
    }
    return lines;
}

static nb_tensor *embed(seq2seq *m, const nb_tensor *tokens) {
    nb_tensor *pos = nb_arange(NB_I64, 0, (double)nb_size(tokens, 1), 1);
    return nb_add(nb_embedding_forward(m->tok_emb, tokens), nb_embedding_forward(m->pos_emb, pos));
}

static nb_tensor *encode(seq2seq *m, const nb_tensor *lines) {
    return nb_transformer_block_forward(m->encoder, embed(m, nb_narrow(lines, 1, 0, SRC_LEN)),
                                        NULL);
}

static nb_tensor *decode(seq2seq *m, const nb_tensor *memory, const nb_tensor *dec_in) {
    const nb_mha_opts causal = {.causal = true};
    nb_tensor *h =
        nb_transformer_decoder_block_forward(m->decoder, embed(m, dec_in), memory, &causal, NULL);
    return nb_linear_forward(m->head, nb_layer_norm_forward(m->norm_f, h));
}

int main(int argc, char **argv) {
    const nb_block_config layer = {.dim = DIM, .num_heads = 4, .qkv_bias = true};
    nb_module *model = nb_model_new(NB_F32, 1);
    seq2seq m = {.tok_emb = nb_embedding_new(model, "tok_emb", VOCAB, DIM),
                 .pos_emb = nb_embedding_new(model, "pos_emb", SRC_LEN, DIM),
                 .encoder = nb_transformer_block_new_config(model, "encoder", &layer),
                 .decoder = nb_transformer_decoder_block_new(model, "decoder", &layer),
                 .norm_f = nb_layer_norm_new(model, "norm_f", DIM),
                 .head = nb_linear_new(model, "head", DIM, VOCAB, true)};
    nb_tokenizer *tok = nb_tokenizer_chars("+0123456789=", VOCAB);
    nb_optimizer *opt = nb_adamw_new_decay_split(model, nb_adamw_defaults(3e-3));
    nb_rng data;
    nb_rng_seed(&data, 2);
    const int64_t steps = argc > 1 ? atoll(argv[1]) : 3000;
    bool ok = opt != NULL;
    double loss = 0;
    for (int64_t step = 0; ok && step < steps; step++) {
        nb_scope_begin();
        nb_tensor *lines = problems(tok, &data, 64);
        nb_tensor *logits = decode(&m, encode(&m, lines), nb_narrow(lines, 1, SRC_LEN, OUT_LEN));
        nb_tensor *targets = nb_reshape(nb_narrow(lines, 1, SRC_LEN + 1, OUT_LEN), NB_SHAPE(-1));
        nb_tensor *l =
            nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, VOCAB)), targets, -100, NB_REDUCE_MEAN);
        nb_optimizer_zero_grad(opt);
        if ((ok = nb_backward(l, NULL) && nb_optimizer_step(opt))) loss = nb_item(l);
        nb_scope_end();
    }

    nb_module_train(model, false); /* greedy decoding of 1000 held-out problems */
    nb_set_grad_enabled(false);
    nb_rng_seed(&data, 12345);
    nb_tensor *lines = problems(tok, &data, 1000), *memory = encode(&m, lines);
    nb_tensor *tgt = nb_narrow(lines, 1, SRC_LEN, OUT_LEN + 1), *out = nb_narrow(tgt, 1, 0, 1);
    for (int k = 0; k < OUT_LEN; k++) {
        nb_tensor *next = nb_argmax(nb_narrow(decode(&m, memory, out), 1, k, 1), 2, false);
        out = nb_concat(2, (nb_tensor *[]){out, next}, 1);
    }
    nb_tensor *right = nb_sum_dims(nb_to_dtype(nb_eq(out, tgt), NB_F32), 1, (int[]){1}, false);
    int64_t n_right = nb_count_nonzero(nb_eq(right, nb_scalar(NB_F32, OUT_LEN + 1)));
    if ((ok = ok && n_right >= 0))
        printf("exact match %.4f after %lld steps (loss %.4f)\n", n_right / 1000.0,
               (long long)steps, loss);
    else
        fprintf(stderr, "digit_addition: %s\n", nb_last_error());
    nb_optimizer_free(opt);
    nb_module_free(model);
    nb_tokenizer_free(tok);
    return ok ? 0 : 1;
}
