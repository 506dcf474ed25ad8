#!/usr/bin/env bash
# The shipped libnabla carries no test code: no op catalogue, golden spec or registry, and no
# test hook. Those sit in the library's sources behind #ifdef NABLA_TESTS, and only the test
# library (tests/meson.build: nabla_testing) is built with it.
# The names looked for come from the sources, not from either library:
#   - every op definition (nba_op_<name> for each NB_OP(name) of autograd/op_list.h and each
#     op of tensor/elementwise_ops.h, the lists tests/op_lists_check.sh holds to the
#     definitions) and the registry;
#   - every function a library header declares inside #ifdef NABLA_TESTS (the test hooks);
#   - and any global symbol whose name says test code: golden, catalog(ue), _for_tests,
#     nb_test_/nbtest_, nba_op_.
# Each named symbol must be defined by the test library (so the names were found and the check
# can fail), and by neither the shared library's dynamic symbols (nm -D) nor the static one's.
# Usage: shipped_symbols_check.sh SOURCE_ROOT LIBNABLA_SO LIBNABLA_A TEST_LIB
set -euo pipefail
root=$1 shared=$2 static=$3 testlib=$4
fail() {
    echo "shipped_symbols_check: $*" >&2
    exit 1
}

ops=$( (sed -n 's/^NB_OP(\([a-z_0-9]*\))$/\1/p' "$root/autograd/op_list.h"
    grep -v '^ *[/*]' "$root/tensor/elementwise_ops.h" | grep -o 'X([A-Z_0-9]*, [a-z_0-9]*' | sed 's/.*, //') |
    sed 's/^/nba_op_/')
hooks=$(find "$root/tensor" "$root/autograd" "$root/nn" -name '*.h' -print0 | xargs -0 awk '
    /^#if/ { depth++; if ($0 ~ /^#ifdef NABLA_TESTS/) tests[depth] = 1; next }
    /^#endif/ { delete tests[depth]; depth--; next }
    {
        inside = 0
        for (d in tests) inside = 1
        if (!inside || $0 ~ /^ *(\/\*|\*)/) next
        if (match($0, /[a-z_][a-z_0-9]*\(/)) print substr($0, RSTART, RLENGTH - 1)
    }')
names=$(printf '%s\n%s\nnba_op_registry\nnba_op_registry_count\n' "$ops" "$hooks" | grep . | sort -u)
nops=$(grep -c '^nba_op_' <<<"$names")
nhooks=$(grep -vc '^nba_op_' <<<"$names")
[ "$nops" -ge 10 ] || fail "found only $nops op definitions in $root/autograd"
[ "$nhooks" -ge 3 ] || fail "found only $nhooks test hooks in the library's headers"

defined() { nm --defined-only "$@" 2>/dev/null | awk 'NF >= 3 && $2 ~ /[A-Z]/ { print $3 }' | sort -u; }
in_test=$(defined "$testlib")
in_shared=$(defined -D "$shared")
in_static=$(defined "$static")

missing=$(comm -23 <(echo "$names") <(echo "$in_test"))
[ -z "$missing" ] || fail "the test library $testlib does not define:" $missing
test_like='golden|catalog|_for_tests$|^nb_?test_|^nbtest_|^nba_op_'
grep -qE "$test_like" <<<"$in_test" || fail "the name pattern matches nothing in the test library"

for lib in "$shared" "$static"; do
    if [ "$lib" = "$shared" ]; then syms=$in_shared; else syms=$in_static; fi
    [ -n "$syms" ] || fail "nm found no symbols in $lib"
    leaked=$( (comm -12 <(echo "$names") <(echo "$syms"); grep -E "$test_like" <<<"$syms" || true) | sort -u)
    [ -z "$leaked" ] || fail "$lib defines test-only symbols:" $leaked
done
echo "shipped_symbols_check: none of $nops op definitions, $nhooks test hooks or test-named" \
    "symbols in $(basename "$shared") or $(basename "$static")"
