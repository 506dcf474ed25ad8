#!/bin/sh
# The blocks (nn/blocks/) are built on nabla's public API alone: their sources may include
# <nabla/...>, the C library and their own folder's headers, nothing else of the source tree.
# Usage: blocks_includes_check.sh BLOCKS_DIR
set -eu
dir=$1
bad=$(grep -Hn '^[[:space:]]*#[[:space:]]*include' "$dir"/*.c "$dir"/*.h |
    grep -v -e '<nabla/[a-z_]*\.h>' -e '<[a-z_]*\.h>' -e '<sys/[a-z_]*\.h>' -e '"[a-z_]*\.h"' || true)
# A quoted include must name a header of the folder itself.
for h in $(grep -ho '^[[:space:]]*#[[:space:]]*include "[a-z_]*\.h"' "$dir"/*.c "$dir"/*.h |
    sed 's/.*"\(.*\)"/\1/' | sort -u); do
    [ -f "$dir/$h" ] || bad="$bad
quoted include of \"$h\", which is not in $dir"
done
if [ -n "$bad" ]; then
    echo "blocks_includes_check: the blocks must use the public API only:$bad" >&2
    exit 1
fi
echo "blocks_includes_check: $(ls "$dir"/*.c | wc -l) sources include only <nabla/...>, the C library and their own headers"
