#!/usr/bin/env bash
# Data parallelism end to end with the example trainers:
#  1. toy_tasks: two ranks with one micro-batch each equal one process accumulating two
#     micro-batches of the same size, with the same seed: identical train.csv, identical
#     checkpoint bytes, and the parameter hash both ranks agreed on equals the single
#     process's;
#  2. char_lm the same (train.csv, val.csv, checkpoint, printed sample);
#  3. a two-rank run killed mid-way and resumed with --resume equals the uninterrupted one (rank
#     0 wrote the checkpoints, every rank read them); resuming where there is no checkpoint
#     fails on every rank, with no hang;
#  4. ranks that built different models stop, naming the first differing parameter.
# Usage: dist_examples_check.sh MPIEXEC TOY_TASKS CHAR_LM
set -u
mpiexec=$1 toy=$2 char_lm=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0 failed=0
ok() { echo "ok: $1"; passed=$((passed + 1)); }
bad() { echo "FAIL: $1"; failed=$((failed + 1)); }

flags=(--task reverse --steps 40 --seed 11 --threads 1 --quiet)
"$mpiexec" -np 2 "$toy" "${flags[@]}" --out "$dir/ranks" >"$dir/ranks.out" 2>&1 ||
    bad "mpirun -np 2 toy_tasks failed: $(tail -5 "$dir/ranks.out")"
"$toy" "${flags[@]}" --accum 2 --out "$dir/accum" >"$dir/accum.out" 2>&1 ||
    bad "toy_tasks --accum 2 failed: $(tail -5 "$dir/accum.out")"
"$toy" "${flags[@]}" --out "$dir/plain" >"$dir/plain.out" 2>&1 || bad "toy_tasks failed"
if cmp -s "$dir/ranks/train.csv" "$dir/accum/train.csv" && [ "$(wc -l <"$dir/ranks/train.csv")" -eq 41 ]; then
    ok "train.csv of 2 ranks == train.csv of --accum 2 (40 steps)"
else
    bad "train.csv differs: $(diff "$dir/ranks/train.csv" "$dir/accum/train.csv" | head -4)"
fi
if cmp -s "$dir/ranks/model.safetensors" "$dir/accum/model.safetensors"; then
    ok "checkpoint bytes of 2 ranks == --accum 2"
else
    bad "checkpoints differ"
fi
hash_ranks=$(grep -o 'parameter hash [0-9a-f]* (the same on all 2 rank(s))' "$dir/ranks.out")
hash_accum=$(grep -o 'parameter hash [0-9a-f]*' "$dir/accum.out")
if [ -n "$hash_ranks" ] && [ "${hash_ranks% (*}" = "$hash_accum" ]; then
    ok "both ranks hold the parameters of --accum 2 ($hash_accum)"
else
    bad "parameter hashes: '$hash_ranks' vs '$hash_accum'"
fi
# The global batch doubled: not the same run as one micro-batch (the check can fail).
if ! cmp -s "$dir/plain/train.csv" "$dir/accum/train.csv"; then
    ok "one micro-batch is another run (the comparison above can fail)"
else
    bad "--accum 2 trained exactly like --accum 1"
fi

lm_flags=(--grammar --steps 12 --seed 4 --threads 1 --sample 40)
"$mpiexec" -np 2 "$char_lm" "${lm_flags[@]}" --out "$dir/lm_ranks" >"$dir/lm_ranks.out" 2>&1 ||
    bad "mpirun -np 2 char_lm failed: $(tail -5 "$dir/lm_ranks.out")"
"$char_lm" "${lm_flags[@]}" --accum 2 --out "$dir/lm_accum" >"$dir/lm_accum.out" 2>&1 ||
    bad "char_lm --accum 2 failed: $(tail -5 "$dir/lm_accum.out")"
same=true
for f in train.csv val.csv char_lm.safetensors; do
    cmp -s "$dir/lm_ranks/$f" "$dir/lm_accum/$f" || { same=false; bad "char_lm $f differs"; }
done
sample() { sed -n '/^sample/,$p' "$1"; }
if $same && [ -n "$(sample "$dir/lm_ranks.out")" ] &&
    [ "$(sample "$dir/lm_ranks.out")" = "$(sample "$dir/lm_accum.out")" ]; then
    ok "char_lm: 2 ranks == --accum 2 (logs, checkpoint, sample)"
else
    $same && bad "char_lm samples differ"
fi

rflags=(--task reverse --steps 30 --seed 2 --threads 1 --quiet --checkpoint-every 10)
"$mpiexec" -np 2 "$toy" "${rflags[@]}" --out "$dir/full" >/dev/null 2>&1
NABLA_TEST_KILL_AFTER_STEP=15 "$mpiexec" -np 2 -x NABLA_TEST_KILL_AFTER_STEP "$toy" "${rflags[@]}" \
    --out "$dir/cut" >/dev/null 2>&1
killed=$?
"$mpiexec" -np 2 "$toy" "${rflags[@]}" --out "$dir/cut" --resume >"$dir/resume.out" 2>&1
resumed=$?
if [ $killed -ne 0 ] && [ $resumed -eq 0 ] && cmp -s "$dir/full/train.csv" "$dir/cut/train.csv" &&
    cmp -s "$dir/full/model.safetensors" "$dir/cut/model.safetensors"; then
    ok "2 ranks killed at step 15 and resumed == uninterrupted (train.csv, checkpoint)"
else
    bad "resume under mpirun: killed exit $killed, resumed exit $resumed: $(tail -3 "$dir/resume.out")"
fi
out=$(timeout 120 "$mpiexec" -np 2 "$toy" "${rflags[@]}" --out "$dir/none" --resume 2>&1)
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c 'nothing to resume' <<<"$out")" -ge 1 ]; then
    ok "--resume without a checkpoint fails on every rank (exit $rc)"
else
    bad "--resume without a checkpoint: exit $rc: $out"
fi

out=$(timeout 120 "$mpiexec" -np 1 "$toy" --task reverse --steps 5 --out "$dir/m" : \
    -np 1 "$toy" --task sort --steps 5 --out "$dir/m" 2>&1)
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "differs from rank 0's at tensor #0: rank 0 has 'tok_emb.weight' float32 \[10, 32\], rank 1 has 'tok_emb.weight' float32 \[10, 64\]" <<<"$out"; then
    ok "different models stop every rank, naming the parameter (exit $rc)"
else
    bad "model mismatch: exit $rc: $out"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
