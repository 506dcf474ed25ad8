/* Prints the op registry (autograd/op_def.h) as JSON on stdout, for the scripts that must
 * agree with it (tests/gen_goldens.py, scripts/check_op_lists): per op its name, golden ops,
 * catalogue entries with their kinds, and why a kind does not apply. */
#include "autograd/op_def.h"

#include <jansson.h>
#include <stdio.h>

static const char *const kind_names[NBA_NUM_KINDS] = {"random", "broadcast", "strided"};

int main(void) {
    json_t *ops = json_array();
    for (int o = 0; o < nba_op_registry_count; o++) {
        const nba_op_def *def = nba_op_registry[o];
        json_t *goldens = json_array(), *entries = json_array(), *na = json_object();
        for (int g = 0; g < def->ngoldens; g++)
            json_array_append_new(goldens, json_string(def->goldens[g].op));
        for (int e = 0; e < def->nentries; e++)
            json_array_append_new(entries, json_pack("{s:s, s:s}", "name", def->entries[e].name,
                                                     "kind", kind_names[def->entries[e].kind]));
        for (int k = 0; k < NBA_NUM_KINDS; k++)
            if (def->not_applicable[k])
                json_object_set_new(na, kind_names[k], json_string(def->not_applicable[k]));
        json_array_append_new(ops, json_pack("{s:s, s:o, s:o, s:o}", "name", def->name, "goldens",
                                             goldens, "entries", entries, "not_applicable", na));
    }
    json_t *root = json_pack("{s:o}", "ops", ops);
    int rc = root && json_dumpf(root, stdout, JSON_INDENT(1)) == 0 ? 0 : 1;
    putchar('\n');
    json_decref(root);
    return rc;
}
