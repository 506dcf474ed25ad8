#!/usr/bin/env bash
# Keeps docs/extending.md's file count for a new built-in op true: registered ops (from the
# registry: op_registry_json --names) are listed by hand only in autograd/op_list.h and, for
# the elementwise ops, in tensor/elementwise_ops.h (which op_list.h includes). A source
# file keeps a hand list of ops when, not counting the ops it defines itself (NBA_OP_DEF),
#   - 5 or more distinct registered names (string literals or NB_OP(name)) stand within 5
#     consecutive lines, not counting switch labels (a table, or a switch naming ops), or
#   - it names half of all registered names or more (a mirror of the registry).
# Exempt: those two lists. tensor/ is scanned like the rest.
# And the other way round: every op definition the test library holds (an nba_op_<name>
# symbol in TEST_LIB) must be in those lists, or the tests would never see it.
# Usage: op_lists_check.sh OP_REGISTRY_JSON SOURCE_ROOT TEST_LIB
# First checks that the detector finds planted lists, then scans the tree.
set -euo pipefail
registry=$1
root=$2
library=$3
pairs=$("$registry" --names) # "op name" per line

defined=$(nm --defined-only "$library" | awk '$3 ~ /^nba_op_/ { sub(/^nba_op_/, "", $3); print $3 }' |
    grep -vx 'registry\|registry_count' | sort -u)
listed=$( (grep -o 'NB_OP([a-z_0-9]*)' "$root/autograd/op_list.h" | sed 's/NB_OP(\(.*\))/\1/'
    grep -v '^ *[/*]' "$root/tensor/elementwise_ops.h" | grep -o 'X([A-Z_0-9]*, [a-z_0-9]*' | sed 's/.*, //') | sort -u)
[ "$(grep -c . <<<"$listed")" -gt 10 ] || { echo "op_lists_check: the op lists hold too few names" >&2; exit 1; }
if [ -z "$defined" ]; then
    echo "op_lists_check: no nba_op_ definitions found in $library" >&2
    exit 1
fi
unlisted=$(comm -23 <(echo "$defined") <(echo "$listed"))
if [ -n "$unlisted" ]; then
    echo "op_lists_check: op definitions not listed in autograd/op_list.h or tensor/elementwise_ops.h:" $unlisted >&2
    exit 1
fi

# Prints FILE:LINE: WHY for every hand list in the given files; exit status 1 if any.
find_lists() {
    local owners
    # "file name" for every name whose op the file defines: those are the file's own.
    owners=$(while read -r op name; do
        for f in $(grep -l "NBA_OP_DEF(nba_op_${op}," "$@" 2>/dev/null || true); do
            echo "$f $name"
        done
    done <<<"$pairs")
    awk -v pairs="$pairs" -v owners="$owners" '
        BEGIN {
            n = split(pairs, lines, "\n")
            for (i = 1; i <= n; i++) { split(lines[i], f, " "); if (!(f[2] in known)) total++; known[f[2]] = 1 }
            n = split(owners, lines, "\n")
            for (i = 1; i <= n; i++) { split(lines[i], f, " "); own[f[1] SUBSEP f[2]] = 1 }
        }
        function finish_file() {
            if (file != "" && named >= total / 2) {
                print file ": names " named " of the " total " registered ops"; found = 1
            }
        }
        FNR == 1 { finish_file(); file = FILENAME; delete hits; delete named_in_file; named = 0; reported = 0; ln = 0 }
        # A switch label takes no line of the window: a switch returning a name per case is a table.
        /^[ \t]*case [^"]*:[ \t]*$/ { next }
        {
            line = $0; ln++; hits[ln] = ""
            while (match(line, /"[a-z_0-9]+"|NB_OP\([a-z_0-9]+\)/)) {
                tok = substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH)
                gsub(/^"|"$|^NB_OP\(|\)$/, "", tok)
                if (!(tok in known) || ((FILENAME SUBSEP tok) in own)) continue
                hits[ln] = hits[ln] " " tok
                if (!(tok in named_in_file)) { named_in_file[tok] = 1; named++ }
            }
            if (hits[ln] == "" || reported) next
            delete seen; distinct = 0
            for (k = ln - 4; k <= ln; k++) {
                if (!(k in hits)) continue
                m = split(hits[k], toks, " ")
                for (t = 1; t <= m; t++) if (!(toks[t] in seen)) { seen[toks[t]] = 1; distinct++ }
            }
            if (distinct >= 5) { print FILENAME ":" FNR ": a table of " distinct " op names"; reported = 1; found = 1 }
        }
        END { finish_file(); exit found ? 1 : 0 }' "$@"
}

# The detector itself: a planted table of five registered names, a switch returning five
# (the name switch tensor/unary_kernels.c had), and a file naming half of them one per
# paragraph, must all be found.
planted=$(mktemp -d)
trap 'rm -rf "$planted"' EXIT
cut -d' ' -f2 <<<"$pairs" | head -5 | sed 's/.*/    {"&", run_&},/' >"$planted/table.c"
cut -d' ' -f2 <<<"$pairs" | awk 'NR % 2 { print "x(\"" $0 "\");\n\n\n\n\n" }' >"$planted/mirror.c"
cut -d' ' -f2 <<<"$pairs" | head -5 | sed 's/.*/    case OP_&:\n        return "&";/' >"$planted/switch.c"
for f in table mirror switch; do
    if find_lists "$planted/$f.c" >/dev/null; then
        echo "op_lists_check: the detector missed a planted $f of op names" >&2
        exit 1
    fi
done

cd "$root"
mapfile -t files < <(find tensor autograd nn tests examples bench include scripts -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.py' -o -name '*.sh' -o -name 'meson.build' \) \
    ! -path autograd/op_list.h ! -path tensor/elementwise_ops.h | sort)
if ! lists=$(find_lists "${files[@]}"); then
    echo "op_lists_check: registered op names kept by hand outside autograd/op_list.h and tensor/elementwise_ops.h:" >&2
    echo "$lists" >&2
    echo "(derive such lists from the registry, autograd/op_def.h; see docs/extending.md)" >&2
    exit 1
fi
echo "op_lists_check: ${#files[@]} files scanned, no hand-kept op list outside autograd/op_list.h and tensor/elementwise_ops.h"
