/* A tour of nabla tensors and views: the shapes the multi-head attention tutorials use.
 * Run: scripts/demo tour */
#include <nabla/nabla.h>

#include <stdio.h>

static void show(const char *what, const nb_tensor *t) {
    printf("%s\n", what);
    if (!t) {
        printf("  error: %s\n\n", nb_last_error());
        return;
    }
    nb_print(t);
    printf("  strides (");
    for (int i = 0; i < t->ndim; i++) printf(i ? ", %lld" : "%lld", (long long)t->strides[i]);
    printf(")  contiguous: %s\n\n", nb_is_contiguous(t) ? "yes" : "no");
}

int main(void) {
    nb_scope_begin();
    /* The tutorials' input: 3 tokens of dimension 6. */
    const float x_data[] = {1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1, 1, 1, 1, 1, 1, 1};
    nb_tensor *x = nb_from_array(NB_F32, NB_SHAPE(1, 3, 6), x_data);
    show("x = tokens [batch 1, 3 tokens, d 6]", x);

    nb_tensor *heads = nb_view(x, NB_SHAPE(1, 3, 2, 3));
    show("x.view(1, 3, 2, 3): split d=6 into 2 heads of 3", heads);

    nb_tensor *per_head = nb_transpose(heads, 1, 2);
    show("heads.transpose(1, 2): [batch, head, token, head_dim], a strided view", per_head);

    show("per_head.view(1, 3, 6) fails: the layout is not viewable",
         nb_view(per_head, NB_SHAPE(1, 3, 6)));

    nb_tensor *merged = nb_view(nb_contiguous(nb_transpose(per_head, 1, 2)), NB_SHAPE(1, 3, 6));
    show("per_head.transpose(1, 2).contiguous().view(1, 3, 6): heads merged back", merged);

    show("x[0].narrow(1, 2, 3): columns 2..4", nb_narrow(nb_select(x, 0, 0), 1, 2, 3));
    show("causal mask: triu(ones(3, 3), 1) as bool, true = blocked",
         nb_to_dtype(nb_triu(nb_ones(NB_F32, NB_SHAPE(3, 3)), 1), NB_BOOL));

    nb_rng rng;
    nb_rng_seed(&rng, 42);
    show("randn(2, 3) from seed 42", nb_randn(&rng, NB_F32, NB_SHAPE(2, 3)));
    show("arange(0, 6).view(2, 3).expand(2, 2, 3): stride 0 on the new dim",
         nb_expand(nb_view(nb_arange(NB_F32, 0, 6, 1), NB_SHAPE(2, 3)), NB_SHAPE(2, 2, 3)));
    nb_scope_end();
    nb_shutdown();
    return 0;
}
