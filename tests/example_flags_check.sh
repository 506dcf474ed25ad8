#!/usr/bin/env bash
# Bad flags to the example programs are refused before any work: exit code 2, a message
# naming the flag and the usage line. An example accepts exactly the trainer flags its usage
# lists (the ones it honours).
# Usage: example_flags_check.sh TOY_TASKS CHAR_LM HEAD_ANALYSIS
set -euo pipefail
toy=$1 lm=$2 heads=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

refuse() { # message-pattern program args...
    local pattern=$1 rc=0
    shift
    "$@" >"$dir/stdout" 2>"$dir/stderr" || rc=$?
    if [ "$rc" -ne 2 ]; then
        echo "FAIL: exit $rc, not 2: ${*:2}"; failures=$((failures + 1)); return
    fi
    if ! grep -q -- "$pattern" "$dir/stderr" || ! grep -q '^usage:' "$dir/stderr"; then
        echo "FAIL: no '$pattern' and usage for: ${*:2}"; cat "$dir/stderr"
        failures=$((failures + 1)); return
    fi
    if [ -e "$dir/run" ]; then
        echo "FAIL: ${*:2} created its output directory"; failures=$((failures + 1))
    fi
    echo "ok: ${*:2} -> $(head -1 "$dir/stderr")"
}

# Each run names an output directory, which must not appear: flags are checked before any work.
toy_run="$toy --out $dir/run" lm_run="$lm --out $dir/run"
for prog in "$toy_run --task shift" "$lm_run"; do
    # shellcheck disable=SC2086 # $prog is a binary and its fixed flags
    {
        for steps in -1 0 abc 12x '' ' 5' 1e3 99999999999 9223372036854775808; do
            refuse "--steps" $prog --steps "$steps"
        done
        for threads in 0 -4 1000 abc 2.5; do
            refuse "--threads" $prog --threads "$threads"
        done
        for seed in -1 abc 18446744073709551616 ''; do
            refuse "--seed" $prog --seed "$seed"
        done
        refuse "--steps needs a value" $prog --steps
        refuse "unknown option '--stpes'" $prog --stpes 10
        refuse "unknown option 'stray'" $prog stray
    }
done
# shellcheck disable=SC2086
{
    refuse "unknown task 'nope'" $toy_run --task nope
    refuse "--task is required" $toy_run --steps 10
    for n in -5 abc 1e9; do refuse "--sample" $lm_run --sample "$n"; done
    for t in -1 nan inf abc 1e400; do refuse "--temperature" $lm_run --temperature "$t"; done
    refuse "--tokenizer is 'char' or 'bpe', not 'words'" $lm_run --tokenizer words
    refuse "--vocab is the size of a BPE" $lm_run --vocab 300
    for v in 255 65537 abc; do refuse "--vocab" $lm_run --tokenizer bpe --vocab "$v"; done
    refuse "unknown block 'gemma' (gpt, llama or deepseek)" $lm_run --block gemma
    for d in 4 abc 5000; do refuse "--dim" $lm_run --dim "$d"; done
    refuse "--dim must be --heads times an even head size" $lm_run --dim 90 --heads 4
    for l in 0 17; do refuse "--layers" $lm_run --layers "$l"; done
}

# The trainer flags (common/train_flags.h), each with a good value: a program whose usage lists one
# must accept it (--help after it exits 0); one whose usage does not must refuse it as unknown,
# not accept it and ignore it.
trainer_flags=("--steps 3" "--seed 7" "--threads 1" "--lr 0.01" "--out $dir/run" \
    "--eval $dir/none.safetensors" "--checkpoint-every 2" "--resume" "--accum 2")
for prog in "$toy --task shift" "$heads --task shift" "$lm --grammar"; do
    # shellcheck disable=SC2086
    listed=$($prog --help)
    for flag in "${trainer_flags[@]}"; do
        name=${flag%% *}
        if grep -q -- "\[$name[] ]" <<<"$listed"; then
            # shellcheck disable=SC2086
            if $prog $flag --help >/dev/null; then
                echo "ok: ${prog%% *} accepts $name, which its usage lists"
            else
                echo "FAIL: ${prog%% *} refuses $name, which its usage lists"
                failures=$((failures + 1))
            fi
        else
            # shellcheck disable=SC2086
            refuse "unknown option '$name'" $prog --out "$dir/run" $flag
        fi
    done
done

# Good values still parse: --help exits 0 after them, and prints the usage to stdout.
for prog in "$toy --task sort --steps 10 --threads 64 --seed 18446744073709551615" \
    "$lm --steps 1 --threads 1 --sample 0 --temperature 0" \
    "$heads --task sort --steps 10 --threads 2 --seed 3 --heldout 64 --quiet"; do
    # shellcheck disable=SC2086
    if ! $prog --help >"$dir/stdout" || ! grep -q '^usage:' "$dir/stdout"; then
        echo "FAIL: good flags refused: $prog"; failures=$((failures + 1))
    fi
done
[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "ok: every bad flag refused with exit 2"
