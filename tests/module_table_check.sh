#!/bin/sh
# Every built-in module has a row in the module table the module tests iterate
# (tests/module_table.c): each type a constructor of nn/ makes as `nb_module_new(parent, name,
# "<Type>", ...)` must appear there as `.type = "<Type>"`. (Parts a module makes inside itself,
# like TransformerLM's "TiedHead" under &m->base, are not constructors of their own, and
# nn/module.c's "Container" groups modules and computes nothing.)
# Usage: module_table_check.sh NN_DIR MODULE_TABLE_C
set -eu
nn=$1
table=$2
types=$(ls "$nn"/*.c | grep -v '/module\.c$' |
    xargs grep -ho 'nb_module_new(parent, name, "[A-Za-z0-9_]*"' |
    sed 's/.*"\(.*\)"/\1/' | sort -u)
[ -n "$types" ] || { echo "module_table_check: no constructors found in $nn" >&2; exit 1; }
missing=""
for t in $types; do
    grep -q "\.type = \"$t\"" "$table" || missing="$missing $t"
done
if [ -n "$missing" ]; then
    echo "module_table_check: built-in modules without a row in $table:$missing" >&2
    echo "  (docs/extending.md, \"Adding a built-in module\")" >&2
    exit 1
fi
echo "module_table_check: all $(echo "$types" | wc -l) built-in module types have a row"
