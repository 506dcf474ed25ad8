/* The report of a load: freeing and printing it. */
#include "nabla/checkpoint.h"

#include <stdlib.h>

static void free_strings(char **items, int n) {
    for (int i = 0; items && i < n; i++) free(items[i]);
    free(items);
}

void nb_load_report_free(nb_load_report *r) {
    if (!r) return;
    free_strings(r->missing, r->n_missing);
    free_strings(r->unexpected, r->n_unexpected);
    free_strings(r->mismatched, r->n_mismatched);
    free(r->file_prefix);
    free(r->model_prefix);
    *r = (nb_load_report){0};
}

static void print_list(FILE *f, const char *title, char *const *items, int n) {
    if (n) fprintf(f, "  %s (%d):\n", title, n);
    for (int i = 0; i < n; i++) fprintf(f, "    %s\n", items[i]);
}

void nb_load_report_fprint(FILE *f, const nb_load_report *r) {
    if (!f || !r) return;
    fprintf(f, "loaded %d tensors (%d converted), %d missing, %d unexpected, %d mismatched\n",
            r->n_loaded, r->n_converted, r->n_missing, r->n_unexpected, r->n_mismatched);
    if (r->file_prefix && r->file_prefix[0])
        fprintf(f, "  the file's names matched without the prefix '%s'\n", r->file_prefix);
    if (r->model_prefix && r->model_prefix[0])
        fprintf(f, "  the model's names matched without the prefix '%s'\n", r->model_prefix);
    print_list(f, "missing from the file", r->missing, r->n_missing);
    print_list(f, "in the file, not expected", r->unexpected, r->n_unexpected);
    print_list(f, "mismatched", r->mismatched, r->n_mismatched);
}
