#!/bin/sh
# Installs the build into a temporary directory and checks that pkg-config finds nabla there
# and that a program built from pkg-config's flags alone compiles, links (shared and static)
# and runs. Run by meson test (suite "install").
# Usage: install_check.sh MESON BUILD_DIR VERSION CC...
set -eu
meson=$1 build=$2 version=$3
shift 3 # the rest is the C compiler command

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
for h in nabla.h tensor.h autograd.h ops.h; do
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

# Shared: only what pkg-config says, found at run time through LD_LIBRARY_PATH.
# shellcheck disable=SC2046 # word splitting of pkg-config flags is intended
"$@" -std=c11 "$tmp/user.c" -o "$tmp/user_shared" $(pkgconf --cflags --libs nabla) ||
    fail "a program using the installed headers does not build with pkg-config's flags"
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/user_shared") || fail "the shared-linked program failed"
[ "$out" = "$expected" ] || fail "the shared-linked program printed: $out"

# Shared without LD_LIBRARY_PATH, as the README builds it: the library directory recorded as
# an rpath, so the program starts from anywhere.
# shellcheck disable=SC2046
"$@" -std=c11 "$tmp/user.c" -o "$tmp/user_rpath" $(pkgconf --cflags --libs nabla) \
    -Wl,-rpath,"$(pkgconf --variable=libdir nabla)" ||
    fail "a program does not build with pkg-config's flags and an rpath"
out=$(env -u LD_LIBRARY_PATH "$tmp/user_rpath") || fail "the rpath-linked program failed to start"
[ "$out" = "$expected" ] || fail "the rpath-linked program printed: $out"

# Static: the archive plus the private dependencies from pkg-config --static (sleef, -lm).
# shellcheck disable=SC2046
"$@" -std=c11 "$tmp/user.c" -o "$tmp/user_static" $(pkgconf --cflags nabla) \
    "$libdir/libnabla.a" $(pkgconf --static --libs nabla | sed 's/-lnabla//') ||
    fail "a program does not link statically with pkg-config --static's flags"
out=$("$tmp/user_static") || fail "the statically linked program failed"
[ "$out" = "$expected" ] || fail "the statically linked program printed: $out"

echo "install_check: nabla $version installs, pkg-config finds it, shared and static links work"
