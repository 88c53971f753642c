#!/usr/bin/env bash
# Reproduces docs/performance.md, "An 8-bit KV cache": `--kv-cache-dtype q8_0` and `fp8`
# against f16 on the default model (SmolLM2-135M Q4_1) and gemma-3-270m Q4_K_M.
#
#   scripts/kv-dtype-bench.sh ppl      perplexity on the Alice text (docs/models.md's command)
#   scripts/kv-dtype-bench.sh greedy   greedy agreement with f16: 20 prompts x 64 tokens,
#                                      ignoring EOS
#   scripts/kv-dtype-bench.sh tpot     1-user decode at an 8,000-token context, the dtypes
#                                      interleaved (f16, q8_0, fp8, f16, ...: ROUNDS rounds)
#   scripts/kv-dtype-bench.sh          all three
#
# TOKENMILL names the binary (default target/release/tokenmill; build it first); DTYPES the
# 8-bit types compared with f16 (default "q8_0 fp8"); MODELS which models ppl and greedy run
# (default "smol gemma").
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${TOKENMILL:-target/release/tokenmill}
alice=crates/tokenmill/tests/fixtures/texts/alice-chapters-1-4.txt
smol=$(scripts/fetch-model.sh | tail -1)
gemma=$(scripts/fetch-gemma3.sh | tail -1)
what=${1:-all}
dtypes=${DTYPES:-q8_0 fp8}
models=()
for m in ${MODELS:-smol gemma}; do
    case $m in
    smol) models+=("$smol") ;;
    gemma) models+=("$gemma") ;;
    *) echo "unknown model '$m' (smol, gemma)" >&2 && exit 1 ;;
    esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ $what == ppl || $what == all ]]; then
    for model in "${models[@]}"; do
        for dtype in f16 $dtypes; do
            printf '%s %s: ' "$(basename "$model")" "$dtype"
            "$bin" perplexity --model "$model" --file "$alice" --ctx-size 512 \
                --kv-cache-dtype "$dtype" 2>/dev/null | tail -1
        done
    done
fi

if [[ $what == greedy || $what == all ]]; then
    # One prompt a line: the prompts' newlines become spaces.
    python3 -c 'import json,sys; [print(p.replace("\n", " ")) for p in json.load(open(sys.argv[1]))]' \
        scripts/gemma3-vs-llama-prompts.json >"$work/prompts.txt"
    for model in "${models[@]}"; do
        for dtype in f16 $dtypes; do
            "$bin" generate --model "$model" --prompts-file "$work/prompts.txt" --json \
                --max-tokens 64 --ignore-eos --temperature 0 --kv-cache-dtype "$dtype" \
                2>/dev/null >"$work/$dtype.jsonl"
        done
        for dtype in $dtypes; do
            python3 - "$work/f16.jsonl" "$work/$dtype.jsonl" "$(basename "$model") $dtype" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
ids = lambda r: r.get("token_ids") or r.get("output_token_ids")
same, total, whole, firsts = 0, 0, 0, []
for x, y in zip(a, b):
    x, y = ids(x), ids(y)
    n = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), len(x))
    same += n
    total += len(x)
    whole += n == len(x)
    if n < len(x):
        firsts.append(n)
print(f"{sys.argv[3]}: {whole} of {len(a)} prompts agree on all {len(ids(a[0]))} tokens; "
      f"{same} of {total} tokens before the first difference; first differences at {firsts}")
EOF
        done
    done
fi

if [[ $what == tpot || $what == all ]]; then
    for round in $(seq "${ROUNDS:-3}"); do
        for dtype in f16 $dtypes; do
            printf 'round %s %s: ' "$round" "$dtype"
            "$bin" bench latency --model "$smol" --batch-size 1 --input-len 8000 --output-len 64 \
                --num-iters 1 --kv-cache-dtype "$dtype" 2>/dev/null | grep -i 'decode' | head -1
        done
    done
fi
