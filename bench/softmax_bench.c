/* The softmax ops alone, forward + backward, at a few row lengths: the short rows' whole-block
 * exp (n <= 32), attention-sized rows, long rows, and the causal masked softmax at mid's
 * scores (nabla_bench's softmax share). Prints one line a shape: the best time of a call over
 * repeated batches. Runs briefly (about 0.3 s a shape), so that two builds can be timed in
 * turns, run after run, on a shared machine.
 *
 *   softmax_bench [--threads N] [--set-time SECONDS]
 */
#include <nabla/nabla.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const char *name;
    nb_dtype dt;
    int64_t shape[4];
    bool causal; /* nb_masked_softmax(causal, scale 0.125), else nb_softmax over the last dim */
} shape_case;

static nb_tensor *call(const shape_case *c, const nb_tensor *x) {
    return c->causal ? nb_masked_softmax(x, NULL, true, 0.125) : nb_softmax(x, -1);
}

/* The best time of one forward + backward of c, over batches of calls for set_time seconds. */
static double time_case(const shape_case *c, double set_time) {
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    nb_scope_begin();
    nb_tensor *x = nb_requires_grad_(nb_randn(&rng, c->dt, 4, c->shape), true);
    nb_tensor *g = nb_randn(&rng, c->dt, 4, c->shape);
    int batch = 1;
    double best = 1e30, start = now();
    while (now() - start < set_time) {
        double t0 = now();
        for (int i = 0; i < batch; i++) {
            nb_scope_begin();
            nb_backward(call(c, x), g);
            nb_zero_grad(x);
            nb_scope_end();
        }
        double t = (now() - t0) / batch;
        if (t < best) best = t;
        if (t * batch < 2e-3) batch *= 2; /* batches of at least 2 ms */
    }
    nb_scope_end();
    return best;
}

int main(int argc, char **argv) {
    int threads = 1;
    double set_time = 0.3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--set-time") && i + 1 < argc)
            set_time = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: softmax_bench [--threads N] [--set-time SECONDS]\n");
            return 2;
        }
    }
    nb_set_num_threads(threads);
    const shape_case cases[] = {
        {"short n16 f32", NB_F32, {64, 4, 64, 16}, false},
        {"n64 f32", NB_F32, {16, 4, 64, 64}, false},
        {"n1024 f32", NB_F32, {1, 4, 64, 1024}, false},
        {"n2048 f64", NB_F64, {1, 2, 64, 2048}, false},
        {"causal n128 f32", NB_F32, {8, 8, 128, 128}, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        printf("%-16s %10.2f us\n", cases[i].name, 1e6 * time_case(&cases[i], set_time));
    return 0;
}
