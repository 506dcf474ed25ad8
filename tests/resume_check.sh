#!/usr/bin/env bash
# Killed and resumed training equals uninterrupted training bit for bit (checkpoint bytes,
# train.csv rows, the sample printed afterwards), for toy_tasks and char_lm (gpt and deepseek); --resume refuses
# a directory without a checkpoint or with another run's; stale temporaries of killed saves are
# removed by the next checkpoint; a blown-up run (huge --lr) stops
# with a message naming the step and the first parameter whose gradient is not finite.
# Usage: resume_check.sh TOY_TASKS CHAR_LM
set -euo pipefail
toy=$1 lm=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# Runs "$@" and succeeds only if it exits with status $1, keeping its output in $dir/log.
expect_exit() {
    local want=$1 rc=0
    shift
    "$@" >"$dir/log" 2>&1 || rc=$?
    [ "$rc" -eq "$want" ] || { echo "FAIL: exit $rc, not $want: $*"; cat "$dir/log"; exit 1; }
}
# The sample printed after training (char_lm), without the timing lines.
sample_of() { sed -n '/^sample (temperature/,$p' "$1"; }

same_run() { # name reference-dir resumed-dir files...
    local name=$1 a=$2 b=$3
    shift 3
    for f in "$@"; do
        cmp "$a/$f" "$b/$f" || { echo "FAIL: $name: $f differs after resuming"; exit 1; }
    done
    echo "ok: $name: resumed run equals the uninterrupted one ($*)"
}

check_program() { # name final-checkpoint steps every kill-step command...
    local name=$1 ckpt=$2 steps=$3 every=$4 kill_at=$5
    shift 5
    local run=("$@" --steps "$steps" --checkpoint-every "$every")
    expect_exit 0 "${run[@]}" --out "$dir/$name-ref"
    cp "$dir/log" "$dir/$name-ref.log"

    # Killed by SIGKILL (exit 137) between checkpoints, then resumed.
    NABLA_TEST_KILL_AFTER_STEP=$kill_at expect_exit 137 "${run[@]}" --out "$dir/$name-hook"
    local at
    at=$(sed -n 's/^ *"step": \([0-9]*\),$/\1/p' "$dir/$name-hook/resume.json")
    [ "$at" -eq $((kill_at / every * every)) ] ||
        { echo "FAIL: $name: killed after step $kill_at, checkpoint at $at"; exit 1; }
    [ ! -e "$dir/$name-hook/$ckpt" ] || { echo "FAIL: $name finished before its kill"; exit 1; }
    # What saves killed midway leave (a checkpoint's temporary, no process holding it; a
    # resume.json temporary of a process that is gone): the resumed run's checkpoints remove them.
    printf 'half a checkpoint' >"$dir/$name-hook/resume-999.safetensors.tmp-abcdefghij"
    printf '{' >"$dir/$name-hook/.resume.json.999999999.tmp"
    expect_exit 0 "${run[@]}" --out "$dir/$name-hook" --resume
    for f in resume-999.safetensors.tmp-abcdefghij .resume.json.999999999.tmp; do
        [ ! -e "$dir/$name-hook/$f" ] || { echo "FAIL: $name: the stale $f was not removed"; exit 1; }
    done
    cp "$dir/log" "$dir/$name-hook.log"
    same_run "$name (killed after step $kill_at)" "$dir/$name-ref" "$dir/$name-hook" \
        "$ckpt" train.csv "resume-$steps.safetensors"
    if [ -e "$dir/$name-ref/val.csv" ]; then
        same_run "$name (validation log)" "$dir/$name-ref" "$dir/$name-hook" val.csv
    fi
    [ "$(sample_of "$dir/$name-ref.log")" = "$(sample_of "$dir/$name-hook.log")" ] ||
        { echo "FAIL: $name: the sample differs after resuming"; exit 1; }

    # Killed from outside at whatever moment the first checkpoint has been written.
    "${run[@]}" --out "$dir/$name-ext" >/dev/null 2>&1 &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null && [ ! -e "$dir/$name-ext/resume.json" ]; do sleep 0.01; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    expect_exit 0 "${run[@]}" --out "$dir/$name-ext" --resume
    same_run "$name (killed from outside)" "$dir/$name-ref" "$dir/$name-ext" "$ckpt" train.csv

    # A second --resume of a finished run trains no more and changes nothing.
    expect_exit 0 "${run[@]}" --out "$dir/$name-ext" --resume
    same_run "$name (resumed when finished)" "$dir/$name-ref" "$dir/$name-ext" "$ckpt" train.csv

    # Refusals: nothing to resume, another run's checkpoint, --eval with --resume.
    expect_exit 1 "${run[@]}" --out "$dir/$name-empty" --resume
    grep -q "nothing to resume in $dir/$name-empty" "$dir/log" ||
        { echo "FAIL: $name: no clear message for a missing checkpoint"; cat "$dir/log"; exit 1; }
    expect_exit 1 "$@" --steps $((steps + 1)) --out "$dir/$name-ref" --resume
    grep -q "holds the run .*--steps $steps.*, not .*--steps $((steps + 1))" "$dir/log" ||
        { echo "FAIL: $name: resumed another run's checkpoint"; cat "$dir/log"; exit 1; }
    expect_exit 2 "$@" --eval "$dir/$name-ref/$ckpt" --resume
    echo "ok: $name: refuses what it cannot resume"

    # Training health: a huge learning rate makes the model blow up within a few steps.
    expect_exit 1 "$@" --steps 40 --lr 1e30 --out "$dir/$name-nan"
    grep -Eq "^[a-z_]+: step [0-9]+: the gradient of [a-z_.0-9]+ is not finite" "$dir/log" ||
        { echo "FAIL: $name: no message naming the step and parameter"; cat "$dir/log"; exit 1; }
    echo "ok: $name: $(grep 'is not finite' "$dir/log")"
}

check_program toy "model.safetensors" 40 10 25 "$toy" --task shift --quiet

# A checkpoint whose step is past --steps (an edited or damaged resume.json: the same flags
# only save at steps up to --steps) is refused before anything is written; it used to train
# nothing, exit 0 and rewrite the outputs.
for past in 41 1000000000000000 9223372036854775807; do
    rm -rf "$dir/toy-past"
    cp -r "$dir/toy-ref" "$dir/toy-past"
    sed -i "s/^\( *\"step\": \)[0-9]*,\$/\1$past,/" "$dir/toy-past/resume.json"
    grep -q "\"step\": $past," "$dir/toy-past/resume.json" || { echo "FAIL: no step to edit"; exit 1; }
    rm "$dir/toy-past/model.safetensors"
    expect_exit 1 "$toy" --task shift --quiet --steps 40 --checkpoint-every 10 \
        --out "$dir/toy-past" --resume
    grep -q "resume.json is at step $past, past this run's 40 steps" "$dir/log" ||
        { echo "FAIL: toy: no clear message for step $past"; cat "$dir/log"; exit 1; }
    [ ! -e "$dir/toy-past/model.safetensors" ] && cmp -s "$dir/toy-ref/train.csv" \
        "$dir/toy-past/train.csv" || { echo "FAIL: toy: step $past rewrote the outputs"; exit 1; }
    echo "ok: toy: refuses a checkpoint at step $past of 40"
done
check_program char_lm "char_lm.safetensors" 24 5 13 "$lm" --grammar --sample 30
# The same refusal in char_lm (it too used to train nothing and exit 0).
rm -rf "$dir/lm-past"
cp -r "$dir/char_lm-ref" "$dir/lm-past"
sed -i "s/^\( *\"step\": \)[0-9]*,\$/\11000000000000000,/" "$dir/lm-past/resume.json"
grep -q '"step": 1000000000000000,' "$dir/lm-past/resume.json" || { echo "FAIL: no step to edit"; exit 1; }
expect_exit 1 "$lm" --grammar --sample 30 --steps 24 --checkpoint-every 5 --out "$dir/lm-past" \
    --resume
grep -q "resume.json is at step 1000000000000000, past this run's 24 steps" "$dir/log" ||
    { echo "FAIL: char_lm: no clear message for a step past --steps"; cat "$dir/log"; exit 1; }
echo "ok: char_lm: refuses a checkpoint at step 10^15 of 24"
# Another block's run is another run: a gpt checkpoint does not resume --block llama.
expect_exit 1 "$lm" --grammar --sample 30 --steps 24 --checkpoint-every 5 --block llama \
    --out "$dir/char_lm-ref" --resume
grep -q "holds the run .*--block gpt.*, not .*--block llama" "$dir/log" ||
    { echo "FAIL: char_lm: resumed another block's checkpoint"; cat "$dir/log"; exit 1; }
echo "ok: char_lm: refuses another block's checkpoint"
# The DeepSeek-style LM (MLA, mixture of experts, its load-balancing loss) resumes bit for bit too.
check_program char_lm_deepseek "char_lm.safetensors" 24 5 13 "$lm" --grammar --sample 30 --block deepseek
echo "ok: resume and training health"
