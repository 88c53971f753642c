#!/usr/bin/env bash
# docs/performance.md, "The prefix cache on disk": kill -9 while offloading, under load, then
# check a restarted server's answers. Each try starts a server on one --kv-offload-dir,
# loads it with prompts that share a prefix (their blocks are being written), kills it with
# SIGKILL at a random moment, restarts it on the same directory and asks the check prompts
# greedily: every answer must equal a cold server's (one without the directory). Prints one
# line per try and the count of wrong answers. Usage:
#   scripts/kv-offload-crash.sh [TRIES] [path/to/tokenmill]   (default: 50, target/release/tokenmill)
set -euo pipefail
TRIES="${1:-50}"
BIN="${2:-target/release/tokenmill}"
PORT="${PORT:-18432}"
URL="http://127.0.0.1:$PORT"
WORK=$(mktemp -d)
DIR="$WORK/kv"
PIDS=()
cleanup() { for p in "${PIDS[@]}" ${SERVER:-}; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

SYSTEM=$(python3 -c 'print(" ".join(f"Rule {i}: answer briefly and {w}." for i, w in zip(range(40), __import__("itertools").cycle(["politely","exactly","calmly","clearly"]))))')
body() { python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": int(sys.argv[2]), "temperature": 0, "ignore_eos": True}))' "$1" "$2"; }
ask() { curl -sf -H 'content-type: application/json' -d "$(body "$1" "$2")" "$URL/v1/completions" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'; }
start() {
  "$BIN" serve --port "$PORT" "$@" >"$WORK/server.log" 2>&1 &
  SERVER=$!
  until curl -sf "$URL/health" >/dev/null 2>&1; do sleep 0.1; done
}
CHECKS=("$SYSTEM Question: what is a river?" "$SYSTEM Question: name three colours." "$SYSTEM Question: how do birds fly?")

# The cold answers, from a server without a disk tier.
start
COLD=()
for q in "${CHECKS[@]}"; do COLD+=("$(ask "$q" 12)"); done
kill "$SERVER"; wait "$SERVER" 2>/dev/null || true

WRONG=0
for try in $(seq 1 "$TRIES"); do
  start --kv-offload-dir "$DIR"
  PIDS=()
  for client in 1 2 3; do
    ( for n in $(seq 1 1000); do ask "$SYSTEM Question $try.$client.$n: $RANDOM $RANDOM $RANDOM" 4 >/dev/null 2>&1 || true; done ) &
    PIDS+=($!)
  done
  sleep "$(python3 -c 'import random; print(round(random.uniform(0.5, 4.0), 2))')"
  kill -9 "$SERVER"; wait "$SERVER" 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  FILES=$(find "$DIR" -name '*.kvb' | wc -l)
  start --kv-offload-dir "$DIR"
  bad=0
  for i in "${!CHECKS[@]}"; do
    [ "$(ask "${CHECKS[$i]}" 12)" = "${COLD[$i]}" ] || bad=$((bad + 1))
  done
  HITS=$(curl -s "$URL/metrics" | awk '/^tokenmill:external_prefix_cache_hits_total/ {print $2}')
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
  WRONG=$((WRONG + bad))
  echo "try $try: $FILES block files after the kill, $HITS prompt tokens from disk after the restart, $bad wrong answers"
done
echo "tries: $TRIES, wrong answers: $WRONG of $((TRIES * ${#CHECKS[@]}))"
[ "$WRONG" -eq 0 ]
