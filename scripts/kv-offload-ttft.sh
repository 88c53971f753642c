#!/usr/bin/env bash
# docs/performance.md, "The prefix cache on disk": time to first token of a ~4,000-token
# prompt on a cold server, then on a server restarted on the same --kv-offload-dir (the
# repeat served from disk), and whether both answers are the same. Usage:
#   scripts/kv-offload-ttft.sh [path/to/tokenmill [serve flags...]]
# (default: target/release/tokenmill on the default model; flags such as `--model FILE` go
# to both servers).
set -euo pipefail
BIN="${1:-target/release/tokenmill}"
shift || true
FLAGS=("$@")
PORT="${PORT:-18431}"
DIR=$(mktemp -d)
trap 'kill "${PID:-0}" 2>/dev/null || true; rm -rf "$DIR"' EXIT
PROMPT=$(python3 -c 'print(" ".join(f"Item {i}: the {w} of the system prompt." for i, w in zip(range(312), __import__("itertools").cycle(["first","second","third","fourth","fifth"]))))')
BODY=$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 1, "temperature": 0, "ignore_eos": True}))' "$PROMPT")

start() {
  "$BIN" serve --port "$PORT" --kv-offload-dir "$DIR" ${FLAGS[@]+"${FLAGS[@]}"} >"$DIR.log" 2>&1 &
  PID=$!
  until curl -sf "localhost:$PORT/health" >/dev/null; do sleep 0.2; done
}
# With max_tokens 1, the whole request is the time to the first token.
ask() {
  curl -s -o "$DIR.reply" -w '%{time_total}' -H 'content-type: application/json' \
    -d "$BODY" "localhost:$PORT/v1/completions"
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; }

start; COLD=$(ask); cp "$DIR.reply" "$DIR.cold"; stop
start; WARM=$(ask); cp "$DIR.reply" "$DIR.warm"
HITS=$(curl -s "localhost:$PORT/metrics" | awk '/^tokenmill:external_prefix_cache_hits_total/ {print $2}'); stop
TOKENS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["usage"]["prompt_tokens"])' "$DIR.cold")
SAME=$(python3 -c 'import json,sys; a,b=(json.load(open(p))["choices"][0]["text"] for p in sys.argv[1:]); print("same" if a==b else "DIFFERENT")' "$DIR.cold" "$DIR.warm")
echo "prompt tokens: $TOKENS"
echo "cold TTFT: ${COLD}s; after restart: ${WARM}s (ratio $(python3 -c "print(round($WARM/$COLD, 3))")); tokens from disk: $HITS; answers: $SAME"
rm -f "$DIR.log" "$DIR.reply" "$DIR.cold" "$DIR.warm"
