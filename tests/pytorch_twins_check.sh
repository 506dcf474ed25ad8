#!/usr/bin/env bash
# examples/iris_classifier.c, digit_addition.c and finetune_lm.c against their PyTorch twins in
# examples/pytorch (Debian's python3-torch), at reduced sizes, on the same data:
#   iris: the same CSV (python3-sklearn's iris.csv) and split sizes; both best validation
#     accuracies >= 0.9 (a third is chance) and within 0.1 of each other (3 of the 30 flowers);
#   digit addition: the same task, model (TransformerEncoderLayer and TransformerDecoderLayer,
#     norm_first), batch and 800 steps; both exact-match accuracies on 1000 held-out problems
#     >= 0.4 (guessing is right about once in 2000) and within 0.3 of each other (the
#     curves are steep there: at 800 steps nabla had 0.887, PyTorch 0.697);
#   fine-tune: the same char_lm checkpoint, text, split and validation windows, so the loss
#     before agrees to 1e-3 (the same model on the same tokens); after STEPS steps both have
#     fallen by >= 0.05 and agree within 0.05.
# Then prints the programs' lines of code (scripts/count_lines.py) for the README.
# Fails, saying why, when python3-torch or the dataset is missing (scripts/test installs them).
# Usage: pytorch_twins_check.sh SOURCE_ROOT IRIS_CLASSIFIER DIGIT_ADDITION FINETUNE_LM CHAR_LM
set -euo pipefail
root=$1 iris=$2 addition=$3 finetune=$4 char_lm=$5
py=/usr/bin/python3
csv=/usr/lib/python3/dist-packages/sklearn/datasets/data/iris.csv
text=/usr/share/common-licenses/GPL-3
"$py" -c "import torch" 2>/dev/null ||
    { echo "FAIL: $py cannot import torch: install Debian's python3-torch (scripts/test does)"; exit 1; }
[ -r "$csv" ] || { echo "FAIL: no $csv: install Debian's python3-sklearn (scripts/test does)"; exit 1; }
[ -r "$text" ] || { echo "FAIL: no $text (Debian's base-files)"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
twin=$root/examples/pytorch

# run NAME PROGRAM ARGS...: runs it, shows its output, keeps its last line in $dir/NAME.
run() {
    local name=$1
    shift
    "$@" >"$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; echo "FAIL: $name exited $?"; exit 1; }
    echo "$name: $(tail -n 1 "$dir/$name.log")"
    tail -n 1 "$dir/$name.log" >"$dir/$name.last"
}
# check DESCRIPTION AWK_CONDITION A B: fails unless the condition holds for a and b (nabla's
# and PyTorch's unless said).
check() {
    awk -v a="$3" -v b="$4" "BEGIN { exit !($2) }" || { echo "FAIL: $1 ($3, $4)"; exit 1; }
    echo "ok: $1 ($3, $4)"
}
field() { awk -v k="$2" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' "$dir/$1.last"; }

run iris_nabla "$iris" "$csv" "$dir/iris_nabla" 400
run iris_torch "$py" "$twin/iris_classifier.py" "$csv" "$dir/iris_torch" 400
a=$(field iris_nabla accuracy) b=$(field iris_torch accuracy)
check "iris: both validation accuracies >= 0.9" "a >= 0.9 && b >= 0.9" "$a" "$b"
check "iris: accuracies within 0.1" "a - b <= 0.1 && b - a <= 0.1" "$a" "$b"
[ -s "$dir/iris_nabla/best.safetensors" ] || { echo "FAIL: iris: no best checkpoint"; exit 1; }

run addition_nabla "$addition" 800
run addition_torch "$py" "$twin/digit_addition.py" 800
a=$(field addition_nabla match) b=$(field addition_torch match)
check "digit addition: both exact matches >= 0.4" "a >= 0.4 && b >= 0.4" "$a" "$b"
check "digit addition: exact matches within 0.3" "a - b <= 0.3 && b - a <= 0.3" "$a" "$b"

run char_lm "$char_lm" --steps 60 --sample 10 --out "$dir/char_lm"
ckpt=$dir/char_lm/char_lm.safetensors
run finetune_nabla "$finetune" "$ckpt" "$text" 60 "$dir/finetuned.safetensors"
run finetune_torch "$py" "$twin/finetune_lm.py" "$ckpt" "$text" 60 "$dir/finetuned.pt"
# "validation loss BEFORE before, AFTER after N steps"
a=$(field finetune_nabla loss) b=$(field finetune_torch loss)
check "fine-tune: validation losses before within 1e-3" "a - b <= 1e-3 && b - a <= 1e-3" "$a" "$b"
a2=$(field finetune_nabla before,) b2=$(field finetune_torch before,)
check "fine-tune: nabla's loss fell by >= 0.05 (before, after)" "a - b >= 0.05" "$a" "$a2"
check "fine-tune: PyTorch's loss fell by >= 0.05 (before, after)" "a - b >= 0.05" "$b" "$b2"
check "fine-tune: losses after within 0.05" "a - b <= 0.05 && b - a <= 0.05" "$a2" "$b2"
# The fine-tuned checkpoint carries its tokenizer: char_lm --eval rebuilds it from the file
# (and evaluates it on char_lm's own held-out text: GPL-3 is too short for char_lm's split).
"$char_lm" --eval "$dir/finetuned.safetensors" --sample 5 >"$dir/eval.log" 2>&1 ||
    { cat "$dir/eval.log"; echo "FAIL: char_lm --eval refused the fine-tuned checkpoint"; exit 1; }

echo "lines of code (scripts/count_lines.py: not blank, not only comments or docstrings):"
for p in iris_classifier digit_addition finetune_lm; do
    n=$("$py" "$root/scripts/count_lines.py" "$root/examples/$p.c" | awk '{ print $2 }')
    t=$("$py" "$root/scripts/count_lines.py" "$twin/$p.py" | awk '{ print $2 }')
    awk -v p="$p" -v n="$n" -v t="$t" 'BEGIN { printf "  %-16s nabla %3d  PyTorch %3d  ratio %.2f\n", p, n, t, n / t }'
done
