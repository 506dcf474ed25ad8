#define _POSIX_C_SOURCE 200809L
#include "plot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool plot_available(void) {
    static int state = -1;
    if (state < 0) {
        state = system("command -v gnuplot >/dev/null 2>&1") == 0;
        if (!state) printf("gnuplot not found: plots skipped (apt-get install gnuplot-nox)\n");
    }
    return state == 1;
}

/* Gnuplot string literal contents: single quotes doubled. */
static void quote(FILE *f, const char *s) {
    for (; *s; s++) fputs(*s == '\'' ? "''" : (char[]){*s, 0}, f);
}

bool plot_heatmap(const char *png_path, const char *title, const double *w, int64_t rows,
                  int64_t cols, const char *const *row_labels, const char *const *col_labels) {
    if (!plot_available()) return false;
    FILE *g = popen("gnuplot 2>&1", "w");
    if (!g) return false;
    int size = 240 + 50 * (int)(rows > cols ? rows : cols);
    if (size > 1000) size = 1000;
    fprintf(g, "set terminal pngcairo size %d,%d font ',10'\nset output '", size + 120, size);
    quote(g, png_path);
    fprintf(g, "'\nset title '");
    quote(g, title);
    fprintf(g, "'\nunset key\nset view map\nset cbrange [0:1]\n"
               "set palette defined (0 'white', 1 '#08306b')\n"
               "set x2label 'key'\nset ylabel 'query'\nset tics scale 0\nunset xtics\n");
    fprintf(g, "set xrange [-0.5:%.1f]\nset yrange [%.1f:-0.5]\nset x2range [-0.5:%.1f]\n",
            (double)cols - 0.5, (double)rows - 0.5, (double)cols - 0.5);
    fprintf(g, "set x2tics (");
    for (int64_t j = 0; j < cols; j++) {
        fprintf(g, "%s'", j ? ", " : "");
        quote(g, col_labels[j]);
        fprintf(g, "' %lld", (long long)j);
    }
    fprintf(g, ")\nset ytics (");
    for (int64_t i = 0; i < rows; i++) {
        fprintf(g, "%s'", i ? ", " : "");
        quote(g, row_labels[i]);
        fprintf(g, "' %lld", (long long)i);
    }
    fprintf(g, ")\n$W << EOD\n");
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t j = 0; j < cols; j++) fprintf(g, "%s%.4f", j ? " " : "", w[i * cols + j]);
        fprintf(g, "\n");
    }
    fprintf(g, "EOD\nplot $W matrix with image, $W matrix using 1:2:(sprintf('%%.2f', $3)) "
               "with labels font ',8' tc rgb '#888888'\n");
    return pclose(g) == 0;
}
