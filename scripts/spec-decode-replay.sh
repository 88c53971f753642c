#!/usr/bin/env bash
# Records greedy outputs of the default model for 48 templated chat prompts (16 each of a
# JSON record, three facts about a country, a small Python function), then replays them
# through the n-gram and suffix proposers (crates/engine/examples/proposer_replay.rs): the
# tokens each step would gain under greedy verification, and the share of drafts accepted.
# Templated requests are where SuffixDecoding's tree over finished requests pays off.
#
# Usage: scripts/spec-decode-replay.sh [SPECULATIVE_CONFIG ...] (passed to the replay;
# default: ngram and suffix with k = 4). Needs target/ci/tokenmill
# (`cargo build --profile ci -p tokenmill`); the recording is kept in
# target/spec-decode-replay.jsonl and reused while it exists.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/ci/tokenmill
REPLAY=target/spec-decode-replay.jsonl
PORT="${PORT:-18931}"
if [ ! -s "$REPLAY" ]; then
  WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
  python3 - "$WORK/prompts.txt" <<'PY'
import sys
names = "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert Sybil".split()
cities = "Paris Berlin Madrid Rome Lisbon Vienna Prague Dublin Oslo Athens Warsaw Budapest Zurich Brussels Amsterdam Helsinki".split()
countries = "France Germany Spain Italy Portugal Austria Japan Canada Brazil Egypt India Kenya Norway Peru Chile Mexico".split()
ops = ["sum", "difference", "product", "quotient", "maximum", "minimum", "average", "remainder", "power",
       "greatest common divisor", "least common multiple", "absolute difference", "hypotenuse",
       "mean of the squares", "larger square", "smaller cube"]
with open(sys.argv[1], "w") as f:
    for i in range(16):
        f.write(f"Write a JSON object for a user named {names[i]} who is {20 + i} years old and lives in {cities[i]}. Use the keys name, age and city.\n")
        f.write(f"List three facts about {countries[i]}.\n")
        f.write(f"Write a Python function that returns the {ops[i]} of two numbers.\n")
PY
  "$BIN" generate --chat --json --max-tokens 128 --prompts-file "$WORK/prompts.txt" \
    >"$WORK/out.jsonl" 2>"$WORK/generate.log"
  # The prompts' ids as the chat template renders them, from the server's /tokenize.
  "$BIN" serve --port "$PORT" --kv-cache-memory-gib 0.5 >"$WORK/serve.log" 2>&1 &
  SERVER=$!
  trap 'kill "$SERVER" 2>/dev/null; rm -rf "$WORK"' EXIT
  for _ in $(seq 1 120); do
    curl -sf -o /dev/null "localhost:$PORT/health" && break
    sleep 1
  done
  python3 - "$WORK/out.jsonl" "$PORT" "$REPLAY" <<'PY'
import json, sys, urllib.request
out, port, dest = sys.argv[1], sys.argv[2], sys.argv[3]
rows = []
for line in open(out):
    o = json.loads(line)
    body = json.dumps({"messages": [{"role": "user", "content": o["prompt"]}],
                       "add_generation_prompt": True}).encode()
    req = urllib.request.Request(f"http://localhost:{port}/tokenize", data=body,
                                 headers={"Content-Type": "application/json"})
    ids = json.loads(urllib.request.urlopen(req).read())["tokens"]
    if len(ids) != o["prompt_tokens"]:
        sys.exit(f"/tokenize gave {len(ids)} prompt tokens, generate counted {o['prompt_tokens']}")
    rows.append(json.dumps({"prompt_ids": ids, "output_ids": o["token_ids"]}))
open(dest, "w").write("\n".join(rows) + "\n")
PY
fi
cargo run -q --profile ci -p tokenmill-engine --example proposer_replay -- "$REPLAY" "$@"
