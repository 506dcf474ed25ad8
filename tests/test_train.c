/* nb_train (nabla/train.h): exact resume (N steps straight equal N/2, a crash, and a resumed
 * N/2, bit for bit, with and without gradient accumulation), early stopping and the best
 * checkpoint on a scripted metric, gradient accumulation against one bigger batch, the CSV log
 * and the progress lines (to a file and to a terminal), a frozen parameter, the plot with and
 * without gnuplot, and errors. */
#define _XOPEN_SOURCE 700 /* posix_openpt */
#include "harness.h"

#include <fcntl.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IN 3
#define MAX_STEPS 64

/* The data iterator's position: what nb_train saves and restores as data_state. */
typedef struct {
    nb_rng rng;
    int64_t drawn;
} data_pos;

typedef struct {
    nb_module *model;
    nb_linear *fc;
    nb_optimizer *opt;
    data_pos data;
    int64_t batch;   /* samples per step over all micro-batches */
    int64_t fail_at; /* the step callback fails at this 0-based step (-1: never) */
    double x[64 * IN], y[64];
    double losses[MAX_STEPS]; /* micro-batch 0's loss of each step */
    const double *script;     /* scripted metrics, one per evaluation */
    int evals;
    int64_t snapshot_at; /* after_step copies the parameters after this many steps */
    double snapshot[IN + 1];
} fixture;

static void fixture_init(fixture *f, uint64_t seed, nb_dtype dt, bool sgd) {
    memset(f, 0, sizeof *f);
    f->model = nb_model_new(dt, seed);
    f->fc = nb_linear_new(f->model, "fc", IN, 1, true);
    int n;
    nb_tensor **params = nb_module_param_tensors(f->model, &n);
    f->opt = sgd ? nb_sgd_new(n, params, nb_sgd_defaults(0.05))
                 : nb_adamw_new(n, params, nb_adamw_defaults(0.05));
    free(params);
    nb_rng_seed(&f->data.rng, 99);
    f->batch = 8;
    f->fail_at = -1;
    f->snapshot_at = -1;
}

static void fixture_free(fixture *f) {
    nb_optimizer_free(f->opt);
    nb_module_free(f->model);
}

/* y = x . (1, -2, 0.5) + 0.3 + noise: drawn for the whole step at its first micro-batch. */
static void draw_batch(fixture *f, int64_t n) {
    static const double w[IN] = {1, -2, 0.5};
    for (int64_t i = 0; i < n; i++) {
        double y = 0.3 + 0.1 * nb_rng_normal(&f->data.rng);
        for (int j = 0; j < IN; j++) {
            f->x[i * IN + j] = nb_rng_normal(&f->data.rng);
            y += w[j] * f->x[i * IN + j];
        }
        f->y[i] = y;
    }
    f->data.drawn += n;
}

static nb_tensor *step_fn(void *user, const nb_train_micro *m, double *metrics) {
    fixture *f = user;
    if (m->step == f->fail_at) return nb_error("test", "a crash at step %lld", (long long)m->step);
    if (m->micro == 0) draw_batch(f, f->batch);
    int64_t per = f->batch / m->count, first = m->index * per;
    nb_dtype dt = f->model->dtype;
    nb_tensor *x = nb_to_dtype(nb_from_array(NB_F64, NB_SHAPE(per, IN), f->x + first * IN), dt);
    nb_tensor *y = nb_to_dtype(nb_from_array(NB_F64, NB_SHAPE(per, 1), f->y + first), dt);
    nb_tensor *pred = nb_linear_forward(f->fc, x);
    nb_tensor *loss = nb_mse_loss(pred, y, NB_REDUCE_MEAN);
    if (m->micro == 0 && m->step < MAX_STEPS) f->losses[m->step] = nb_item(loss);
    metrics[0] = (double)m->index; /* the mean over micro-batches is (count - 1) / 2 */
    return loss;
}

static double cosine_lr(void *user, int64_t step, int64_t total) {
    (void)user;
    return nb_lr_warmup_cosine(step, total / 5, total, 0.05, 0.005);
}

static const char *const metric_names[] = {"micro"};

static nb_train_opts base_opts(fixture *f, int64_t steps, const char *dir) {
    nb_train_opts o = nb_train_defaults(steps);
    o.name = "test_train";
    o.step = step_fn;
    o.user = f;
    o.n_metrics = 1;
    o.metric_names = metric_names;
    o.out_dir = dir;
    o.data_state = &f->data;
    o.data_state_bytes = sizeof f->data;
    o.quiet = true;
    o.no_plot = true;
    return o;
}

static void params_of(const fixture *f, double *out) {
    nb_to_doubles(f->fc->weight, out);
    nb_to_doubles(f->fc->bias, out + IN);
}

static char *read_text(const char *path) {
    FILE *fp = fopen(path, "r");
    if (!fp) return NULL;
    char *buf = calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

/* 20 steps straight against 12 steps, a crash, and a resume from the checkpoint at step 10:
 * parameters, data position and train.csv bit for bit. */
static void check_exact_resume(int accum, double clip) {
    char straight[512], crashed[512];
    snprintf(straight, sizeof straight, "%s/straight%d", nbtest_tmp_dir(), accum);
    snprintf(crashed, sizeof crashed, "%s/crashed%d", nbtest_tmp_dir(), accum);
    fixture a, b;
    fixture_init(&a, 5, NB_F32, false);
    nb_train_opts o = base_opts(&a, 20, straight);
    o.accum = accum;
    o.clip_norm = clip;
    o.lr = cosine_lr;
    o.checkpoint_every = 5;
    o.run = "resume test";
    CU_ASSERT_TRUE_FATAL(nb_train(a.model, a.opt, &o, NULL));

    fixture_init(&b, 5, NB_F32, false);
    b.fail_at = 12;
    o = base_opts(&b, 20, crashed);
    o.accum = accum;
    o.clip_norm = clip;
    o.lr = cosine_lr;
    o.checkpoint_every = 5;
    o.run = "resume test";
    nb_train_result r;
    CU_ASSERT_FALSE(nb_train(b.model, b.opt, &o, &r));
    NBT_ASSERT_ERROR("test_train: step 13: test: a crash at step 12");
    CU_ASSERT_EQUAL(r.steps_done, 12);
    fixture_free(&b);

    /* A new process: another model (other seed), a new optimizer, the data back at its start. */
    fixture_init(&b, 77, NB_F32, false);
    o.user = &b;
    o.data_state = &b.data;
    o.resume = true;
    CU_ASSERT_TRUE_FATAL(nb_train(b.model, b.opt, &o, &r));
    CU_ASSERT_EQUAL(r.steps_done, 20);
    double pa[IN + 1], pb[IN + 1];
    params_of(&a, pa);
    params_of(&b, pb);
    CU_ASSERT_EQUAL(memcmp(pa, pb, sizeof pa), 0);
    CU_ASSERT_EQUAL(memcmp(&a.data, &b.data, sizeof a.data), 0);
    CU_ASSERT_EQUAL(b.data.drawn, 20 * 8);
    char pa_path[600], pb_path[600];
    snprintf(pa_path, sizeof pa_path, "%s/train.csv", straight);
    snprintf(pb_path, sizeof pb_path, "%s/train.csv", crashed);
    char *ta = read_text(pa_path), *tb = read_text(pb_path);
    CU_ASSERT_TRUE(ta && tb && strcmp(ta, tb) == 0);
    free(ta);
    free(tb);
    /* The final checkpoint alone is left, and resuming a finished run trains nothing. */
    snprintf(pb_path, sizeof pb_path, "%s/resume-10.safetensors", crashed);
    CU_ASSERT_NOT_EQUAL(access(pb_path, F_OK), 0);
    snprintf(pb_path, sizeof pb_path, "%s/resume-20.safetensors", crashed);
    CU_ASSERT_EQUAL(access(pb_path, F_OK), 0);
    CU_ASSERT_TRUE(nb_train(b.model, b.opt, &o, &r));
    CU_ASSERT_EQUAL(r.steps_done, 20);
    params_of(&b, pb);
    CU_ASSERT_EQUAL(memcmp(pa, pb, sizeof pa), 0);
    fixture_free(&a);
    fixture_free(&b);
}

static void test_exact_resume(void) {
    check_exact_resume(1, 0);
}
static void test_exact_resume_accumulated(void) {
    check_exact_resume(2, 0.5);
}

static bool scripted_eval(void *user, int64_t done, double *metric) {
    fixture *f = user;
    (void)done;
    CU_ASSERT_FALSE(nb_is_grad_enabled());
    CU_ASSERT_FALSE(f->model->training);
    *metric = f->script[f->evals++];
    return true;
}

static bool snapshot_hook(void *user, int64_t done) {
    fixture *f = user;
    if (done == f->snapshot_at) params_of(f, f->snapshot);
    return true;
}

/* Evaluations at 2, 4, ..., 14 give 5, 4, 4.5, 3, 3.2, 3.1, 3.05: the best is 3 at step 8 and
 * patience 3 runs out at step 14. */
static void test_early_stopping(void) {
    static const double script[] = {5, 4, 4.5, 3, 3.2, 3.1, 3.05, 1, 1, 1};
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/early", nbtest_tmp_dir());
    fixture f;
    fixture_init(&f, 5, NB_F64, false);
    f.script = script;
    f.snapshot_at = 8;
    nb_train_opts o = base_opts(&f, 100, dir);
    o.eval = scripted_eval;
    o.eval_every = 2;
    o.patience = 3;
    o.after_step = snapshot_hook;
    o.checkpoint_every = 50;
    nb_train_result r;
    CU_ASSERT_TRUE_FATAL(nb_train(f.model, f.opt, &o, &r));
    CU_ASSERT_TRUE(r.stopped_early);
    CU_ASSERT_EQUAL(r.steps_done, 14);
    CU_ASSERT_EQUAL(r.best_step, 8);
    CU_ASSERT_EQUAL(r.best_metric, 3);
    CU_ASSERT_EQUAL(f.evals, 7);
    CU_ASSERT_TRUE(f.model->training);
    /* best.safetensors holds the parameters after step 8. */
    snprintf(path, sizeof path, "%s/best.safetensors", dir);
    fixture g;
    fixture_init(&g, 6, NB_F64, false);
    CU_ASSERT_TRUE_FATAL(nb_module_load(g.model, path));
    double best[IN + 1];
    params_of(&g, best);
    CU_ASSERT_EQUAL(memcmp(best, f.snapshot, sizeof best), 0);
    snprintf(path, sizeof path, "%s/val.csv", dir);
    char *val = read_text(path);
    CU_ASSERT_TRUE(val && strcmp(val, "step,val_loss\n2,5\n4,4\n6,4.5\n8,3\n10,3.2\n12,3.1\n"
                                      "14,3.05\n") == 0);
    free(val);
    /* The stop was checkpointed: resuming the stopped run trains no more. */
    o.resume = true;
    o.user = &g;
    o.data_state = &g.data;
    g.script = script;
    CU_ASSERT_TRUE(nb_train(g.model, g.opt, &o, &r));
    CU_ASSERT_TRUE(r.stopped_early);
    CU_ASSERT_EQUAL(r.steps_done, 14);
    CU_ASSERT_EQUAL(g.evals, 0);
    fixture_free(&f);
    fixture_free(&g);
}

/* A larger metric is better with maximize: 0.5, 0.7, 0.6 keeps 0.7 at step 2. */
static void test_maximize(void) {
    static const double script[] = {0.5, 0.7, 0.6};
    fixture f;
    fixture_init(&f, 5, NB_F64, false);
    f.script = script;
    nb_train_opts o = base_opts(&f, 3, NULL);
    o.eval = scripted_eval;
    o.eval_every = 1;
    o.maximize = true;
    o.data_state = NULL;
    o.data_state_bytes = 0;
    nb_train_result r;
    CU_ASSERT_TRUE(nb_train(f.model, f.opt, &o, &r));
    CU_ASSERT_EQUAL(r.best_metric, 0.7);
    CU_ASSERT_EQUAL(r.best_step, 2);
    CU_ASSERT_FALSE(r.stopped_early);
    fixture_free(&f);
}

/* SGD on 8 samples a step: one micro-batch of 8 against 2 (and 4) accumulated micro-batches of
 * 4 (and 2), in float64: the mean of the micro-batches' mean gradients is the batch's, up to
 * rounding. */
static void test_accumulation(void) {
    double want[IN + 1], got[IN + 1];
    for (int accum = 1; accum <= 4; accum *= 2) {
        fixture f;
        fixture_init(&f, 5, NB_F64, true);
        nb_train_opts o = base_opts(&f, 6, NULL);
        o.accum = accum;
        nb_train_result r;
        CU_ASSERT_TRUE(nb_train(f.model, f.opt, &o, &r));
        params_of(&f, accum == 1 ? want : got);
        CU_ASSERT_EQUAL(r.steps_done, 6);
        if (accum > 1)
            for (int i = 0; i < IN + 1; i++) CU_ASSERT_DOUBLE_EQUAL(got[i], want[i], 1e-13);
        fixture_free(&f);
    }
}

/* A frozen parameter (requires_grad off, not in the optimizer) is left alone: no gradient is
 * averaged, checked or clipped for it, and it keeps its value. */
static void test_frozen_parameter(void) {
    fixture f;
    fixture_init(&f, 5, NB_F64, false);
    nb_optimizer_free(f.opt);
    nb_requires_grad_(f.fc->bias, false);
    f.opt = nb_adamw_new(1, &f.fc->weight, nb_adamw_defaults(0.05));
    double before[IN + 1], after[IN + 1];
    params_of(&f, before);
    nb_train_opts o = base_opts(&f, 4, NULL);
    o.accum = 2;
    o.clip_norm = 0.1;
    CU_ASSERT_TRUE(nb_train(f.model, f.opt, &o, NULL));
    params_of(&f, after);
    CU_ASSERT_EQUAL(after[IN], before[IN]);
    CU_ASSERT_NOT_EQUAL(memcmp(after, before, sizeof(double) * IN), 0);
    CU_ASSERT_PTR_NULL(nb_grad(f.fc->bias));
    /* Nothing to train at all is an error. */
    nb_requires_grad_(f.fc->weight, false);
    CU_ASSERT_FALSE(nb_train(f.model, f.opt, &o, NULL));
    NBT_ASSERT_ERROR("nb_train: no parameter of the model requires grad");
    fixture_free(&f);
}

static double ramp_lr(void *user, int64_t step, int64_t total) {
    (void)user;
    (void)total;
    return 0.01 * (double)(step + 1);
}

/* train.csv: the header, then per step its number, the callback's loss, the metric (mean
 * micro-batch index: (0 + 1) / 2 with two micro-batches of one rank) and the rate set. */
static void test_csv_log(void) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/csv", nbtest_tmp_dir());
    fixture f;
    fixture_init(&f, 5, NB_F64, false);
    f.batch = 4;
    nb_train_opts o = base_opts(&f, 5, dir);
    o.lr = ramp_lr;
    CU_ASSERT_TRUE_FATAL(nb_train(f.model, f.opt, &o, NULL));
    snprintf(path, sizeof path, "%s/train.csv", dir);
    FILE *fp = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    char line[256];
    CU_ASSERT_TRUE(fgets(line, sizeof line, fp) && strcmp(line, "step,loss,micro,lr\n") == 0);
    int rows = 0;
    long long step;
    double loss, micro, lr;
    while (fscanf(fp, "%lld,%lf,%lf,%lf\n", &step, &loss, &micro, &lr) == 4) {
        CU_ASSERT_EQUAL(step, rows + 1);
        CU_ASSERT_DOUBLE_EQUAL(loss, f.losses[rows], 1e-8 * fabs(f.losses[rows]));
        CU_ASSERT_EQUAL(micro, 0);
        CU_ASSERT_DOUBLE_EQUAL(lr, 0.01 * (rows + 1), 1e-12);
        rows++;
    }
    CU_ASSERT_TRUE(feof(fp));
    CU_ASSERT_EQUAL(rows, 5);
    fclose(fp);
    fixture_free(&f);
}

/* A schedule: step decay by half every 2 steps after 2 warm-up steps, on AdamW's 0.05: the
 * rates 0, 0.025 (warm-up), 0.05, 0.05, 0.025, 0.025 in train.csv. */
static void test_schedule(void) {
    static const double want[] = {0, 0.025, 0.05, 0.05, 0.025, 0.025};
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/schedule", nbtest_tmp_dir());
    fixture f;
    fixture_init(&f, 5, NB_F64, false);
    nb_lr_schedule decay = nb_lr_step_decay(2, 2, 0.5);
    nb_train_opts o = base_opts(&f, 6, dir);
    o.schedule = &decay;
    CU_ASSERT_TRUE_FATAL(nb_train(f.model, f.opt, &o, NULL));
    snprintf(path, sizeof path, "%s/train.csv", dir);
    FILE *fp = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    char line[256];
    CU_ASSERT_TRUE(fgets(line, sizeof line, fp) != NULL);
    long long step;
    double loss, micro, lr;
    int rows = 0;
    while (fscanf(fp, "%lld,%lf,%lf,%lf\n", &step, &loss, &micro, &lr) == 4 && rows < 6)
        CU_ASSERT_DOUBLE_EQUAL(lr, want[rows++], 1e-12);
    CU_ASSERT_EQUAL(rows, 6);
    fclose(fp);
    o.lr = ramp_lr;
    CU_ASSERT_FALSE(nb_train(f.model, f.opt, &o, NULL));
    NBT_ASSERT_ERROR("nb_train: both a schedule and an lr callback");
    fixture_free(&f);
}

/* Not a terminal: one line per report (every 5 steps of 20) with the mean loss of the steps
 * since the last one, then the closing line. */
static void test_progress_lines(void) {
    fixture f;
    fixture_init(&f, 5, NB_F64, false);
    nb_train_opts o = base_opts(&f, 20, NULL);
    o.data_state = NULL;
    o.data_state_bytes = 0;
    o.quiet = false;
    o.report_every = 5;
    o.progress = tmpfile();
    CU_ASSERT_PTR_NOT_NULL_FATAL(o.progress);
    CU_ASSERT_TRUE_FATAL(nb_train(f.model, f.opt, &o, NULL));
    rewind(o.progress);
    char line[512];
    for (int report = 1; report <= 4; report++) {
        CU_ASSERT_TRUE_FATAL(fgets(line, sizeof line, o.progress) != NULL);
        double mean = 0;
        for (int s = (report - 1) * 5; s < report * 5; s++) mean += f.losses[s] / 5;
        char want[128];
        snprintf(want, sizeof want, "test_train: step %d/20  loss %.4f  micro 0.0000  ", report * 5,
                 mean);
        CU_ASSERT_EQUAL(strncmp(line, want, strlen(want)), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(line, " steps/s  ETA "));
        CU_ASSERT_PTR_NULL(strchr(line, '\r'));
    }
    CU_ASSERT_TRUE_FATAL(fgets(line, sizeof line, o.progress) != NULL);
    CU_ASSERT_EQUAL(strncmp(line, "test_train: trained after 20 steps (20 in this run, ", 52), 0);
    CU_ASSERT_PTR_NULL(fgets(line, sizeof line, o.progress));
    fclose(o.progress);
    fixture_free(&f);
}

/* A terminal (a pseudo-terminal here): the line is redrawn in place ("\r\033[K" before each
 * draw, no newline after it) and ended by a newline before the closing line; the last step is
 * always drawn. */
static void test_progress_terminal(void) {
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    CU_ASSERT_TRUE_FATAL(master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0);
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
    CU_ASSERT_TRUE_FATAL(slave >= 0);
    fixture f;
    fixture_init(&f, 5, NB_F64, false);
    nb_train_opts o = base_opts(&f, 5, NULL);
    o.data_state = NULL;
    o.data_state_bytes = 0;
    o.quiet = false;
    o.progress = fdopen(slave, "w");
    CU_ASSERT_TRUE(nb_train(f.model, f.opt, &o, NULL));
    fclose(o.progress);
    char text[4096];
    size_t n = 0;
    fcntl(master, F_SETFL, O_NONBLOCK); /* everything was written: read until none is left */
    for (ssize_t got;
         n < sizeof text - 1 && (got = read(master, text + n, sizeof text - 1 - n)) > 0;)
        n += (size_t)got;
    close(master);
    CU_ASSERT_TRUE_FATAL(n > 0);
    text[n] = '\0';
    /* The terminal turns "\n" into "\r\n". */
    const char *first = "\r\033[Ktest_train: step ";
    CU_ASSERT_EQUAL(strncmp(text, first, strlen(first)), 0);
    const char *last = strstr(text, "\r\033[Ktest_train: step 5/5  loss ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(last);
    const char *end = strstr(last, "\r\ntest_train: trained after 5 steps");
    CU_ASSERT_PTR_NOT_NULL(end);
    CU_ASSERT_TRUE(end && memchr(last, '\n', (size_t)(end - last)) == NULL);
    fixture_free(&f);
}

/* curve.png through gnuplot; without gnuplot on PATH a note and no failure. */
static void test_plot(void) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/plot", nbtest_tmp_dir());
    snprintf(path, sizeof path, "%s/curve.png", dir);
    fixture f;
    fixture_init(&f, 5, NB_F64, false);
    nb_train_opts o = base_opts(&f, 4, dir);
    o.no_plot = false;
    o.quiet = false;
    o.progress = tmpfile();
    nb_train_result r;
    CU_ASSERT_TRUE(nb_train(f.model, f.opt, &o, &r));
    CU_ASSERT_TRUE(r.curve_written);
    CU_ASSERT_EQUAL(access(path, F_OK), 0);
    unlink(path);
    char *saved = strdup(getenv("PATH") ? getenv("PATH") : "");
    setenv("PATH", "/nonexistent", 1);
    CU_ASSERT_TRUE(nb_train(f.model, f.opt, &o, &r));
    setenv("PATH", saved, 1);
    free(saved);
    CU_ASSERT_FALSE(r.curve_written);
    CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
    rewind(o.progress);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, o.progress);
    text[n] = '\0';
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "test_train: gnuplot not found: no curve.png"));
    fclose(o.progress);
    fixture_free(&f);
}

static nb_tensor *exploding_step(void *user, const nb_train_micro *m, double *metrics) {
    fixture *f = user;
    (void)metrics;
    nb_tensor *x = nb_full(f->model->dtype, NB_SHAPE(1, IN), m->step == 2 ? INFINITY : 1.0);
    return nb_sum(nb_linear_forward(f->fc, x));
}

static double nan_lr(void *user, int64_t step, int64_t total) {
    (void)user, (void)step, (void)total;
    return NAN;
}

static nb_tensor *vector_loss(void *user, const nb_train_micro *m, double *metrics) {
    fixture *f = user;
    (void)m, (void)metrics;
    return nb_linear_forward(f->fc, nb_ones(f->model->dtype, NB_SHAPE(2, IN)));
}

static bool failing_eval(void *user, int64_t done, double *metric) {
    (void)user;
    (void)metric;
    return nb_error("my_eval", "no validation data after %lld steps", (long long)done), false;
}

static void test_errors(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/errors", nbtest_tmp_dir());
    fixture f;
    fixture_init(&f, 5, NB_F64, false);
    nb_train_opts o = base_opts(&f, 5, dir);
    o.steps = 0;
    CU_ASSERT_FALSE(nb_train(f.model, f.opt, &o, NULL));
    NBT_ASSERT_ERROR("nb_train: steps is 0, expected > 0");
    o.steps = 5;
    o.eval_every = 2;
    CU_ASSERT_FALSE(nb_train(f.model, f.opt, &o, NULL));
    NBT_ASSERT_ERROR("nb_train: an eval callback needs eval_every > 0");
    o.eval_every = 0;
    o.out_dir = NULL;
    o.checkpoint_every = 2;
    CU_ASSERT_FALSE(nb_train(f.model, f.opt, &o, NULL));
    NBT_ASSERT_ERROR("nb_train: checkpoints and resume need out_dir");
    o.out_dir = dir;
    o.checkpoint_every = 0;
    o.resume = true;
    CU_ASSERT_FALSE(nb_train(f.model, f.opt, &o, NULL));
    NBT_ASSERT_ERROR("test_train: nothing to resume in ");
    NBT_ASSERT_ERROR("/errors");
    /* Another run's checkpoint is refused, and so is one past this run's steps. */
    o.resume = false;
    o.checkpoint_every = 5;
    o.run = "run A";
    CU_ASSERT_TRUE(nb_train(f.model, f.opt, &o, NULL));
    o.resume = true;
    o.run = "run B";
    CU_ASSERT_FALSE(nb_train(f.model, f.opt, &o, NULL));
    NBT_ASSERT_ERROR("holds the run 'run A', not 'run B'");
    o.run = "run A";
    o.steps = 4;
    CU_ASSERT_FALSE(nb_train(f.model, f.opt, &o, NULL));
    NBT_ASSERT_ERROR("resume.json is at step 5, past this run's 4 steps");
    /* A non-finite gradient stops before the update, naming the step and the parameter. */
    o = base_opts(&f, 5, NULL);
    o.step = exploding_step;
    double before[IN + 1], after[IN + 1];
    params_of(&f, before);
    nb_train_result r;
    CU_ASSERT_FALSE(nb_train(f.model, f.opt, &o, &r));
    NBT_ASSERT_ERROR("test_train: step 3: the gradient of fc.weight is not finite");
    CU_ASSERT_EQUAL(r.steps_done, 2);
    /* The steps before it updated; the third did not. */
    params_of(&f, after);
    CU_ASSERT_NOT_EQUAL(memcmp(before, after, sizeof before), 0);
    /* A learning rate that is not a rate, and a loss that is not a scalar. */
    o = base_opts(&f, 5, NULL);
    o.lr = nan_lr;
    CU_ASSERT_FALSE(nb_train(f.model, f.opt, &o, NULL));
    NBT_ASSERT_ERROR("test_train: step 1: the learning rate callback gave nan");
    o = base_opts(&f, 5, NULL);
    o.step = vector_loss;
    CU_ASSERT_FALSE(nb_train(f.model, f.opt, &o, NULL));
    NBT_ASSERT_ERROR(
        "test_train: step 1: nb_train: the step callback's loss has 2 elements, not 1");
    /* An evaluation's error names the step. */
    o = base_opts(&f, 5, NULL);
    o.eval = failing_eval;
    o.eval_every = 2;
    CU_ASSERT_FALSE(nb_train(f.model, f.opt, &o, NULL));
    NBT_ASSERT_ERROR("test_train: step 2: my_eval: no validation data after 2 steps");
    fixture_free(&f);
}

int main(void) {
    const nbtest_case cases[] = {
        {"exact resume", test_exact_resume},
        {"exact resume, accumulated and clipped", test_exact_resume_accumulated},
        {"early stopping and the best checkpoint", test_early_stopping},
        {"maximize", test_maximize},
        {"accumulation equals a bigger batch", test_accumulation},
        {"frozen parameter", test_frozen_parameter},
        {"csv log", test_csv_log},
        {"schedule", test_schedule},
        {"progress lines", test_progress_lines},
        {"progress on a terminal", test_progress_terminal},
        {"plot", test_plot},
        {"errors", test_errors},
    };
    return nbtest_run("train", cases, (int)(sizeof cases / sizeof cases[0]));
}
