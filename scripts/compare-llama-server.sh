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
# Q4_K_M from PyPI, at 1 and 64 users), qwen3-q4_0, qwen3-q8_0 (default: smollm2 and the Qwen3s),
# and the real shapes below. ORDER: llama-first (default; table.md's ratios are tokenmill /
# llama-server) or tokenmill-first (the ratios are then llama-server / tokenmill). CONCURRENCY:
# the levels (default 1 and the model's users, e.g. CONCURRENCY=16 for the 16-user run alone).
# PORT: 8012. TOKENMILL: the binary to measure (default ./target/release/tokenmill, built here).
# LLAMA_SERVER: the llama-server to measure against (default: scripts/build-llama-server.sh's;
# LLAMA_SERVER=$(AMX=1 scripts/build-llama-server.sh) for llama.cpp's AMX build).
# Each model's outputs land in OUTPUT_DIR/<model>/ (table.md, comparison.json, the charts, each
# server's sweep and log); docs/llama-cpp-comparison/comparison.png is OUTPUT_DIR/smollm2/'s chart.
# Builds tokenmill, fetches the default model, builds llama-server and writes the Qwen3 files
# on first use (scripts/fetch-model.sh, build-llama-server.sh, make-qwen3-gguf.py,
# make-shape-gguf.py).
# Run it on an otherwise idle machine: a busy one measures the neighbours.
#
# Real shapes (issue 52, "Measured where users run"): random weights in the real shapes of
# Llama-3.2-1B, Llama-3.1-8B and Qwen3-8B, written by scripts/make-shape-gguf.py. MODELS names
# them SHAPE-TYPE: llama1b-, llama8b-, qwen3-8b-, each with q4_0, q8_0 or q4_k_m (llama.cpp's
# Q4_K_M mix), e.g. llama1b-q4_k_m; MODELS=shapes stands for llama1b-q4_k_m llama1b-q4_0
# llama8b-q4_0 qwen3-8b-q4_0. Each runs three comparisons, LEVELS (default "u1 u16 long"):
#   u1    1 user, 256-token prompts, OUTPUT_LEN (64) tokens, U1_PROMPTS (8) requests a run:
#         median TPOT and TTFT
#   u16   16 users, 256-token prompts, OUTPUT_LEN tokens, 16 requests a run: output tok/s,
#         median TPOT, P99 ITL
#   long  1 user, one LONG_INPUT (2,048)-token prompt, LONG_OUTPUT (8) tokens, one request a run:
#         TTFT
# into OUTPUT_DIR/<model>/{u1,u16,long}/ (bench compare's outputs each) and OUTPUT_DIR/<model>/
# table.md, those rows in one table under the date, commit, CPU and file. LAYERS=N writes and
# measures files cut to their first N layers (make-shape-gguf.py --layers), for smoke tests of
# this script only, e.g.
#   LAYERS=2 RUNS=1 OUTPUT_LEN=8 U1_PROMPTS=2 MODELS=llama1b-q4_0 \
#     scripts/compare-llama-server.sh /tmp/smoke
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-$(mktemp -d -t tokenmill-compare.XXXXXX)}"
RUNS="${RUNS:-3}"
MODELS="${MODELS:-smollm2 qwen3-q4_0 qwen3-q8_0}"
ORDER="${ORDER:-llama-first}"
PORT="${PORT:-8012}"
THREADS="$(nproc)"
LEVELS="${LEVELS:-u1 u16 long}"
OUTPUT_LEN="${OUTPUT_LEN:-64}"
U1_PROMPTS="${U1_PROMPTS:-8}"
LONG_INPUT="${LONG_INPUT:-2048}"
LONG_OUTPUT="${LONG_OUTPUT:-8}"
LAYERS="${LAYERS:-}"
MODELS="${MODELS//shapes/llama1b-q4_k_m llama1b-q4_0 llama8b-q4_0 qwen3-8b-q4_0}"

if [ -z "${TOKENMILL:-}" ]; then
  cargo build --release -p tokenmill >&2
  TOKENMILL=./target/release/tokenmill
fi
TM=$TOKENMILL
SMOLLM2=$(scripts/fetch-model.sh)
LLAMA_SERVER="${LLAMA_SERVER:-$(scripts/build-llama-server.sh)}"

# One `bench compare` of llama-server and tokenmill on MODEL into DIR. Arguments: DIR, slots
# (llama-server's --parallel), context per slot, then bench's own options.
compare() {
  local dir=$1 slots=$2 slot_ctx=$3 first second
  shift 3
  local llama="llama-server=$LLAMA_SERVER -m $MODEL --port $PORT --threads $THREADS --no-cache-prompt --cache-ram 0 --parallel $slots -c $((slots * slot_ctx))"
  local ours="tokenmill=$TM serve $OURS_MODEL --port $PORT --no-enable-prefix-caching"
  case "$ORDER" in
    llama-first) first=$llama; second=$ours ;;
    tokenmill-first) first=$ours; second=$llama ;;
    *) echo "ORDER must be llama-first or tokenmill-first" >&2; exit 2 ;;
  esac
  # The last server of the previous compare may still be shutting down, holding the port.
  local i
  for i in $(seq 60); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || break
    sleep 1
  done
  "$TM" bench compare --base-url "http://127.0.0.1:$PORT" --server "$first" --server "$second" \
    --runs "$RUNS" --ignore-eos --seed 0 --output-dir "$dir" "$@"
}

# Prints the rows of DIR/table.md for the level and metric, with the level's name in front.
rows() {
  local table=$1/table.md level=$2 name=$3
  shift 3
  local metric
  for metric in "$@"; do
    grep -F "| $level | $metric |" "$table" | sed "s/^| $level |/| $name |/" || true
  done
}

real_shape() {
  local m=$1 shape type
  case "${m%-*}" in
    llama1b) shape=llama-3.2-1b ;;
    llama8b) shape=llama-3.1-8b ;;
    qwen3-8b) shape=qwen3-8b ;;
  esac
  type=${m##*-}
  echo "$shape $type"
}

for M in $MODELS; do
  case "$M" in
    smollm2) MODEL=$SMOLLM2; OURS_MODEL=""; USERS=64 ;;
    gemma3) MODEL=$(scripts/fetch-gemma3.sh); OURS_MODEL="--model $MODEL"; USERS=64 ;;
    qwen3-q4_0 | qwen3-q8_0)
      MODEL=$(scripts/make-qwen3-gguf.py "${M#qwen3-}"); OURS_MODEL="--model $MODEL"; USERS=16 ;;
    llama1b-q4_0 | llama1b-q8_0 | llama1b-q4_k_m | llama8b-q4_0 | llama8b-q8_0 | llama8b-q4_k_m | \
      qwen3-8b-q4_0 | qwen3-8b-q8_0 | qwen3-8b-q4_k_m)
      read -r SHAPE TYPE <<<"$(real_shape "$M")"
      MODEL=$(scripts/make-shape-gguf.py --shape "$SHAPE" --type "$TYPE" ${LAYERS:+--layers "$LAYERS"})
      OURS_MODEL="--model $MODEL"; USERS="" ;;
    *)
      echo "unknown model '$M' (smollm2, gemma3, qwen3-q4_0, qwen3-q8_0, shapes, or" \
        "llama1b-, llama8b-, qwen3-8b- with q4_0, q8_0, q4_k_m)" >&2
      exit 2 ;;
  esac
  if [ -n "$USERS" ]; then
    # -c: 256 tokens for each of llama-server's slots (BOS, 128 prompt tokens and 64 more).
    compare "$OUT/$M" "$USERS" 256 --concurrency "${CONCURRENCY:-1,$USERS}" --num-prompts "$USERS" \
      --input-len 128 --output-len 64
    continue
  fi
  # Each slot holds BOS, its prompt, its output and some slack for a prompt that tokenizes
  # longer on the server than in the client.
  for L in $LEVELS; do
    case "$L" in
      u1) compare "$OUT/$M/u1" 1 $((256 + OUTPUT_LEN + 64)) --concurrency 1 \
        --num-prompts "$U1_PROMPTS" --input-len 256 --output-len "$OUTPUT_LEN" ;;
      u16) compare "$OUT/$M/u16" 16 $((256 + OUTPUT_LEN + 64)) --concurrency 16 \
        --num-prompts 16 --input-len 256 --output-len "$OUTPUT_LEN" ;;
      long) compare "$OUT/$M/long" 1 $((LONG_INPUT + LONG_OUTPUT + 64)) --concurrency 1 \
        --num-prompts 1 --input-len "$LONG_INPUT" --output-len "$LONG_OUTPUT" ;;
      *) echo "unknown level '$L' (u1, u16, long)" >&2; exit 2 ;;
    esac
  done
  {
    echo "$M: $(basename "$MODEL"), ${LAYERS:-all} layers; $(date -u +%Y-%m-%d), tokenmill" \
      "$(git describe --always --dirty), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
      "$THREADS threads, $ORDER, medians over $RUNS run(s) per level and server"
    echo
    header=$(head -1 "$OUT/$M/$(set -- $LEVELS; echo "$1")/table.md")
    echo "$header" | sed 's/^| [^|]* |/| Level |/'
    echo "$header" | awk -F'|' '{ printf "|---|---|"; for (i = 4; i < NF; i++) printf "---:|"; print "" }'
    for L in $LEVELS; do
      case "$L" in
        u1) rows "$OUT/$M/u1" 1 "1 user, 256-token prompts" "Median TPOT (ms)" "Median TTFT (ms)" ;;
        u16) rows "$OUT/$M/u16" 16 "16 users, 256 in, $OUTPUT_LEN out" "Output tokens per second" \
          "Median TPOT (ms)" "P99 ITL (ms)" ;;
        long) rows "$OUT/$M/long" 1 "one $LONG_INPUT-token prompt" "Median TTFT (ms)" ;;
      esac
    done
  } >"$OUT/$M/table.md"
  cat "$OUT/$M/table.md" >&2
done
echo "tables: $OUT/*/table.md" >&2
