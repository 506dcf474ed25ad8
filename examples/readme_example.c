/* The README's autograd example: a gradient and its gradcheck, run by the test suite. */
#include <nabla/nabla.h>
#include <stdio.h>

static nb_tensor *f(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_sum(nb_tanh(nb_matmul(in[0], in[1]))); /* sum(tanh(x @ w)) */
}

int main(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 0);
    nb_scope_begin();
    nb_tensor *x = nb_randn(&rng, NB_F64, NB_SHAPE(4, 3));
    nb_tensor *w = nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(3, 2)), true);
    nb_tensor *loss = f((nb_tensor *[]){x, w}, 2, NULL);
    nb_backward(loss, NULL); /* d loss / d w lands in w's grad */
    nb_print(nb_grad(w));
    nb_gradcheck_result res; /* finite differences agree? */
    nb_gradcheck(f, 2, (nb_tensor *[]){x, w}, NULL, NULL, &res);
    printf("%s\n", res.message);
    nb_scope_end();
    return res.ok ? 0 : 1;
}
