/* The four tasks. Digits are tokens 0-9; recall's keys are letters a-h (tokens 10-17). */
#include "tasks.h"

#include <stdio.h>
#include <string.h>

static int64_t digit(nb_rng *rng) { return (int64_t)(nb_rng_next(rng) % 10); }

static void digit_label(int64_t v, char *buf, size_t len) {
    snprintf(buf, len, "%lld", (long long)v);
}

/* shift: the answer at position t is the token at t - 1 (a previous-token head). */
static void make_shift(nb_rng *rng, int64_t n, int64_t *x, int64_t *y) {
    const int64_t T = 12;
    for (int64_t b = 0; b < n; b++)
        for (int64_t t = 0; t < T; t++) {
            x[b * T + t] = digit(rng);
            y[b * T + t] = t == 0 ? TOY_IGNORE : x[b * T + t - 1];
        }
}

/* reverse: the answer at position t is the token at T - 1 - t (the anti-diagonal). */
static void make_reverse(nb_rng *rng, int64_t n, int64_t *x, int64_t *y) {
    const int64_t T = 8;
    for (int64_t b = 0; b < n; b++) {
        for (int64_t t = 0; t < T; t++) x[b * T + t] = digit(rng);
        for (int64_t t = 0; t < T; t++) y[b * T + t] = x[b * T + T - 1 - t];
    }
}

/* sort: the answer at position t is the t-th smallest token. */
static void make_sort(nb_rng *rng, int64_t n, int64_t *x, int64_t *y) {
    const int64_t T = 8;
    for (int64_t b = 0; b < n; b++) {
        int64_t count[10] = {0};
        for (int64_t t = 0; t < T; t++) count[x[b * T + t] = digit(rng)]++;
        int64_t t = 0;
        for (int64_t v = 0; v < 10; v++)
            while (count[v]-- > 0) y[b * T + t++] = v;
    }
}

/* recall: k1 v1 k2 v2 ... k6 v6 q; the answer at the last position is the value stored
 * after key q (an induction pattern: find the earlier q, copy what followed it). */
#define RECALL_PAIRS 6
static void make_recall(nb_rng *rng, int64_t n, int64_t *x, int64_t *y) {
    const int64_t T = 2 * RECALL_PAIRS + 1;
    for (int64_t b = 0; b < n; b++) {
        int64_t keys[8] = {10, 11, 12, 13, 14, 15, 16, 17};
        for (int k = 7; k > 0; k--) { /* distinct keys: shuffle a-h, take the first pairs */
            int j = (int)(nb_rng_next(rng) % (uint64_t)(k + 1));
            int64_t tmp = keys[k];
            keys[k] = keys[j], keys[j] = tmp;
        }
        int64_t *row = x + b * T, *tgt = y + b * T;
        for (int p = 0; p < RECALL_PAIRS; p++) {
            row[2 * p] = keys[p];
            row[2 * p + 1] = digit(rng);
        }
        int q = (int)(nb_rng_next(rng) % RECALL_PAIRS);
        row[T - 1] = keys[q];
        for (int64_t t = 0; t < T; t++) tgt[t] = TOY_IGNORE;
        tgt[T - 1] = row[2 * q + 1];
    }
}

static void recall_label(int64_t v, char *buf, size_t len) {
    if (v >= 10) snprintf(buf, len, "%c", (char)('a' + v - 10));
    else snprintf(buf, len, "%lld", (long long)v);
}

static const toy_task shift = {"shift", "predict the previous token (causal, 1 layer)",
                               "a previous-token head: weight just below the diagonal",
                               10, 12, true, 1, 32, 2, 300, 3e-3, 64, make_shift, digit_label};
static const toy_task reverse = {"reverse", "output the input reversed (bidirectional, 1 layer)",
                                 "the anti-diagonal: output t reads input T-1-t",
                                 10, 8, false, 1, 32, 2, 600, 3e-3, 64, make_reverse,
                                 digit_label};
static const toy_task sort = {"sort", "output the input digits sorted (bidirectional, 2 layers)",
                              "heads that look up the digits of each rank",
                              10, 8, false, 2, 64, 4, 1000, 2e-3, 64, make_sort, digit_label};
static const toy_task recall = {"recall",
                                "key-value associative recall (causal, 2 layers)",
                                "an induction pattern: the query finds the value after its key",
                                18, 2 * RECALL_PAIRS + 1, true, 2, 64, 4, 1000, 2e-3, 64,
                                make_recall, recall_label};

const toy_task *const toy_tasks[] = {&shift, &reverse, &sort, &recall, NULL};

const toy_task *toy_task_find(const char *name) {
    for (int i = 0; toy_tasks[i]; i++)
        if (strcmp(toy_tasks[i]->name, name) == 0) return toy_tasks[i];
    return NULL;
}
