#!/bin/sh
# Installs the build into a temporary directory and checks that pkg-config finds nabla there
# and that a program built from pkg-config's flags alone compiles, links (shared and static)
# and runs. Run by meson test (suite "install").
# Then it builds tests/out_of_tree/user_extension.c, a program that defines its own
# differentiable function and module with the public API only, outside the source tree, and
# runs it as a user would (no LD_LIBRARY_PATH: nabla.pc carries an rpath). Likewise
# tests/out_of_tree/custom_generate.c, the README's example of a model of the user's own
# generating through nb_generate with a cache of its own design, built with the command its
# comment gives (plus warnings as errors).
# And tests/out_of_tree/blocks_lm.c, which trains and generates with the installed
# Llama-style blocks (<nabla/blocks.h>).
# Usage: install_check.sh MESON BUILD_DIR VERSION USER_EXTENSION_C CUSTOM_GENERATE_C BLOCKS_LM_C CC...
set -eu
meson=$1 build=$2 version=$3 user_extension=$4 custom_generate=$5 blocks_lm=$6
shift 6 # the rest is the C compiler command

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "install_check: $*" >&2
    exit 1
}

"$meson" install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; fail "meson install failed"; }

pc=$(find "$tmp/root" -name nabla.pc)
[ -n "$pc" ] || fail "nabla.pc was not installed"
# The .pc names the configured prefix; point it at where DESTDIR put the files.
prefix=$(sed -n 's/^prefix=//p' "$pc")
pkgconf() {
    PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --define-variable=prefix="$tmp/root$prefix" "$@"
}

pkgconf --exists nabla || fail "pkg-config does not find nabla in $(dirname "$pc")"
[ "$(pkgconf --modversion nabla)" = "$version" ] ||
    fail "pkg-config reports version $(pkgconf --modversion nabla), expected $version"
cflags=$(pkgconf --cflags nabla)
case "$cflags" in *"$tmp/root"*) ;; *) fail "cflags '$cflags' do not point into the install" ;; esac
libdir=$(pkgconf --variable=libdir nabla)
[ -f "$libdir/libnabla.so" ] || fail "no libnabla.so in $libdir"
[ -f "$libdir/libnabla.a" ] || fail "no libnabla.a in $libdir"
for h in nabla.h tensor.h autograd.h ops.h module.h function.h parallel.h nn.h blocks.h; do
    [ -f "$tmp/root$prefix/include/nabla/$h" ] || fail "header nabla/$h was not installed"
done

cat >"$tmp/user.c" <<'EOF'
#include <nabla/nabla.h>
int main(void) {
    nb_scope_begin();
    nb_tensor *x = nb_view(nb_arange(NB_F32, 0, 6, 1), NB_SHAPE(2, 3));
    nb_print(nb_transpose(x, 0, 1));
    nb_scope_end();
    nb_shutdown();
    return 0;
}
EOF
expected='tensor([[0., 3.],
        [1., 4.],
        [2., 5.]], shape=[3, 2], dtype=float32)'

# Shared: only what pkg-config says; the loader finds libnabla.so through the rpath that
# pkg-config's flags put in the program (the prefix is not one the loader searches).
# shellcheck disable=SC2046 # word splitting of pkg-config flags is intended
"$@" -std=c11 "$tmp/user.c" -o "$tmp/user_shared" $(pkgconf --cflags --libs nabla) ||
    fail "a program using the installed headers does not build with pkg-config's flags"
out=$(env -u LD_LIBRARY_PATH "$tmp/user_shared") || fail "the shared-linked program failed"
[ "$out" = "$expected" ] || fail "the shared-linked program printed: $out"

# A program that does not train on several processes loads no Open MPI, and nabla's flags
# carry none of its paths: MPI lives in libnabla_dist (pkg-config nabla-dist).
case "$cflags $(pkgconf --libs nabla)" in *mpi*) fail "pkg-config nabla mentions MPI: $cflags" ;; esac
if command -v ldd >/dev/null 2>&1; then
    ldd "$tmp/user_shared" | grep -q 'libmpi' &&
        fail "a program that does not use MPI loads it: $(ldd "$tmp/user_shared" | grep libmpi)"
fi
cat >"$tmp/dist_user.c" <<'EOF2'
#include <nabla/nabla.h>
#include <stdio.h>
int main(int argc, char **argv) {
    if (!nb_dist_init(&argc, &argv)) return 1;
    printf("rank %d of %d\n", nb_dist_rank(), nb_dist_world_size());
    nb_dist_finalize();
    return 0;
}
EOF2
# shellcheck disable=SC2046
"$@" -std=c11 "$tmp/dist_user.c" -o "$tmp/dist_user" $(pkgconf --cflags --libs nabla-dist) ||
    fail "a program using nabla/dist.h does not build with pkg-config nabla-dist's flags"
out=$(env -u LD_LIBRARY_PATH "$tmp/dist_user") || fail "the nabla-dist program failed"
[ "$out" = "rank 0 of 1" ] || fail "the nabla-dist program printed: $out"

# Static: the archive plus the private dependencies from pkg-config --static (sleef, -lm).
# shellcheck disable=SC2046
"$@" -std=c11 "$tmp/user.c" -o "$tmp/user_static" $(pkgconf --cflags nabla) \
    "$libdir/libnabla.a" $(pkgconf --static --libs nabla | sed 's/-lnabla//') ||
    fail "a program does not link statically with pkg-config --static's flags"
out=$("$tmp/user_static") || fail "the statically linked program failed"
[ "$out" = "$expected" ] || fail "the statically linked program printed: $out"

# A user's extension, built in a directory of its own: the compiler sees the installed
# headers only (a nabla source tree include would fail the build: there is none here).
mkdir "$tmp/ext"
cp "$user_extension" "$tmp/ext/user_extension.c"
# shellcheck disable=SC2046
(cd "$tmp/ext" && "$@" -std=c11 -Wall -Wextra -Werror user_extension.c -o user_extension \
    $(pkgconf --cflags --libs nabla) -lm) >"$tmp/ext.log" 2>&1 ||
    { cat "$tmp/ext.log" >&2; fail "the out-of-tree extension does not build"; }
(cd "$tmp/ext" && env -u LD_LIBRARY_PATH ./user_extension) >"$tmp/ext_run.log" 2>&1 ||
    { cat "$tmp/ext_run.log" >&2; fail "the out-of-tree extension failed"; }
grep -q "user extension: ok" "$tmp/ext_run.log" || fail "the extension did not finish"
sed 's/^/  /' "$tmp/ext_run.log"

# A program of tests/out_of_tree/, built in a directory of its own with the command its
# comment gives (plus warnings as errors) and run as a user would; it prints "NAME: ...ok".
build_and_run() {
    src=$1 name=$(basename "$1" .c)
    shift # the rest is the C compiler command
    mkdir "$tmp/$name"
    cp "$src" "$tmp/$name/$name.c"
    # shellcheck disable=SC2046
    (cd "$tmp/$name" && "$@" -std=c11 -Wall -Wextra -Werror "$name.c" -o "$name" \
        $(pkgconf --cflags --libs nabla)) >"$tmp/$name.log" 2>&1 ||
        { cat "$tmp/$name.log" >&2; fail "tests/out_of_tree/$name.c does not build"; }
    (cd "$tmp/$name" && env -u LD_LIBRARY_PATH "./$name") >"$tmp/${name}_run.log" 2>&1 ||
        { cat "$tmp/${name}_run.log" >&2; fail "tests/out_of_tree/$name.c failed"; }
    grep -q "^$name: .*ok" "$tmp/${name}_run.log" || fail "$name did not finish"
    sed 's/^/  /' "$tmp/${name}_run.log"
}
build_and_run "$custom_generate" "$@"
build_and_run "$blocks_lm" "$@"

echo "install_check: nabla $version installs, pkg-config finds it, shared and static links work, a user extension builds, checks, runs a parallel loop and trains, a user model generates, the installed blocks train and generate"
