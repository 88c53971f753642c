#!/usr/bin/env bash
# The measured sweeps behind docs/tuning.md: one knob at a time with `tokenmill tune --search
# grid` (tables, JSON and charts per sweep), plus prefix caching and KV memory runs. Build
# first (`cargo build --release -p tokenmill`); run on an otherwise idle machine (~20 min).
# Usage: scripts/tuning-sweeps.sh [OUTPUT_DIR]   (default bench-out/tuning, git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
S=./target/release/tokenmill
SERVE="$S serve --port 8020 --no-enable-prefix-caching {flags}"
W="--input-len 128 --output-len 64 --num-prompts 64 --max-concurrency 64 --ignore-eos --seed 0 --base-url http://127.0.0.1:8020 --no-progress-bar"
O=${1:-bench-out/tuning}
mkdir -p "$O"; rm -f "$O/kv.txt"
# 1. token budget, 64 users
$S tune --itl-p99-ms 500 $W --search grid --max-num-batched-tokens 64,128,256,512,1024,2048 --max-num-seqs 64 \
  --spawn "$SERVE" --output-dir $O/budget > $O/budget.log 2>&1
# 2. max-num-seqs, 64 users, budget 512
$S tune --itl-p99-ms 500 $W --search grid --max-num-batched-tokens 512 --max-num-seqs 1,4,16,64,128 \
  --spawn "$SERVE" --output-dir $O/seqs > $O/seqs.log 2>&1
# 3. ITL targets, budget 512 (the default) as the hard cap
$S tune --itl-p99-ms 500 $W --search grid --max-num-batched-tokens 512 --max-num-seqs 256 --target-itl-ms 250,500 \
  --spawn "$SERVE" --output-dir $O/itl > $O/itl.log 2>&1
# 4. the mixed-length workload (128..1024-token prompts): default, targets
WM="--input-len 576 --range-ratio 0.78 --output-len 64 --num-prompts 64 --max-concurrency 64 --ignore-eos --seed 0 --base-url http://127.0.0.1:8020 --no-progress-bar"
$S tune --itl-p99-ms 500 $WM --search grid --max-num-batched-tokens 256,512,1024 --max-num-seqs 256 \
  --spawn "$SERVE" --output-dir $O/mix-budget > $O/mix-budget.log 2>&1
$S tune --itl-p99-ms 500 $WM --search grid --max-num-batched-tokens 512 --max-num-seqs 256 --target-itl-ms 250,500 \
  --spawn "$SERVE" --output-dir $O/mix-itl > $O/mix-itl.log 2>&1
# 5. prefix caching with a 256-token shared prefix
for pc in "" "--no-enable-prefix-caching"; do
  $S bench serve --spawn "$S serve --port 8020 $pc" --input-len 64 --prefix-len 256 --output-len 32 --num-prompts 64 \
    --max-concurrency 16 --ignore-eos --seed 0 --base-url http://127.0.0.1:8020 --no-progress-bar --percentiles 50,99 \
    --save-result $O/prefix${pc:+-off}.json > $O/prefix${pc:+-off}.log 2>&1
done
# 6. KV memory: caches too small for 64 users at once (preemptions), engine only
for kv in 128 256 512 4096; do
  echo "num-kv-blocks $kv: $($S bench throughput --num-prompts 64 --input-len 128 --output-len 64 --num-kv-blocks $kv 2>&1 | grep throughput:)" >> $O/kv.txt
done
