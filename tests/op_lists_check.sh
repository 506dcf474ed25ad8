#!/usr/bin/env bash
# Keeps docs/extending.md's file count for a new built-in op true: registered ops (from the
# registry: op_registry_json --names) are listed by hand only in autograd/op_list.h. A source
# file keeps a hand list of ops when, not counting the ops it defines itself (NBA_OP_DEF),
#   - 5 or more distinct registered names (string literals or NB_OP(name)) stand within 5
#     consecutive lines (a table), or
#   - it names half of all registered names or more (a mirror of the registry).
# Exempt: autograd/op_list.h (the one list) and tensor/ (raw kernels name themselves in their
# errors; not scanned).
# Usage: op_lists_check.sh OP_REGISTRY_JSON SOURCE_ROOT
# First checks that the detector finds planted lists, then scans the tree.
set -euo pipefail
registry=$1
root=$2
pairs=$("$registry" --names) # "op name" per line

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
        FNR == 1 { finish_file(); file = FILENAME; delete hits; delete named_in_file; named = 0; reported = 0 }
        {
            line = $0; hits[FNR] = ""
            while (match(line, /"[a-z_0-9]+"|NB_OP\([a-z_0-9]+\)/)) {
                tok = substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH)
                gsub(/^"|"$|^NB_OP\(|\)$/, "", tok)
                if (!(tok in known) || ((FILENAME SUBSEP tok) in own)) continue
                hits[FNR] = hits[FNR] " " tok
                if (!(tok in named_in_file)) { named_in_file[tok] = 1; named++ }
            }
            if (hits[FNR] == "" || reported) next
            delete seen; distinct = 0
            for (k = FNR - 4; k <= FNR; k++) {
                if (!(k in hits)) continue
                m = split(hits[k], toks, " ")
                for (t = 1; t <= m; t++) if (!(toks[t] in seen)) { seen[toks[t]] = 1; distinct++ }
            }
            if (distinct >= 5) { print FILENAME ":" FNR ": a table of " distinct " op names"; reported = 1; found = 1 }
        }
        END { finish_file(); exit found ? 1 : 0 }' "$@"
}

# The detector itself: a planted table of five registered names, and a file naming half of
# them one per paragraph, must both be found.
planted=$(mktemp -d)
trap 'rm -rf "$planted"' EXIT
cut -d' ' -f2 <<<"$pairs" | head -5 | sed 's/.*/    {"&", run_&},/' >"$planted/table.c"
cut -d' ' -f2 <<<"$pairs" | awk 'NR % 2 { print "x(\"" $0 "\");\n\n\n\n\n" }' >"$planted/mirror.c"
for f in table mirror; do
    if find_lists "$planted/$f.c" >/dev/null; then
        echo "op_lists_check: the detector missed a planted $f of op names" >&2
        exit 1
    fi
done

cd "$root"
mapfile -t files < <(find autograd nn tests examples bench include scripts -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.py' -o -name '*.sh' -o -name 'meson.build' \) \
    ! -path autograd/op_list.h | sort)
if ! lists=$(find_lists "${files[@]}"); then
    echo "op_lists_check: registered op names kept by hand outside autograd/op_list.h:" >&2
    echo "$lists" >&2
    echo "(derive such lists from the registry, autograd/op_def.h; see docs/extending.md)" >&2
    exit 1
fi
echo "op_lists_check: ${#files[@]} files scanned, no hand-kept op list outside autograd/op_list.h"
