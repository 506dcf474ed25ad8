#!/usr/bin/env bash
# The character LM trains briefly on its built-in grammar text, its loss falls, it samples,
# and --eval reloads the checkpoint it wrote. Usage: char_lm_check.sh CHAR_LM_BINARY
set -euo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" --steps 60 --sample 40 --out "$dir" >"$dir/log"
cat "$dir/log"
first=$(awk -F, 'NR == 2 { print $2 }' "$dir/train.csv")
last=$(awk -F, 'END { print $2 }' "$dir/train.csv")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' ||
    { echo "FAIL: loss went from $first to $last"; exit 1; }
[ -s "$dir/char_lm.safetensors" ] || { echo "FAIL: no checkpoint"; exit 1; }
"$bin" --eval "$dir/char_lm.safetensors" --sample 40 >/dev/null
if "$bin" --eval "$dir/missing.safetensors" 2>/dev/null; then
    echo "FAIL: a missing checkpoint was accepted"; exit 1
fi
echo "ok: loss $first -> $last"
