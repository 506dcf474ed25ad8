#!/usr/bin/env bash
# Adds an op by the docs: docs/extending.md's "A unary elementwise op, step by step" gives
# each step as a code block under a marker naming its file and place,
#   <!-- new_op: FILE after|before "A LINE'S TEXT" -->
# This script applies the blocks as they stand to a copy of the sources, builds the files
# they touch, links the catalogue test (tests/test_catalogue.c) with them in place of the
# test library's own, and runs it: the new op must be registered, gradchecked and pass.
# Then it leaves out one step at a time; each build must then fail (a missing kernel, list
# line, definition or declaration does not compile or link), so the check can fail and a
# step the docs list cannot be one the build does not need.
# Usage: new_op_check.sh SOURCE_ROOT TEST_LIB HARNESS_LIB CC...
set -euo pipefail
root=$1 testlib=$2 harness=$3
shift 3 # the rest is the C compiler command
fail() {
    echo "new_op_check: $*" >&2
    exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The steps: "FILE|after|ANCHOR" per line in steps.txt, block k in block.k.
awk -v dir="$tmp" '
    match($0, /^<!-- new_op: [^ ]+ (after|before) ".*" -->$/) {
        spec = substr($0, 14, length($0) - 17)
        split(spec, w, " "); file = w[1]; where = w[2]
        anchor = substr(spec, length(file) + length(where) + 4); sub(/"$/, "", anchor)
        n++; print file "|" where "|" anchor > (dir "/steps.txt"); want = 1; next
    }
    want && /^```c$/ { inblock = 1; want = 0; next }
    inblock && /^```$/ { inblock = 0; next }
    inblock { print > (dir "/block." n) }
' "$root/docs/extending.md"
nsteps=$(wc -l <"$tmp/steps.txt" 2>/dev/null || echo 0)
[ "$nsteps" -ge 5 ] || fail "found $nsteps marked steps in docs/extending.md (expected the list, the kernels, the op, its definition and its declaration)"
op=$(sed -n 's/^ *X([A-Z_0-9]*, \([a-z_0-9]*\),.*/\1/p' "$tmp/block.1")
[ -n "$op" ] || fail "step 1 of docs/extending.md is not a line of NBT_UNARY_OPS"

# Copies the sources and applies every step but $1 (0: all of them).
apply_steps() {
    local omit=$1 k=0 file where anchor
    rm -rf "$tmp/src" && mkdir -p "$tmp/src/tests"
    cp -r "$root/tensor" "$root/autograd" "$root/include" "$tmp/src/"
    cp "$root/tests/test_catalogue.c" "$root/tests/harness.h" "$tmp/src/tests/"
    while IFS='|' read -r file where anchor; do
        k=$((k + 1))
        [ "$k" = "$omit" ] && continue
        awk -v anchor="$anchor" -v where="$where" -v block="$tmp/block.$k" '
            function put() { while ((getline l < block) > 0) print l; done = 1 }
            !done && index($0, anchor) && where == "before" { put() }
            { print }
            !done && index($0, anchor) && where == "after" { put() }
            END { exit done ? 0 : 1 }' "$tmp/src/$file" >"$tmp/edited" ||
            fail "step $k: no line with '$anchor' in $file"
        mv "$tmp/edited" "$tmp/src/$file"
    done <"$tmp/steps.txt"
}

# Builds the catalogue test with the library files the steps concern; the compiler's messages go to
# $tmp/build.log. -Werror=missing-prototypes: a public function needs its declaration.
flags=(-std=c11 -O1 -D_DEFAULT_SOURCE -DNABLA_TESTS -fno-fast-math -ffp-contract=off -Wall
    -Wextra -Werror -Wmissing-prototypes -I"$tmp/src/include" -I"$tmp/src" -I"$tmp/src/tests")
libs=$(pkg-config --libs sleef jansson zlib cunit)
# Every library file that sees the op lists is rebuilt: a new line renumbers the enums.
mapfile -t touched < <(cd "$root" && grep -lE '#include ".*(elementwise_kernels|chunked|elementwise_ops|op_list)\.h"' \
    tensor/*.c autograd/*.c nn/*.c)
[ "${#touched[@]}" -ge 3 ] || fail "found only ${touched[*]} including the op lists"
build() {
    local objs=()
    for f in "${touched[@]}"; do
        "$@" "${flags[@]}" -c "$tmp/src/$f" -o "$tmp/src/${f//\//_}.o" || return 1
        objs+=("$tmp/src/${f//\//_}.o")
    done
    "$@" "${flags[@]}" -Wno-missing-prototypes -c "$tmp/src/tests/test_catalogue.c" \
        -o "$tmp/src/catalogue.o" || return 1
    # The new objects come first, so the test library's own copies of them are not linked.
    "$@" -o "$tmp/catalogue" "$tmp/src/catalogue.o" "${objs[@]}" "$harness" "$testlib" \
        $libs -lcsv -lm -lpthread || return 1
}

apply_steps 0
build "$@" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log" >&2; fail "the op built by all $nsteps steps does not build"; }
nm "$tmp/catalogue" >"$tmp/nm.txt"
grep -q " [RDT] nba_op_$op$" "$tmp/nm.txt" || fail "nba_op_$op is not in the built catalogue test"
NABLA_CROWD_CHECK=0 "$tmp/catalogue" >"$tmp/run.log" 2>&1 || { grep -v "^  ok" "$tmp/run.log" >&2; fail "the catalogue test fails with $op added"; }
echo "new_op_check: $op added by the $nsteps steps of docs/extending.md passes the catalogue test"

for ((k = 1; k <= nsteps; k++)); do
    apply_steps "$k"
    if build "$@" >"$tmp/build.log" 2>&1; then
        fail "without step $k ($(sed -n "${k}p" "$tmp/steps.txt")) $op still builds"
    fi
    echo "new_op_check: without step $k ($(cut -d'|' -f1 <<<"$(sed -n "${k}p" "$tmp/steps.txt")")):" \
        "$(grep -m1 -E 'error|undefined reference' "$tmp/build.log" | sed "s|$tmp/src/||")"
done
