#!/usr/bin/env bash
# Reproduces docs/performance.md, "KV cache: a fresh server's page faults": a fresh tokenmill
# server on the Qwen3-0.6B shape (Q4_0 GGUF from scripts/make-qwen3-gguf.py), given IDLE seconds
# after it answers (default 10; the engine backs the KV pool's pages while idle), then
# `tokenmill bench sweep` at 16 users, three runs (16 random 128-token prompts, 64 output
# tokens, EOS ignored). Prints each run's duration, run 1 against the mean of runs 2-3, and the
# server's page faults during the sweep (minor + major, from /proc/PID/stat).
#
#   scripts/first-run-faults.sh [OUTPUT_DIR]          # default: a new directory from mktemp
#   IDLE=0 scripts/first-run-faults.sh                # no idle time: the first run pays the faults
#
# TOKENMILL: the binary to measure (default ./target/release/tokenmill, built here); run it
# alternately with two builds to compare them. MODEL: another GGUF file to serve. PORT: 8014.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-$(mktemp -d -t tokenmill-faults.XXXXXX)}"
mkdir -p "$OUT"
IDLE="${IDLE:-10}"
PORT="${PORT:-8014}"
URL="http://127.0.0.1:$PORT"
if [ -z "${TOKENMILL:-}" ]; then
  cargo build --release -p tokenmill >&2
  TOKENMILL=./target/release/tokenmill
fi
scripts/fetch-model.sh >/dev/null # the Qwen3 file borrows the default model's tokenizer
MODEL="${MODEL:-$(scripts/make-qwen3-gguf.py q4_0)}"

"$TOKENMILL" serve --model "$MODEL" --port "$PORT" --no-enable-prefix-caching >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true' EXIT
until curl -sf "$URL/v1/models" >/dev/null; do
  kill -0 "$SERVER" 2>/dev/null || { cat "$OUT/server.log" >&2; exit 1; }
  sleep 0.2
done
sleep "$IDLE"

# Fields 10 and 12 of /proc/PID/stat (after the parenthesised name): minor and major faults
# of the whole process.
faults() { sed 's/^.*) //' "/proc/$SERVER/stat" | awk '{print $8 + $10}'; }
BEFORE=$(faults)
"$TOKENMILL" bench sweep --base-url "$URL" --concurrency 16 --runs 3 --num-prompts 16 \
  --input-len 128 --output-len 64 --ignore-eos --seed 0 --no-progress-bar --output-dir "$OUT/sweep" \
  >"$OUT/sweep.log" 2>&1 || { cat "$OUT/sweep.log" >&2; exit 1; }
AFTER=$(faults)

python3 - "$OUT/sweep/runs" "$((AFTER - BEFORE))" <<'PY'
import json, sys
runs = [json.load(open(f"{sys.argv[1]}/concurrency-16-run{i}.json"))["duration"] for i in (1, 2, 3)]
print("run durations (s): " + " / ".join(f"{d:.2f}" for d in runs))
print(f"run 1 - mean of runs 2-3: {runs[0] - (runs[1] + runs[2]) / 2:+.2f} s")
print(f"server page faults during the sweep: {int(sys.argv[2]):,}")
PY
