/* PNG plots through gnuplot (pngcairo): attention heatmaps and the head analysis (nb_train
 * draws the training curves). When gnuplot is missing, the functions return false and say once
 * that plots are skipped. */
#ifndef NABLA_EXAMPLES_PLOT_H
#define NABLA_EXAMPLES_PLOT_H

#include <stdbool.h>
#include <stdint.h>

/* True if gnuplot can be run (prints a note the first time it cannot). */
bool plot_available(void);
/* A rows x cols heatmap of weights (row-major), with token labels on the axes like the
 * tutorials' imshow plots: queries down the side, keys along the top. */
bool plot_heatmap(const char *png_path, const char *title, const double *weights, int64_t rows,
                  int64_t cols, const char *const *row_labels, const char *const *col_labels);

/* Head analysis (examples/head_analysis.c) in one picture: held-out accuracy against the
 * number of heads removed, accuracy[k] for k = 0..n_heads (left), beside a layers x heads grid
 * of T x T attention heatmaps of one example with the heads of removed[] left blank
 * (right). titles[l * heads + h] labels each heatmap. In plot_heads.c. */
bool plot_head_analysis(const char *png_path, const char *title, const double *accuracy, int layers,
                        int64_t heads, const double *weights, int64_t T, const bool *removed,
                        const char *const *titles, int64_t marked);

#endif
