#!/bin/sh
# Every ```c block of the user docs compiles as shown: its lines must appear, contiguously and in
# order, in one C file the build compiles (examples/*.c, tests/out_of_tree/*.c), ignoring
# trailing whitespace. A block that matches no file fails, named by its file, line and first
# line. Run by meson test (suite "source").
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

status=0 blocks=0
for md in "$@"; do
    [ -f "$root/$md" ] || { echo "readme_blocks: $md: no such file" >&2; status=1; continue; }
    rm -f "$tmp"/block.*
    # Split the ```c blocks into block.N files; the first line of each is "md:line".
    awk -v dir="$tmp" -v md="$md" '
        { sub(/[ \t\r]+$/, "") }
        !inblock && $0 == "```c" { n++; f = dir "/block." n; print md ":" NR + 1 > f; inblock = 1; next }
        inblock && $0 == "```" { close(f); inblock = 0; next }
        inblock { print > f }
        END { if (inblock) { print md ": a ```c block is not closed" > "/dev/stderr"; exit 1 } }
    ' "$root/$md" || status=1
    for block in "$tmp"/block.*; do
        [ -f "$block" ] || continue
        blocks=$((blocks + 1))
        where=$(head -n 1 "$block")
        first=$(sed -n 2p "$block")
        found=
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
                    }' "$block" "$src"; then
                found=1
                break
            fi
        done
        if [ -z "$found" ]; then
            echo "readme_blocks: $where: the block starting '$first' is not a verbatim excerpt of examples/*.c or tests/out_of_tree/*.c" >&2
            status=1
        fi
    done
done
[ "$status" -eq 0 ] && echo "readme_blocks: $blocks C blocks, each an excerpt of a compiled file"
exit "$status"
