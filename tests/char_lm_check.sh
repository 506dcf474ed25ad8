#!/usr/bin/env bash
# The character LM trains briefly on its default corpus (the fortunes package's English files),
# its loss falls, it reports a validation loss in bits per character, it samples, and --eval
# rebuilds the model from the checkpoint alone (no training flags); --eval on a text too short
# for validation fails with a reason, and characters outside the vocabulary are counted in a
# warning; a checkpoint without a configuration and a missing one are refused; --grammar
# still trains.
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
echo "ok: BPE validation $bpe_bpc bits per character"
echo "ok: loss $first -> $last, validation $bpc bits per character; a text without the prompt's characters samples"
