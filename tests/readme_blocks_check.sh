#!/bin/sh
# Every ```c block of the user docs compiles as shown: its lines must appear, contiguously and in
# order, in one C file the build compiles (examples/*.c, tests/out_of_tree/*.c), ignoring
# trailing whitespace. A block that matches no file fails, named by its file, line and first
# line. The check then proves itself: the first block with one line changed must match nothing.
# Run by meson test (suite "source").
# Usage: readme_blocks_check.sh SOURCE_ROOT [MARKDOWN...]   (default: README.md docs/guide.md)
set -eu
root=$1
shift
[ $# -gt 0 ] || set -- README.md docs/guide.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The sources, trailing whitespace stripped.
for src in "$root"/examples/*.c "$root"/tests/out_of_tree/*.c; do
    sed 's/[[:space:]]*$//' "$src" >"$tmp/src.$(echo "$src" | tr / _)"
done

# is_excerpt BLOCK: true if BLOCK's lines after its first (which says where it is) appear
# contiguously in one of the sources.
is_excerpt() {
    for src in "$tmp"/src.*; do
        if awk 'NR == FNR { if (FNR > 1) b[++n] = $0; next }
                { s[++m] = $0 }
                END {
                    if (n == 0) exit 1
                    for (i = 1; i + n - 1 <= m; i++) {
                        for (j = 1; j <= n && s[i + j - 1] == b[j]; j++) ;
                        if (j > n) exit 0
                    }
                    exit 1
                }' "$1" "$src"; then
            return 0
        fi
    done
    return 1
}

status=0 blocks=0 n=0
for md in "$@"; do
    [ -f "$root/$md" ] || { echo "readme_blocks: $md: no such file" >&2; status=1; continue; }
    # Split the ```c blocks into block.N files; the first line of each is "md:line".
    awk -v dir="$tmp" -v md="$md" -v n="$n" '
        { sub(/[ \t\r]+$/, "") }
        !inblock && $0 == "```c" { n++; f = dir "/block." n; print md ":" NR + 1 > f; inblock = 1; next }
        inblock && $0 == "```" { close(f); inblock = 0; next }
        inblock { print > f }
        END { if (inblock) { print md ": a ```c block is not closed" > "/dev/stderr"; exit 1 } }
    ' "$root/$md" || status=1
    n=$(find "$tmp" -name 'block.*' | wc -l)
done
for block in "$tmp"/block.*; do
    [ -f "$block" ] || continue
    blocks=$((blocks + 1))
    if ! is_excerpt "$block"; then
        echo "readme_blocks: $(head -n 1 "$block"): the block starting '$(sed -n 2p "$block")' is" \
            "not a verbatim excerpt of examples/*.c or tests/out_of_tree/*.c" >&2
        status=1
    fi
done
[ "$blocks" -gt 0 ] || { echo "readme_blocks: no C blocks in $*" >&2; exit 1; }

# The check itself: the first block with its last line changed matches no source.
sed '$ s/$/ \/* changed *\//' "$tmp/block.1" >"$tmp/changed"
if is_excerpt "$tmp/changed"; then
    echo "readme_blocks: the check accepts a changed block ($(head -n 1 "$tmp/block.1"))" >&2
    status=1
fi
[ "$status" -eq 0 ] && echo "readme_blocks: $blocks C blocks, each an excerpt of a compiled file"
exit "$status"
