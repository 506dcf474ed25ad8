#!/usr/bin/env bash
# The character LM trains briefly on its default corpus (the fortunes package's English files),
# its loss falls, it reports a validation loss in bits per character, it samples, and --eval
# rebuilds the model from the checkpoint alone (no training flags); --eval on a text too short
# for validation fails with a reason, and characters outside the vocabulary are counted in a
# warning; a checkpoint without a configuration and a missing one are refused; --grammar
# still trains; each --block (gpt, llama, deepseek) trains, saves, evaluates its checkpoint
# (the trained model's validation loss, read back from the file alone) and generates, at
# parameter counts within 3% of gpt's.
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
bpc=$(awk -F, 'END { print $2 }' "$dir/val.csv")
awk -v b="$bpc" 'BEGIN { exit !(b > 0 && b < 6) }' || { echo "FAIL: validation at $bpc bits per character"; exit 1; }
[ -s "$dir/char_lm.safetensors" ] || { echo "FAIL: no checkpoint"; exit 1; }
"$bin" --eval "$dir/char_lm.safetensors" --sample 40 --top-k 5 >"$dir/eval"
cat "$dir/eval"
grep -q "d_model 96, 4 heads, 2 layers, context 64" "$dir/eval" || { echo "FAIL: --eval did not read the configuration"; exit 1; }
grep -q "validation loss" "$dir/eval" || { echo "FAIL: --eval reported no validation loss"; exit 1; }
# A checkpoint of char_lm from before the library's tokenizers (its vocabulary under
# "char_lm.vocabulary"; the replacement keeps the header's length) still evaluates.
sed 's/"nabla.tokenizer":"chars","nabla.tokenizer.chars"/"char_lm.old_format":"chars","char_lm.vocabulary"/' \
    "$dir/char_lm.safetensors" >"$dir/old.safetensors"
! grep -q '"nabla.tokenizer"' "$dir/old.safetensors" || { echo "FAIL: the old-style checkpoint was not made"; exit 1; }
"$bin" --eval "$dir/old.safetensors" --sample 10 >"$dir/old.log" ||
    { cat "$dir/old.log"; echo "FAIL: --eval refused an old-style checkpoint"; exit 1; }
grep -q "tokens (chars)" "$dir/old.log" || { echo "FAIL: the old vocabulary was not read"; exit 1; }
# --eval on a text too short for a held-out window: an error saying so, not silence.
printf 'hello world\n' >"$dir/short.txt"
if "$bin" --eval "$dir/char_lm.safetensors" --text "$dir/short.txt" --sample 5 >"$dir/short.log" 2>&1; then
    cat "$dir/short.log"; echo "FAIL: --eval without validation windows exited 0"; exit 1
fi
grep -q "no validation loss: the held-out text" "$dir/short.log" ||
    { cat "$dir/short.log"; echo "FAIL: --eval without validation windows gave no reason"; exit 1; }
# Characters outside the vocabulary (the fortunes' printable ASCII): counted in a warning. The
# text repeats the 8 bytes "hell \xc3\xa9\n" 11500 times; its held-out split is block 19 of
# 4096 bytes (77824 = 9728 x 8, so it starts on a repeat): 512 repeats, 2 unknown bytes each.
for _ in $(seq 11500); do printf 'hell \xc3\xa9\n'; done >"$dir/accents.txt"
"$bin" --eval "$dir/char_lm.safetensors" --text "$dir/accents.txt" --sample 5 --prompt $'\xc3\xa9 hell' \
    >"$dir/accents.log" 2>&1 || { cat "$dir/accents.log"; echo "FAIL: --eval on a text with unknown characters"; exit 1; }
cat "$dir/accents.log"
grep -qF "warning: 1024 of the 4096 held-out characters (\\xc3 \\xa9) are not in" "$dir/accents.log" ||
    { echo "FAIL: unknown characters of the text not counted"; exit 1; }
grep -qF "warning: 2 of the prompt's 7 characters (\\xc3 \\xa9) are not in the vocabulary; the sample skips them" "$dir/accents.log" ||
    { echo "FAIL: unknown characters of the prompt not counted"; exit 1; }
grep -q "validation loss" "$dir/accents.log" || { echo "FAIL: no validation loss"; exit 1; }
if "$bin" --eval "$dir/missing.safetensors" 2>/dev/null; then
    echo "FAIL: a missing checkpoint was accepted"; exit 1
fi
"$bin" --grammar --steps 20 --sample 20 --out "$dir/grammar" >"$dir/glog"
grep -q "from the built-in grammar" "$dir/glog" || { echo "FAIL: --grammar"; exit 1; }
# A text sharing no character with the sampling prompt: a sample, not a crash.
for _ in $(seq 400); do printf '0123456789'; done >"$dir/digits.txt"
"$bin" --text "$dir/digits.txt" --steps 2 --sample 10 --out "$dir/digits" >"$dir/digits.log" 2>&1 ||
    { cat "$dir/digits.log"; echo "FAIL: a text without the prompt's characters"; exit 1; }
# A BPE of 300 tokens: trained, saved in the checkpoint, read back by --eval alone.
"$bin" --tokenizer bpe --vocab 300 --steps 40 --sample 20 --out "$dir/bpe" >"$dir/bpe.log"
grep -q "vocabulary: a BPE of 300 tokens" "$dir/bpe.log" || { cat "$dir/bpe.log"; echo "FAIL: no BPE"; exit 1; }
grep -q '"nabla.tokenizer":"bpe"' "$dir/bpe/char_lm.safetensors" || { echo "FAIL: no BPE in the checkpoint"; exit 1; }
bpe_bpc=$(awk -F, 'END { print $2 }' "$dir/bpe/val.csv")
awk -v b="$bpe_bpc" 'BEGIN { exit !(b > 0 && b < 8) }' || { echo "FAIL: BPE validation at $bpe_bpc bits per character"; exit 1; }
"$bin" --eval "$dir/bpe/char_lm.safetensors" --sample 20 >"$dir/bpe_eval"
grep -q "context 64, 300 tokens (bpe)" "$dir/bpe_eval" || { cat "$dir/bpe_eval"; echo "FAIL: --eval did not read the BPE"; exit 1; }
# A checkpoint whose tokenizer metadata is damaged: refused, naming the call.
sed 's/"nabla.tokenizer":"bpe"/"nabla.tokenizer":"xyz"/' "$dir/bpe/char_lm.safetensors" >"$dir/bad.safetensors"
if "$bin" --eval "$dir/bad.safetensors" --sample 5 >"$dir/bad.log" 2>&1; then
    echo "FAIL: a damaged tokenizer was accepted"; exit 1
fi
grep -q "nb_tokenizer_read: .*'xyz', not 'chars' or 'bpe'" "$dir/bad.log" || { cat "$dir/bad.log"; echo "FAIL: no reason for the damaged tokenizer"; exit 1; }
# Every block: a few steps on the grammar, the checkpoint's --eval equal to the trained model's
# validation loss, a sample from each (nb_generate with the block's cache).
# The bytes printed after the line matching $2 in file $1: the prompt and the sample.
printed_after() { sed -n "/$2/,\$p" "$1" | tail -n +2 | wc -c; }
for block in gpt llama deepseek; do
    "$bin" --grammar --block "$block" --steps 12 --sample 30 --prompt "the " --out "$dir/$block" >"$dir/$block.log" ||
        { cat "$dir/$block.log"; echo "FAIL: --block $block did not train"; exit 1; }
    grep -q "^model: $block block, [0-9]* parameters" "$dir/$block.log" || { cat "$dir/$block.log"; echo "FAIL: --block $block: no model line"; exit 1; }
    [ "$(printed_after "$dir/$block.log" '^sample (temperature')" -ge 35 ] ||
        { cat "$dir/$block.log"; echo "FAIL: --block $block generated nothing"; exit 1; }
    "$bin" --eval "$dir/$block/char_lm.safetensors" --grammar --sample 30 --prompt "the " >"$dir/$block.eval" ||
        { cat "$dir/$block.eval"; echo "FAIL: --eval of a $block checkpoint"; exit 1; }
    grep -q "^model: $block block" "$dir/$block.eval" || { cat "$dir/$block.eval"; echo "FAIL: --eval did not rebuild the $block model"; exit 1; }
    trained=$(grep '^validation loss' "$dir/$block.log")
    evaluated=$(grep '^validation loss' "$dir/$block.eval")
    [ -n "$trained" ] && [ "$trained" = "$evaluated" ] ||
        { echo "FAIL: $block: trained '$trained', checkpoint '$evaluated'"; exit 1; }
    [ "$(printed_after "$dir/$block.eval" '^validation loss')" -ge 35 ] ||
        { cat "$dir/$block.eval"; echo "FAIL: --eval of $block generated nothing"; exit 1; }
    echo "ok: --block $block: $(grep '^model:' "$dir/$block.log"); $trained"
done
grep -q "active per token" "$dir/deepseek.log" || { echo "FAIL: deepseek: no active parameters"; exit 1; }
grep -q "aux_loss" "$dir/deepseek/train.csv" || { echo "FAIL: deepseek: no aux_loss column"; exit 1; }
# Equal parameter counts: llama and deepseek within 3% of gpt.
params() { sed -n 's/^model: [a-z]* block, \([0-9]*\) parameters.*/\1/p' "$dir/$1.log"; }
for block in llama deepseek; do
    awk -v a="$(params gpt)" -v b="$(params "$block")" 'BEGIN { d = b / a - 1; exit !(d < 0.03 && d > -0.03) }' ||
        { echo "FAIL: $block has $(params "$block") parameters, gpt $(params gpt)"; exit 1; }
done
# A checkpoint naming an unknown block: refused, naming the key.
sed 's/"char_lm.block":"llama"/"char_lm.block":"gemma"/' "$dir/llama/char_lm.safetensors" >"$dir/gemma.safetensors"
if "$bin" --eval "$dir/gemma.safetensors" --grammar --sample 5 >"$dir/gemma.log" 2>&1; then
    echo "FAIL: an unknown block was accepted"; exit 1
fi
grep -q "char_lm.block is 'gemma', not gpt, llama or deepseek" "$dir/gemma.log" || { cat "$dir/gemma.log"; echo "FAIL: no reason for the unknown block"; exit 1; }
echo "ok: BPE validation $bpe_bpc bits per character"
echo "ok: loss $first -> $last, validation $bpc bits per character; a text without the prompt's characters samples"
