#!/usr/bin/env bash
# Runs examples/head_analysis at a reduced size with a fixed seed and checks: held-out accuracy
# with a head mask of ones is the trained model's (the mask changes nothing), the trained model
# learned the task, removing every head hurts, and heads.csv has a row per number of heads
# removed (0..all).
# Usage: head_analysis_check.sh HEAD_ANALYSIS_BINARY
set -euo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

out=$("$bin" --task sort --steps 400 --heldout 512 --seed 1 --out "$dir" --quiet)
echo "$out"
field() { sed -n "s/$1/\1/p" <<<"$out" | head -1; }
trained=$(field '^sort: trained model: held-out token accuracy \([0-9.]*\)%.*')
all=$(field '^all \([0-9]*\) heads (head mask of ones).*')
with_all=$(field '^all [0-9]* heads (head mask of ones): held-out token accuracy \([0-9.]*\)%')
none=$(field '^all heads removed: held-out token accuracy \([0-9.]*\)%')
[ -n "$trained" ] && [ -n "$with_all" ] && [ -n "$none" ] && [ -n "$all" ] ||
    { echo "FAIL: missing accuracy lines"; exit 1; }
[ "$trained" = "$with_all" ] ||
    { echo "FAIL: all heads give $with_all%, the trained model $trained%"; exit 1; }
awk -v a="$trained" 'BEGIN { exit !(a >= 90) }' ||
    { echo "FAIL: the trained model reaches only $trained%"; exit 1; }
awk -v a="$trained" -v n="$none" 'BEGIN { exit !(n <= a - 30) }' ||
    { echo "FAIL: removing every head leaves $none% of $trained%"; exit 1; }
rows=$(wc -l <"$dir/heads.csv")
[ "$rows" -eq $((all + 2)) ] || { echo "FAIL: heads.csv has $rows lines for $all heads"; exit 1; }
echo "ok: all $all heads $with_all% = trained $trained%; none $none%"
