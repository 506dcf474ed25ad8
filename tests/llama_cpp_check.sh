#!/bin/sh
# A model exported by nabla runs in a real llama.cpp: examples/gguf_export.c trains a small
# LM and exports it to GGUF (float32 and float16), for each architecture nabla exports: the
# Llama-style LM ("llama"), two DeepSeek-style LMs ("deepseek2": one with the low-rank query, a
# dense block and a shared expert, one without them) and the TransformerLM in GPT-2's form
# ("gpt2"). tests/llama_cpp_check.mjs loads each file into llama.cpp through the npm package
# node-llama-cpp (its prebuilt Linux x64 binaries, CPU only), decodes 64 tokens greedily from
# the same prompt and compares each step with nabla's nb_generate: the same tokens, and
# next-token probabilities within 2e-5 (float32 weights; 5e-3 for gpt2, whose GELU llama.cpp
# reads from a float16 table) or 1e-2 (float16 weights).
# node-llama-cpp is installed with npm into a cache outside the tree
# ($NABLA_CACHE_DIR, default ~/.cache/nabla). Without Node.js 20 or newer, or without the npm
# registry on a first run, the test is skipped (exit 77) and says why.
# Usage: llama_cpp_check.sh EXPORT_PROGRAM CHECK_MJS
set -eu
export_program=$1 check=$2
version=3.22.1
cache=${NABLA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nabla}/node-llama-cpp-$version

skip() {
    echo "llama_cpp_check: skipped: $*"
    exit 77
}
command -v node >/dev/null 2>&1 || skip "Node.js is not installed"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || skip "node-llama-cpp needs Node.js 20 or newer, this is $(node --version)"
if [ ! -f "$cache/node_modules/@node-llama-cpp/linux-x64/package.json" ]; then
    command -v npm >/dev/null 2>&1 || skip "npm is not installed"
    mkdir -p "$cache"
    echo "installing node-llama-cpp $version (prebuilt llama.cpp) into $cache"
    # Only the CPU build for Linux x64, and no install scripts: nothing is compiled or
    # downloaded beyond the packages themselves.
    npm install --prefix "$cache" --no-audit --no-fund --omit=optional --ignore-scripts \
        "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version" >"$cache/npm.log" 2>&1 ||
        { tail -5 "$cache/npm.log"; skip "npm could not install node-llama-cpp (no registry?)"; }
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for model in llama deepseek deepseek_lite gpt2; do
    echo "== nabla trains and exports tiny_$model"
    "$export_program" "$model" "$tmp" 64
    # llama.cpp's CPU GELU (gpt2's) rounds its input to float16 and reads a float16 table:
    # 9.9e-4 of probability seen, 4.4e-6 with nabla's GELU rounded the same way (measured once)
    f32_tol=2e-5
    [ "$model" = gpt2 ] && f32_tol=5e-3
    for case in "f32 $f32_tol" "f16 1e-2"; do
        set -- $case
        echo "== llama.cpp runs tiny_${model}_$1.gguf"
        node "$check" "$cache/node_modules" "$tmp/tiny_${model}_$1.gguf" "$tmp/tiny_$model.json" "$2"
    done
done
