#!/usr/bin/env bash
# The measurements of docs/scale-out.md: REPLICAS (3) replicas behind sglang-router
# (scripts/cluster.sh), loaded by `tokenmill bench serve` with the prefix-repetition dataset
# (12 long system prompts x 4 questions).
#
#   1. cache_aware, then round_robin, through sglang-router and then vllm-router: every
#      request succeeds; the prefix-cache hit ratio summed over the replicas' /metrics.
#   2. kill -9 one replica under load: the failed requests are at most the ones that replica
#      had started; the rest (retried by the router) succeed; the replica, restarted, is
#      routed to again.
#   3. a rolling restart of every replica under load (SIGTERM: drain, exit, start again), once
#      with SIGTERM alone and once taking the replica out of the router first: failed requests.
#
#   4. throughput of N replicas on N core sets (N = the machine's cores) against one replica
#      on one core set.
#
#   5. (PHASES=kvaware) the workload of 1 through vllm-router's `kv_aware` policy, which
#      routes on the replicas' KV-cache events (`--kv-events-config`, one pair of ZMQ ports
#      per replica); it tokenizes prompts itself, with a HF tokenizer.json made from the GGUF
#      by scripts/make-hf-tokenizer.py.
#
#   cargo build --release -p tokenmill && scripts/scale-out-bench.sh [OUTPUT_DIR]
#
# OUTPUT_DIR (default bench-out/scale-out, git-ignored) receives each run's `--save-result` JSON and summary.txt.
# SEEDS (default "0 1 2") and CONCURRENCY (requests in flight in 1 and 5, default 3) vary the
# workload; scripts/kv-aware-placement.py follows phase 5's routing decisions request by request.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/cluster.sh
source scripts/cluster.sh
OUT="${1:-bench-out/scale-out}"
REPLICAS="${REPLICAS:-3}"
ROUTER_PORT="${ROUTER_PORT:-30100}"
CLUSTER_BASE_PORT="${BASE_PORT:-8200}"
# Health checks every second and a circuit breaker that reopens after 5 s, so a dead replica
# leaves the pool and a restarted one rejoins within seconds (the defaults take minutes).
export TOKENMILL_ROUTER_FLAGS="${TOKENMILL_ROUTER_FLAGS:---health-check-interval-secs 1 --health-failure-threshold 1 --health-success-threshold 1 --cb-timeout-duration-secs 5}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
PHASES="${PHASES:-prefix kvaware kill rolling throughput}" # a subset reruns only those, adding to summary.txt
[ "$PHASES" != "prefix kvaware kill rolling throughput" ] || : >"$SUMMARY"
trap cluster_down EXIT
trap 'exit 130' INT TERM

say() { echo "$*" | tee -a "$SUMMARY"; }

# The shared-prefix workload: 12 prefixes of PREFIX_LEN tokens, NUM_PROMPTS questions in all.
bench() {
  local url=$1 name=$2 prompts=$3 concurrency=$4
  "$TOKENMILL_BIN" bench serve --base-url "$url" --tokenizer-base-url "$(cluster_url 0)" \
    --dataset prefix-repetition \
    --num-prefixes 12 --prefix-len "${PREFIX_LEN:-400}" --input-len 12 --output-len 16 \
    --num-prompts "$prompts" --max-concurrency "$concurrency" --seed "${5:-0}" \
    --no-progress-bar --save-result "$OUT/$name.json" >"$OUT/$name.log" 2>&1
}

# A counter summed over the replicas' /metrics.
sum_metric() {
  local series=$1 i total=0 value
  for ((i = 0; i < CLUSTER_N; i++)); do
    value=$(curl -sf "$(cluster_url "$i")/metrics" | awk -v s="$series" 'index($1, s"{") == 1 { print $2; exit }')
    total=$(awk -v a="$total" -v b="${value:-0}" 'BEGIN { print a + b }')
  done
  echo "$total"
}

# `completed failed` of a saved run.
outcome() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["completed"], r["failed"])' "$1"
}

# Until the load has started (its prompts are fitted through replica 0's /tokenize first).
wait_for_load() {
  local i n tries=0
  while :; do
    n=0
    for ((i = 0; i < CLUSTER_N; i++)); do n=$((n + $(requests_served_by "$i"))); done
    [ "$n" -ge 3 ] && return 0
    tries=$((tries + 1))
    [ "$tries" -lt 600 ] || { echo "the load did not start" >&2; return 1; }
    sleep 0.1
  done
}

# Failed requests of a saved run whose stream had begun (a reply under way when its replica
# died); any other failure is a request that never started.
broken_streams() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sum(1 for e in r["errors"] if e.startswith("stream broke")))' "$1"
}

in_flight() {
  curl -sf "$(cluster_url "$1")/metrics" |
    awk 'index($1, "tokenmill:num_requests_running{") == 1 || index($1, "tokenmill:num_requests_waiting{") == 1 { n += $2 } END { print n + 0 }'
}

requests_served_by() {
  curl -sf "$(cluster_url "$1")/metrics" |
    awk 'index($1, "tokenmill:request_success_total{") == 1 { n += $2 } END { print n + 0 }'
}

say "scale-out bench: $REPLICAS replicas on $(nproc) cores, $(date -u +%F), commit $(git rev-parse --short HEAD)"
say "router flags: $TOKENMILL_ROUTER_FLAGS"

# 1. Prefix-cache hit ratio per router and policy, each seed (a different draw of prefixes
# and order) on fresh replicas; the ratio over all seeds is hits / queries summed.
runs=()
[[ " $PHASES " != *" prefix "* ]] || runs+=(sglang:cache_aware sglang:round_robin vllm:cache_aware vllm:round_robin)
if [[ " $PHASES " == *" kvaware "* ]]; then
  runs+=(vllm:kv_aware)
  # vllm-router tokenizes each prompt itself (a HF tokenizer.json; the model ships only a GGUF).
  MODEL_GGUF="${MODEL_GGUF:-${XDG_CACHE_HOME:-$HOME/.cache}/tokenmill/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
  export VLLM_ROUTER_TOKENIZER="${VLLM_ROUTER_TOKENIZER:-target/hf-tokenizer/$(basename "$MODEL_GGUF" .gguf)}"
  if [ ! -f "$VLLM_ROUTER_TOKENIZER/tokenizer.json" ]; then
    "$CLUSTER_VENV/bin/python" -c 'import gguf, tokenizers' 2>/dev/null ||
      "$CLUSTER_VENV/bin/pip" install --quiet gguf tokenizers
    "$CLUSTER_VENV/bin/python" scripts/make-hf-tokenizer.py "$MODEL_GGUF" "$VLLM_ROUTER_TOKENIZER"
  fi
  VLLM_ROUTER_TOKENIZER=$(cd "$VLLM_ROUTER_TOKENIZER" && pwd)
fi
# vllm-router's own counters (its --prometheus-port, 29000 by default): how many kv_aware
# decisions found a cached prefix in the replicas' events.
router_kv_lookups() {
  curl -sf "http://127.0.0.1:${ROUTER_PROMETHEUS_PORT:-29000}/metrics" |
    awk 'index($1, "vllm_router_kv_placement_lookups_total{") == 1 { printf "%s=%s ", $1, $2 }' |
    sed 's/vllm_router_kv_placement_lookups_total{result="\([a-z_]*\)"}/\1/g'
}
for run in "${runs[@]}"; do
  CLUSTER_ROUTER=${run%%:*}
  policy=${run#*:}
  name="$CLUSTER_ROUTER-$policy"
  all_hits=0 all_queries=0 all_failed=0
  CLUSTER_KV_EVENTS=0
  [ "$policy" != kv_aware ] || CLUSTER_KV_EVENTS=1
  for seed in ${SEEDS:-0 1 2}; do
    cluster_up "$REPLICAS" "$policy" "$ROUTER_PORT"
    bench "$CLUSTER_URL" "prefix-$name-seed$seed" 48 "${CONCURRENCY:-3}" "$seed"
    hits=$(sum_metric tokenmill:prefix_cache_hits_total)
    queries=$(sum_metric tokenmill:prefix_cache_queries_total)
    read -r completed failed < <(outcome "$OUT/prefix-$name-seed$seed.json")
    per_replica=$(for ((i = 0; i < REPLICAS; i++)); do printf '%s ' "$(requests_served_by "$i")"; done)
    say "$name seed $seed: $completed completed, $failed failed; prefix-cache hits $hits / queries $queries = $(awk -v h="$hits" -v q="$queries" 'BEGIN { printf "%.3f", h / q }'); requests per replica: $per_replica"
    [ "$policy" != kv_aware ] || say "$name seed $seed: the router's KV placement lookups: $(router_kv_lookups)"
    all_hits=$((all_hits + hits)) all_queries=$((all_queries + queries)) all_failed=$((all_failed + failed))
    cluster_down
  done
  say "$name over all seeds: $all_failed failed; hit ratio $(awk -v h="$all_hits" -v q="$all_queries" 'BEGIN { printf "%.3f", h / q }')"
done
CLUSTER_ROUTER=sglang CLUSTER_KV_EVENTS=0

# 2. kill -9 one replica under load, then restart it.
if [[ " $PHASES " == *" kill "* ]]; then
cluster_up "$REPLICAS" cache_aware "$ROUTER_PORT"
url=$CLUSTER_URL
bench "$url" kill-9 240 6 &
load=$!
wait_for_load
sleep "${KILL_AFTER:-3}"
# The victim: the replica with the most requests under way, so the kill hits replies.
victim=0 started=-1
for ((i = 0; i < REPLICAS; i++)); do
  n=$(in_flight "$i")
  if [ "$n" -gt "$started" ]; then victim=$i started=$n; fi
done
kill -9 "${CLUSTER_PIDS[victim]}"
wait "${CLUSTER_PIDS[victim]}" 2>/dev/null || true
say "kill -9: replica $victim killed; its /metrics (updated after each engine step) showed $started under way"
sleep 3
cluster_start_replica "$victim"
wait "$load" || true
read -r completed failed < <(outcome "$OUT/kill-9.json")
say "kill -9: $completed completed, $failed failed, of which $(broken_streams "$OUT/kill-9.json") were streams broken mid-reply (started on the killed replica); any other failure never started"
# New prefixes: cache-aware routing sends prompts it has no match for to the replica with the
# least cached, which is the restarted one, if the router took it back.
before=$(requests_served_by "$victim")
bench "$url" after-restart 24 3 1
after=$(requests_served_by "$victim")
read -r completed failed < <(outcome "$OUT/after-restart.json")
say "after the restart: $completed completed, $failed failed; the restarted replica served $((after - before)) of them"
cluster_down
fi

# 3. Rolling restarts under load, each replica in turn: (a) SIGTERM alone, the router
# learning of the drain from /health (polled every second) and 503s; (b) out of the router's
# rotation first (as a Kubernetes preStop pause does), then SIGTERM.
for how in sigterm detach-then-sigterm; do
  [[ " $PHASES " == *" rolling "* ]] || break
  cluster_up "$REPLICAS" cache_aware "$ROUTER_PORT"
  url=$CLUSTER_URL
  bench "$url" "rolling-$how" 240 6 &
  load=$!
  wait_for_load
  for ((i = 0; i < REPLICAS; i++)); do
    [ "$how" = sigterm ] || cluster_detach "$i"
    kill -TERM "${CLUSTER_PIDS[i]}"
    wait "${CLUSTER_PIDS[i]}" 2>/dev/null || true
    cluster_start_replica "$i"
    if [ "$how" = sigterm ]; then sleep 3; else cluster_attach "$i"; fi
  done
  wait "$load" || true
  read -r completed failed < <(outcome "$OUT/rolling-$how.json")
  say "rolling restart ($how): $completed completed, $failed failed"
  cluster_down
done

# 4. Throughput: N replicas on N core sets against one replica on one of them (random
# 128-token prompts, 64 output tokens, prefix caching off, 16 in flight).
if [[ " $PHASES " == *" throughput "* ]]; then
  sets=$(nproc)
  for replicas in 1 "$sets"; do
    CLUSTER_CORE_SETS=$sets CLUSTER_SERVE_FLAGS=(--no-enable-prefix-caching)
    cluster_up "$replicas" round_robin "$ROUTER_PORT"
    "$TOKENMILL_BIN" bench serve --base-url "$CLUSTER_URL" --tokenizer-base-url "$(cluster_url 0)" \
      --input-len 128 --output-len 64 --ignore-eos --num-prompts 128 --max-concurrency 16 \
      --seed 0 --no-progress-bar --save-result "$OUT/throughput-$replicas.json" \
      >"$OUT/throughput-$replicas.log" 2>&1
    read -r completed failed < <(outcome "$OUT/throughput-$replicas.json")
    tput=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["output_throughput"], 1))' "$OUT/throughput-$replicas.json")
    say "throughput, $replicas of $sets core sets: $completed completed, $failed failed; $tput output tokens/s"
    cluster_down
  done
  unset CLUSTER_CORE_SETS
  CLUSTER_SERVE_FLAGS=()
fi
