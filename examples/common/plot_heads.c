/* The head-analysis figure: an accuracy curve beside a grid of attention heatmaps. */
#define _POSIX_C_SOURCE 200809L
#include "plot.h"

#include <stdio.h>

/* One heatmap's data block $Wn: T rows of T weights (zeros for a removed head). */
static void data_block(FILE *g, int n, const double *w, int64_t T, bool blank) {
    fprintf(g, "$W%d << EOD\n", n);
    for (int64_t i = 0; i < T; i++) {
        for (int64_t j = 0; j < T; j++)
            fprintf(g, "%s%.4f", j ? " " : "", blank ? 0 : w[i * T + j]);
        fprintf(g, "\n");
    }
    fprintf(g, "EOD\n");
}

bool plot_head_analysis(const char *png_path, const char *title, const double *accuracy, int layers,
                        int64_t heads, const double *weights, int64_t T, const bool *removed,
                        const char *const *titles, int64_t marked) {
    if (!plot_available()) return false;
    FILE *g = popen("gnuplot 2>&1", "w");
    if (!g) return false;
    const int64_t n = layers * heads;
    const int width = 700 + 260 * (int)heads, height = 120 + 260 * layers;
    fprintf(g, "set terminal pngcairo noenhanced size %d,%d font ',10'\nset output '%s'\n", width,
            height < 560 ? 560 : height, png_path);
    fprintf(g, "$ACC << EOD\n");
    for (int64_t k = 0; k <= n; k++) fprintf(g, "%lld %.4f\n", (long long)k, 100 * accuracy[k]);
    fprintf(g, "EOD\n");
    for (int64_t i = 0; i < n; i++) data_block(g, (int)i, weights + i * T * T, T, removed[i]);
    const double left = 600.0 / width, cell_w = (1 - left) / (double)heads;
    const double top = 1 - 50.0 / height, cell_h = top / layers;
    fprintf(g, "set multiplot title '%s'\n", title);
    /* Left: accuracy against heads removed, the heatmaps' state marked. */
    fprintf(g,
            "set origin 0,0.05\nset size %.4f,0.85\nset xlabel 'heads removed (least important "
            "first)'\nset ylabel 'held-out accuracy (%%)'\nset yrange [0:105]\nset xrange "
            "[-0.5:%lld.5]\nset grid\nunset key\n",
            left, (long long)n);
    fprintf(g, "set arrow 1 from %lld,0 to %lld,105 nohead dt 2 lc rgb '#aa0000'\n",
            (long long)marked, (long long)marked);
    fprintf(g, "plot $ACC using 1:2 with linespoints lw 2 pt 7 lc rgb '#08306b'\n");
    fprintf(g, "unset arrow 1\nunset grid\nunset xlabel\nunset ylabel\nunset tics\nunset "
               "colorbox\nset cbrange [0:1]\nset palette defined (0 'white', 1 '#08306b')\n");
    fprintf(g, "set xrange [-0.5:%.1f]\nset yrange [%.1f:-0.5]\n", (double)T - 0.5,
            (double)T - 0.5);
    for (int l = 0; l < layers; l++)
        for (int64_t h = 0; h < heads; h++) {
            int64_t i = l * heads + h;
            fprintf(g, "set origin %.4f,%.4f\nset size %.4f,%.4f\nset title '%s'\n",
                    left + (double)h * cell_w, top - (l + 1) * cell_h, cell_w, cell_h, titles[i]);
            fprintf(g, "plot $W%lld matrix with image\n", (long long)i);
        }
    fprintf(g, "unset multiplot\n");
    return pclose(g) == 0;
}
