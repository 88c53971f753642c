#!/usr/bin/env bash
# The fair-prefill experiment behind docs/tuning.md ("Long and short prompts together"): a fresh
# server per configuration, default model; an 8,000-token prompt, then four 8-token requests
# (16 output tokens) 1 s later, one every 0.5 s; then the same long prompt alone. Prints per
# configuration the short requests' median and worst TTFT, the long prompt's end-to-end time
# with them and alone, and their ratio: medians over REPEAT pairs of runs (default 3), a mixed
# run and then an alone one, since a long prefill's time moves by tens of percent between runs
# on a shared machine. Prefix caching is off, so the runs do not reuse each other's prompts.
#
#   scripts/fair-prefill.sh [OUTPUT_DIR]                  # default: a new directory from mktemp
#   CONFIGS=$'default=\nthreshold-128=--long-prefill-token-threshold 128' scripts/fair-prefill.sh
#
# CONFIGS: lines of NAME=SERVER FLAGS (default: the defaults, the scheduler without partial
# prefills, and a few thresholds). TOKENMILL: the binary (default ./target/release/tokenmill,
# built here). PORT: 8016. REPEAT: pairs of runs per configuration (3).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-$(mktemp -d -t tokenmill-fair.XXXXXX)}"
mkdir -p "$OUT"
PORT="${PORT:-8016}"
REPEAT="${REPEAT:-3}"
if [ -z "${TOKENMILL:-}" ]; then
  cargo build --release -p tokenmill >&2
  TOKENMILL=./target/release/tokenmill
fi
scripts/fetch-model.sh >/dev/null
CONFIGS="${CONFIGS:-default=
one-partial=--max-num-partial-prefills 1
threshold-128=--long-prefill-token-threshold 128
threshold-512=--long-prefill-token-threshold 512}"

bench() { # NAME FLAGS NUM_PROMPTS
  "$TOKENMILL" bench serve --base-url "http://127.0.0.1:$PORT" \
    --spawn "$TOKENMILL serve --port $PORT --no-enable-prefix-caching $2" \
    --spawn-log "$OUT/$1.server.log" --no-progress-bar \
    --dataset mixed --num-prompts "$3" --num-long-prompts 1 --long-input-len 8000 --input-len 8 \
    --long-lead 1 --request-rate 2 --burstiness inf --output-len 16 --ignore-eos --seed 0 \
    --save-result "$OUT/$1.json" >"$OUT/$1.log" 2>&1
}

while IFS= read -r line; do
  [ -n "$line" ] || continue
  name="${line%%=*}"
  flags="${line#*=}"
  for r in $(seq "$REPEAT"); do
    bench "$name-$r" "$flags" 5
    bench "$name-alone-$r" "$flags" 1
  done
done <<<"$CONFIGS"

echo "results in $OUT"
python3 - "$OUT" "$CONFIGS" "$REPEAT" <<'EOF'
import json, statistics, sys
out, configs, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
print("| configuration | short TTFT median (s) | short TTFT worst (s) | long e2e (s) | long alone (s) | ratio |")
print("|---|---:|---:|---:|---:|---:|")
for line in filter(None, configs.splitlines()):
    name = line.split("=", 1)[0]
    rows = []
    for r in range(1, repeat + 1):
        mixed = json.load(open(f"{out}/{name}-{r}.json"))
        alone = json.load(open(f"{out}/{name}-alone-{r}.json"))
        short = mixed["ttft_by_class"]["short"]
        long_e2e = mixed["e2el_by_class"]["long"]["max_ms"] / 1000
        alone_e2e = alone["median_e2el_ms"] / 1000
        rows.append((short["median_ms"] / 1000, short["max_ms"] / 1000, long_e2e, alone_e2e,
                     long_e2e / alone_e2e))
    m = [statistics.median(col) for col in zip(*rows)]
    print(f"| {name} | {m[0]:.2f} | {m[1]:.2f} | {m[2]:.1f} | {m[3]:.1f} | {m[4]:.2f} |")
EOF
