#!/usr/bin/env bash
# Reproduces docs/performance.md, "Side by side with llama.cpp": tokenmill against llama.cpp's
# llama-server with `tokenmill bench compare`, one server after the other on one port, the same
# GGUF file and the same client, prompt caching off on both sides. SmolLM2-135M Q4_1 (the default
# model) at 1 and 64 users, then the Qwen3-0.6B shape in Q4_0 and Q8_0 at 1 and 16 users; random
# 128-token prompts, 64 output tokens, EOS ignored, seed 0.
#
#   scripts/compare-llama-server.sh [OUTPUT_DIR]     # default: a new directory from mktemp
#   RUNS=1 MODELS=qwen3-q4_0 ORDER=tokenmill-first scripts/compare-llama-server.sh out
#
# RUNS: runs per level and server (default 3). MODELS: any of smollm2, gemma3 (gemma-3-270m
# Q4_K_M from PyPI, at 1 and 64 users), qwen3-q4_0, qwen3-q8_0 (default: smollm2 and the Qwen3s). ORDER: llama-first (default; table.md's ratios are tokenmill /
# llama-server) or tokenmill-first (the ratios are then llama-server / tokenmill). CONCURRENCY:
# the levels (default 1 and the model's users, e.g. CONCURRENCY=16 for the 16-user run alone).
# PORT: 8012. TOKENMILL: the binary to measure (default ./target/release/tokenmill, built here).
# Each model's outputs land in OUTPUT_DIR/<model>/ (table.md, comparison.json, the charts, each
# server's sweep and log); docs/llama-cpp-comparison/comparison.png is OUTPUT_DIR/smollm2/'s chart.
# Builds tokenmill, fetches the default model, builds llama-server and writes the Qwen3 files
# on first use (scripts/fetch-model.sh, build-llama-server.sh, make-qwen3-gguf.py).
# Run it on an otherwise idle machine: a busy one measures the neighbours.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-$(mktemp -d -t tokenmill-compare.XXXXXX)}"
RUNS="${RUNS:-3}"
MODELS="${MODELS:-smollm2 qwen3-q4_0 qwen3-q8_0}"
ORDER="${ORDER:-llama-first}"
PORT="${PORT:-8012}"
THREADS="$(nproc)"

if [ -z "${TOKENMILL:-}" ]; then
  cargo build --release -p tokenmill >&2
  TOKENMILL=./target/release/tokenmill
fi
TM=$TOKENMILL
SMOLLM2=$(scripts/fetch-model.sh)
LLAMA_SERVER=$(scripts/build-llama-server.sh)

for M in $MODELS; do
  case "$M" in
    smollm2) MODEL=$SMOLLM2; OURS_MODEL=""; USERS=64 ;;
    gemma3) MODEL=$(scripts/fetch-gemma3.sh); OURS_MODEL="--model $MODEL"; USERS=64 ;;
    qwen3-q4_0 | qwen3-q8_0)
      MODEL=$(scripts/make-qwen3-gguf.py "${M#qwen3-}"); OURS_MODEL="--model $MODEL"; USERS=16 ;;
    *) echo "unknown model '$M' (smollm2, gemma3, qwen3-q4_0, qwen3-q8_0)" >&2; exit 2 ;;
  esac
  # -c: 256 tokens for each of llama-server's slots (BOS, 128 prompt tokens and 64 more).
  LLAMA="llama-server=$LLAMA_SERVER -m $MODEL --port $PORT --threads $THREADS --no-cache-prompt --cache-ram 0 --parallel $USERS -c $((USERS * 256))"
  OURS="tokenmill=$TM serve $OURS_MODEL --port $PORT --no-enable-prefix-caching"
  case "$ORDER" in
    llama-first) FIRST=$LLAMA; SECOND=$OURS ;;
    tokenmill-first) FIRST=$OURS; SECOND=$LLAMA ;;
    *) echo "ORDER must be llama-first or tokenmill-first" >&2; exit 2 ;;
  esac
  "$TM" bench compare --base-url "http://127.0.0.1:$PORT" \
    --server "$FIRST" --server "$SECOND" \
    --concurrency "${CONCURRENCY:-1,$USERS}" --runs "$RUNS" --num-prompts "$USERS" \
    --input-len 128 --output-len 64 --ignore-eos --seed 0 --output-dir "$OUT/$M"
done
echo "tables: $OUT/*/table.md" >&2
