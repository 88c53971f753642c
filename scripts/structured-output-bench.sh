#!/usr/bin/env bash
# Reproduces docs/performance.md, "Structured output": one tokenmill server on the default model,
# `tokenmill bench serve` on the chat endpoint (64 prompt tokens, 64 output tokens, EOS ignored)
# without and with a JSON schema as `response_format` (an object holding an array of at least 40
# strings of at most 8 characters, so constrained replies also run to 64 tokens), at 1 user
# (8 prompts) and 16 users (32 prompts), free and schema alternating for ROUNDS rounds (default
# 2). Prints output tok/s and median TPOT per run, then the server's mask-time histogram
# (`tokenmill:structured_output_mask_seconds` from /metrics).
#
#   scripts/structured-output-bench.sh [OUTPUT_DIR]   # default: a new directory from mktemp
#
# OUTPUT_DIR gets each run's JSON (`--save-result`) and log, and the server's log. PORT: 8097.
# TOKENMILL: the binary to measure (default ./target/release/tokenmill, built here).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-$(mktemp -d -t tokenmill-structured.XXXXXX)}"
mkdir -p "$OUT"
ROUNDS="${ROUNDS:-2}"
PORT="${PORT:-8097}"
URL="http://127.0.0.1:$PORT"

if [ -z "${TOKENMILL:-}" ]; then
  cargo build --release -p tokenmill >&2
  TOKENMILL=./target/release/tokenmill
fi
TM=$TOKENMILL
scripts/fetch-model.sh >/dev/null
"$TM" serve --port "$PORT" --no-enable-prefix-caching >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true' EXIT
until curl -sf "$URL/health" >/dev/null; do
  kill -0 "$SERVER" 2>/dev/null || { cat "$OUT/server.log" >&2; exit 1; }
  sleep 0.5
done

SCHEMA='{"response_format": {"type": "json_schema", "json_schema": {"name": "words", "schema":
  {"type": "object", "required": ["words"], "properties": {"words": {"type": "array",
  "minItems": 40, "items": {"type": "string", "maxLength": 8}}}}}}}'

printf '%-6s %-6s %-7s %14s %17s\n' round users mode 'output tok/s' 'median TPOT ms'
for round in $(seq "$ROUNDS"); do
  for users in 1 16; do
    prompts=$((users == 1 ? 8 : 32))
    for mode in free schema; do
      extra=()
      [ "$mode" = schema ] && extra=(--extra-body "$SCHEMA")
      result="$OUT/round$round-users$users-$mode.json"
      "$TM" bench serve --base-url "$URL" --endpoint chat --input-len 64 --output-len 64 \
        --ignore-eos --num-prompts "$prompts" --max-concurrency "$users" --no-progress-bar \
        --save-result "$result" ${extra[@]+"${extra[@]}"} >"${result%.json}.log" 2>&1 ||
        { cat "${result%.json}.log" >&2; exit 1; }
      python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
print("%-6s %-6s %-7s %14.1f %17.2f" % (*sys.argv[2:], r["output_throughput"], r["median_tpot_ms"]))' \
        "$result" "$round" "$users" "$mode"
    done
  done
done
curl -sf "$URL/metrics" | grep 'structured_output_mask_seconds' || true
