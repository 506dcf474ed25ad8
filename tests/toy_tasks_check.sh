#!/usr/bin/env bash
# Trains one toy task at a reduced budget with a fixed seed and checks: held-out accuracy
# reaches the threshold; for a causal task, every answer generated through nb_generate (KV
# cache) is the full forward's prediction; --eval on the written checkpoint reports the same
# accuracy and generations; and a missing or corrupt checkpoint is a clear error (non-zero
# exit, message naming the file).
# Usage: toy_tasks_check.sh TOY_TASKS_BINARY TASK STEPS MIN_ACCURACY_PERCENT [BLOCK]
set -euo pipefail
bin=$1 task=$2 steps=$3 min=$4 block=${5:-gpt}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

out=$("$bin" --task "$task" --block "$block" --steps "$steps" --seed 1 --out "$dir" --quiet)
echo "$out"
acc=$(sed -n "s/^$task: held-out token accuracy \([0-9.]*\)% .*/\1/p" <<<"$out" | head -1)
[ -n "$acc" ] || { echo "FAIL: no accuracy line"; exit 1; }
awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a >= m) }' ||
    { echo "FAIL: accuracy $acc% below $min%"; exit 1; }
for f in train.csv model.safetensors; do
    [ -s "$dir/$f" ] || { echo "FAIL: $f missing"; exit 1; }
done
gen=$(grep "^$task: generated answers" <<<"$out" || true)
case $task in
shift | recall)
    [ -n "$gen" ] || { echo "FAIL: a causal task without generated answers"; exit 1; }
    read -r total same < <(sed -n 's/.*(\([0-9]*\) sequences), \([0-9]*\) of them.*/\1 \2/p' <<<"$gen")
    [ -n "$total" ] && [ "$same" = "$total" ] ||
        { echo "FAIL: generated answers are not all the full forward's predictions"; exit 1; }
    ;;
*) [ -z "$gen" ] || { echo "FAIL: a bidirectional task generated"; exit 1; } ;;
esac
lines=$(wc -l <"$dir/train.csv")
[ "$lines" -eq $((steps + 1)) ] || { echo "FAIL: train.csv has $lines lines"; exit 1; }

eval_out=$("$bin" --task "$task" --block "$block" --eval "$dir/model.safetensors")
echo "$eval_out"
grep -q "held-out token accuracy $acc%" <<<"$eval_out" ||
    { echo "FAIL: --eval did not reproduce $acc%"; exit 1; }
[ -z "$gen" ] || grep -qxF "$gen" <<<"$eval_out" ||
    { echo "FAIL: --eval did not generate the same answers"; exit 1; }

expect_error() { # what, file
    if err=$("$bin" --task "$task" --block "$block" --eval "$2" 2>&1); then
        echo "FAIL: --eval accepted a $1 checkpoint"; exit 1
    fi
    echo "$err"
    grep -q "$2" <<<"$err" || { echo "FAIL: the error does not name $2"; exit 1; }
}
expect_error missing "$dir/nope.safetensors"
head -c 100 "$dir/model.safetensors" >"$dir/truncated.safetensors"
expect_error truncated "$dir/truncated.safetensors"
printf 'not a checkpoint at all, just text\n' >"$dir/garbage.safetensors"
expect_error garbage "$dir/garbage.safetensors"
echo "ok: $task ($block block) reached $acc% in $steps steps; --eval and bad checkpoints behave"
