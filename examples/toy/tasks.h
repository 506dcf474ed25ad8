/* Toy sequence tasks for attention heads: data generators and their model settings. */
#ifndef NABLA_TOY_TASKS_H
#define NABLA_TOY_TASKS_H

#include <nabla/nabla.h>

#define TOY_IGNORE (-100) /* target positions that carry no loss */

typedef struct {
    const char *name;
    const char *what;   /* one line for --help */
    const char *shows;  /* what the heatmaps should show */
    int64_t vocab, seq_len;
    bool causal;
    int layers;
    int64_t dim, heads;
    int64_t steps;      /* documented budget to reach 99% held-out token accuracy */
    double lr;
    int64_t batch;
    /* Fills tokens [n, seq_len] and targets [n, seq_len] (TOY_IGNORE where unscored). */
    void (*make)(nb_rng *rng, int64_t n, int64_t *tokens, int64_t *targets);
    /* Label of token id v, for heatmap axes. */
    void (*label)(int64_t v, char *buf, size_t len);
} toy_task;

/* The task named name, or NULL. */
const toy_task *toy_task_find(const char *name);
/* All tasks, NULL-terminated. */
extern const toy_task *const toy_tasks[];

#endif
