#!/bin/sh
# The README's install steps work as written: runs the shell block under "## Install and build
# against it" line by line in a copy of the source tree, with HOME a temporary directory (so
# "$HOME/.local" is a fresh prefix), prog.c = examples/readme_example.c and trainer.c =
# examples/readme_dist.c. The apt-get line is checked instead of run: every package it names
# must be installed (scripts/test installs them). Under root, Open MPI's documented variables
# let `mpirun` run as the block writes it. Run by meson test (suite "install", plain pass).
# Usage: readme_install_check.sh SOURCE_ROOT
set -eu
root=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "readme_install_check: $*" >&2
    exit 1
}

# The block, with its backslash-continued lines joined.
awk '/^## Install and build against it/ { s = 1; next }
     s == 1 && /^```sh/ { s = 2; next }
     s == 2 && /^```/ { exit }
     s == 2 { if (sub(/\\$/, "")) { line = line $0; next } print line $0; line = "" }' \
    "$root/README.md" >"$tmp/block.sh"
[ -s "$tmp/block.sh" ] || fail "README.md has no sh block under '## Install and build against it'"

mkdir "$tmp/src" "$tmp/home"
(cd "$root" && git ls-files -z 2>/dev/null | xargs -0 -I{} cp --parents {} "$tmp/src/") ||
    fail "cannot copy the source tree (git ls-files)"
cp "$root/examples/readme_example.c" "$tmp/src/prog.c"
cp "$root/examples/readme_dist.c" "$tmp/src/trainer.c"
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

n=0
while IFS= read -r line; do
    n=$((n + 1))
    case "$line" in
    "" | "#"*) continue ;;
    "sudo apt-get install"*)
        for pkg in $(echo "${line#sudo apt-get install}" | sed 's/#.*//'); do
            dpkg -s "$pkg" >/dev/null 2>&1 || fail "README package $pkg is not installed"
        done
        continue ;;
    esac
    echo "\$ $line"
    # Each line in a shell of its own that starts from the variables the lines before exported.
    touch "$tmp/env"
    # The line's own status is the shell's: export -p after it would succeed either way.
    (cd "$tmp/src" && HOME="$tmp/home" sh -c ". '$tmp/env'
$line
status=\$?
export -p >'$tmp/env'
exit \$status") >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "line $n failed: $line"; }
    tail -3 "$tmp/out"
done <"$tmp/block.sh"
echo "readme_install_check: the README's install block ran as written"
