#!/usr/bin/env bash
# The character LM trains briefly on its default corpus (the fortunes package's English files),
# its loss falls, it reports a validation loss in bits per character, it samples, and --eval
# rebuilds the model from the checkpoint alone (no training flags); a checkpoint without a
# configuration and a missing one are refused; --grammar still trains.
# Usage: char_lm_check.sh CHAR_LM_BINARY
set -euo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" --steps 40 --sample 40 --out "$dir" >"$dir/log"
cat "$dir/log"
grep -q "from the fortunes in" "$dir/log" || { echo "FAIL: did not train on the fortunes"; exit 1; }
first=$(awk -F, 'NR == 2 { print $2 }' "$dir/train.csv")
last=$(awk -F, 'END { print $2 }' "$dir/train.csv")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' ||
    { echo "FAIL: loss went from $first to $last"; exit 1; }
# validation in bits per character: below the log2(vocabulary) of a uniform guess (about 6.6)
bpc=$(awk -F, 'END { print $3 }' "$dir/val.csv")
awk -v b="$bpc" 'BEGIN { exit !(b > 0 && b < 6) }' || { echo "FAIL: validation at $bpc bits per character"; exit 1; }
[ -s "$dir/char_lm.safetensors" ] || { echo "FAIL: no checkpoint"; exit 1; }
"$bin" --eval "$dir/char_lm.safetensors" --sample 40 --top-k 5 >"$dir/eval"
cat "$dir/eval"
grep -q "d_model 96, 4 heads, 2 layers, context 64" "$dir/eval" || { echo "FAIL: --eval did not read the configuration"; exit 1; }
grep -q "validation loss" "$dir/eval" || { echo "FAIL: --eval reported no validation loss"; exit 1; }
if "$bin" --eval "$dir/missing.safetensors" 2>/dev/null; then
    echo "FAIL: a missing checkpoint was accepted"; exit 1
fi
"$bin" --grammar --steps 20 --sample 20 --out "$dir/grammar" >"$dir/glog"
grep -q "from the built-in grammar" "$dir/glog" || { echo "FAIL: --grammar"; exit 1; }
# A text sharing no character with the sampling prompt: a sample, not a crash.
for _ in $(seq 400); do printf '0123456789'; done >"$dir/digits.txt"
"$bin" --text "$dir/digits.txt" --steps 2 --sample 10 --out "$dir/digits" >"$dir/digits.log" 2>&1 ||
    { cat "$dir/digits.log"; echo "FAIL: a text without the prompt's characters"; exit 1; }
echo "ok: loss $first -> $last, validation $bpc bits per character; a text without the prompt's characters samples"
