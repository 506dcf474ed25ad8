/* Prints the op registry (autograd/op_def.h) as JSON on stdout, for the scripts that must
 * agree with it: per op its name, defining file, golden spec (ops, torch expressions, cases),
 * catalogue entries with their kinds, and why a kind does not apply (tests/gen_goldens.py
 * reads it). With --names, one line per registered
 * name instead, "op name": each op and each of its golden ops (tests/op_lists_check.sh). */
#include "autograd/op_def.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[NBA_NUM_KINDS] = {"random", "broadcast", "strided"};

static int print_names(void) {
    for (int o = 0; o < nba_op_registry_count; o++) {
        const nba_op_def *def = nba_op_registry[o];
        printf("%s %s\n", def->name, def->name);
        for (int g = 0; g < def->ngoldens; g++)
            if (strcmp(def->goldens[g].op, def->name) != 0)
                printf("%s %s\n", def->name, def->goldens[g].op);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--names") == 0) return print_names();
    json_t *ops = json_array();
    for (int o = 0; o < nba_op_registry_count; o++) {
        const nba_op_def *def = nba_op_registry[o];
        json_t *goldens = json_array(), *entries = json_array(), *na = json_object();
        for (int g = 0; g < def->ngoldens; g++) {
            const nba_golden *gold = &def->goldens[g];
            json_t *cases = json_array();
            for (int c = 0; c < gold->ncases; c++)
                json_array_append_new(cases,
                                      json_pack("{s:s, s:s}", "inputs", gold->cases[c].inputs,
                                                "params", gold->cases[c].params));
            json_array_append_new(goldens, json_pack("{s:s, s:s, s:o}", "op", gold->op, "torch",
                                                     gold->torch, "cases", cases));
        }
        for (int e = 0; e < def->nentries; e++)
            json_array_append_new(entries, json_pack("{s:s, s:s}", "name", def->entries[e].name,
                                                     "kind", kind_names[def->entries[e].kind]));
        for (int k = 0; k < NBA_NUM_KINDS; k++)
            if (def->not_applicable[k])
                json_object_set_new(na, kind_names[k], json_string(def->not_applicable[k]));
        /* the file's base name without .c: "views" for ../autograd/views.c */
        const char *base = strrchr(def->file, '/') ? strrchr(def->file, '/') + 1 : def->file;
        char file[64];
        snprintf(file, sizeof file, "%.*s", (int)strcspn(base, "."), base);
        json_array_append_new(ops, json_pack("{s:s, s:s, s:o, s:o, s:o}", "name", def->name, "file",
                                             file, "goldens", goldens, "entries", entries,
                                             "not_applicable", na));
    }
    json_t *root = json_pack("{s:o}", "ops", ops);
    int rc = root && json_dumpf(root, stdout, JSON_INDENT(1)) == 0 ? 0 : 1;
    putchar('\n');
    json_decref(root);
    return rc;
}
