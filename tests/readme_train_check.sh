#!/usr/bin/env bash
# Runs examples/readme_train.c (the README's training program) and checks: it learns (best
# validation accuracy >= 95%), writes its logs, curve and checkpoints, and --resume of the
# finished run trains nothing and reports the same best.
# Usage: readme_train_check.sh README_TRAIN_BINARY
set -euo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$("$bin" "$dir/run")
echo "$out"
best=$(sed -n 's/^best accuracy \([0-9.]*\) after .*/\1/p' <<<"$out")
[ -n "$best" ] || { echo "FAIL: no best accuracy line"; exit 1; }
awk -v a="$best" 'BEGIN { exit !(a >= 0.95) }' || { echo "FAIL: best accuracy $best < 0.95"; exit 1; }
for f in train.csv val.csv best.safetensors resume.json curve.png; do
    [ -s "$dir/run/$f" ] || { echo "FAIL: $f missing"; exit 1; }
done
again=$("$bin" "$dir/run" --resume)
echo "$again"
grep -q "(0 in this run" <<<"$again" || { echo "FAIL: the resumed run trained again"; exit 1; }
[ "$(grep '^best accuracy' <<<"$again")" = "$(grep '^best accuracy' <<<"$out")" ] ||
    { echo "FAIL: the resumed run reports another best"; exit 1; }
echo "ok: best accuracy $best; resuming the finished run changes nothing"
