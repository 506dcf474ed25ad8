/* Fine-tunes a char_lm checkpoint (char_lm --out DIR saves DIR/char_lm.safetensors) on another
 * text with its embeddings and every block but the last frozen; reports the validation loss
 * before and after, and saves the model with its tokenizer (char_lm --eval reads it).
 * Twin: examples/pytorch/finetune_lm.py.
 * Usage: finetune_lm CHECKPOINT [TEXT [STEPS [OUT_FILE]]] */
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>

#define CONTEXT 64
#define BATCH 16
#define VAL_WINDOWS 32

typedef struct {
    nb_transformer_lm *lm;
    nb_corpus text;
    nb_rng data;
} finetune;

static nb_tensor *lm_loss(nb_transformer_lm *lm, const nb_tensor *x, const nb_tensor *y) {
    nb_tensor *logits = nb_transformer_lm_forward(lm, x, true, NULL, NULL);
    return nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, lm->out_features)),
                            nb_reshape(y, NB_SHAPE(-1)), -100, NB_REDUCE_MEAN);
}

static nb_tensor *step(void *user, const nb_train_micro *m, double *metrics) {
    (void)m, (void)metrics;
    finetune *f = user;
    nb_tensor *x, *y;
    return nb_corpus_batch(&f->text, &f->data, BATCH, CONTEXT, &x, &y) ? lm_loss(f->lm, x, y)
                                                                       : NULL;
}

/* The loss on VAL_WINDOWS evenly spaced windows of the validation text. */
static bool val_loss(void *user, int64_t steps_done, double *loss) {
    (void)steps_done;
    finetune *f = user;
    nb_tensor *x, *y;
    if (!nb_corpus_val_batch(&f->text, 0, VAL_WINDOWS, VAL_WINDOWS, CONTEXT, &x, &y)) return false;
    *loss = nb_item(lm_loss(f->lm, x, y));
    return true;
}

int main(int argc, char **argv) {
    const char *ckpt = argc > 1 ? argv[1] : "out/char_lm/char_lm.safetensors";
    const char *text = argc > 2 ? argv[2] : "/usr/share/common-licenses/GPL-3";
    nb_lm_config cfg;
    nb_tokenizer *tok = nb_tokenizer_read(ckpt);
    nb_module *model = nb_model_new(NB_F32, 1);
    finetune f = {0};
    bool ok = tok && nb_lm_config_read(ckpt, &cfg) &&
              (f.lm = nb_transformer_lm_new_config(model, "", &cfg, 0.0)) &&
              nb_transformer_lm_load(f.lm, NULL, ckpt) &&
              nb_corpus_read(&f.text, 1, &text, 256, 10) && nb_corpus_encode(&f.text, tok);
    /* Frozen: the embeddings and every block but the last (norm_f and head train). */
    for (int i = 0; ok && i < cfg.layers - 1; i++)
        nb_module_requires_grad_(&f.lm->blocks[i]->base, false);
    ok = ok && nb_module_requires_grad_(&f.lm->tok_emb->base, false) &&
         nb_module_requires_grad_(&f.lm->pos_emb->base, false);
    nb_optimizer *opt = ok ? nb_adamw_new_decay_split(model, nb_adamw_defaults(1e-3)) : NULL;
    nb_rng_seed(&f.data, 2);
    double before = 0;
    nb_scope_begin();
    ok = opt && val_loss(&f, 0, &before);
    nb_scope_end();

    nb_train_opts o = nb_train_defaults(argc > 3 ? atoll(argv[3]) : 300);
    o.step = step, o.user = &f, o.quiet = true;
    o.eval = val_loss, o.eval_every = o.steps;
    nb_train_result r;
    nb_metadata_entry meta[NB_TOKENIZER_METADATA_MAX];
    ok = ok && nb_train(model, opt, &o, &r) &&
         nb_transformer_lm_save(f.lm, NULL, argc > 4 ? argv[4] : "out/finetune_lm.safetensors",
                                nb_tokenizer_metadata(tok, meta), meta);
    if (ok)
        printf("validation loss %.4f before, %.4f after %lld steps\n", before, r.best_metric,
               (long long)r.steps_done);
    else
        fprintf(stderr, "finetune_lm: %s\n", nb_last_error());
    nb_optimizer_free(opt);
    nb_module_free(model);
    nb_corpus_free(&f.text);
    nb_tokenizer_free(tok);
    return ok ? 0 : 1;
}
