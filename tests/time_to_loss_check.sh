#!/usr/bin/env bash
# bench/time_to_loss's nabla side (bench/char_lm_nabla) on the fortunes, briefly, so that it
# cannot rot: a loose target is reached and reported in the result line bench/time_to_loss
# reads; the loss before training is near a uniform guess over the 96 characters (ln 96 =
# 4.56); a target it cannot reach exits 1 with reached=no; --export writes the twin's file
# (the model's parameters, the data and the settings); bad flags exit 2.
# Usage: time_to_loss_check.sh CHAR_LM_NABLA_BINARY
set -euo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" --max-steps 40 --eval-every 10 --target 3.0 --threads 2 >"$dir/log"
cat "$dir/log"
result=$(grep '^result side=nabla threads=2 reached=yes ' "$dir/log") ||
    { echo "FAIL: no result line with reached=yes"; exit 1; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$result"; }
steps=$(field steps) loss=$(field val_loss) initial=$(field initial_val_loss)
[ "$(field target)" = 3.0000 ] || { echo "FAIL: target $(field target)"; exit 1; }
awk -v s="$steps" -v l="$loss" -v i="$initial" -v r="$(field peak_rss_mb)" -v w="$(field wall_s)" \
    'BEGIN { exit !(s >= 10 && s <= 40 && s % 10 == 0 && l <= 3.0 && l > 1 &&
                    i > 4.0 && i < 5.5 && r > 0 && w > 0) }' ||
    { echo "FAIL: steps $steps, loss $loss, initial $initial"; exit 1; }
# every evaluation is printed, the last one the result's
grep -q "^step $steps val_loss " "$dir/log" || { echo "FAIL: no evaluation at step $steps"; exit 1; }

rc=0
"$bin" --max-steps 3 --eval-every 2 --target 0 --quiet >"$dir/miss" || rc=$?
cat "$dir/miss"
[ "$rc" = 1 ] || { echo "FAIL: a missed target exited $rc"; exit 1; }
grep -q '^result side=nabla .* reached=no steps=3 ' "$dir/miss" ||
    { echo "FAIL: a missed target was not reported"; exit 1; }
[ "$(grep -c . "$dir/miss")" = 1 ] || { echo "FAIL: --quiet printed more than the result"; exit 1; }

"$bin" --max-steps 7 --export "$dir/twin.safetensors" >"$dir/export"
[ ! -s "$dir/export" ] || { cat "$dir/export"; echo "FAIL: --export printed"; exit 1; }
header=$(head -c 4096 "$dir/twin.safetensors" | tr -d '\0')
for want in '"tok_emb.weight"' '"blocks.1.ff.fc2.bias"' '"head.weight"' '"data.train"' \
    '"data.val"' '"data.order":{"dtype":"I64","shape":[7,16]' '"data.val_starts"' \
    '"ttl.max_steps":"7"' '"ttl.vocab":"96"' '"ttl.target":"1.854'; do
    grep -qF "$want" <<<"$header" || { echo "FAIL: the twin's file has no $want"; exit 1; }
done

for bad in "--target" "--threads 0" "--max-steps x" "--frobnicate"; do
    rc=0
    "$bin" $bad >/dev/null 2>"$dir/err" || rc=$?
    [ "$rc" = 2 ] && grep -q usage "$dir/err" || { echo "FAIL: '$bad' exited $rc"; exit 1; }
done
echo "time_to_loss check passed"
