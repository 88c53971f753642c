#!/usr/bin/env bash
# A local cluster: N `tokenmill serve` replicas, each pinned to its own cores (taskset), behind
# SGLang's router from PyPI. Prints the router's URL and waits; Ctrl-C (or any exit) stops the
# router and every replica.
#
#   scripts/cluster.sh N [--policy cache_aware|round_robin|power_of_two|random]
#                        [--router sglang|vllm] [--port 30000] [--base-port 8100]
#                        [-- extra `tokenmill serve` flags]
#
# `--router vllm` puts vllm-router (PyPI) in front instead.
#
# `tokenmill bench serve --base-url <router URL>` then loads the cluster as it loads one server.
# Environment: TOKENMILL_BIN (default target/release/tokenmill), TOKENMILL_VENV (the venv
# scripts/test.sh makes; sglang-router is installed into it when missing), TOKENMILL_CLUSTER_DIR
# (where the logs go; default a fresh temporary directory), TOKENMILL_ROUTER_FLAGS (more
# sglang-router flags, e.g. "--health-check-interval-secs 1"), CLUSTER_ROUTER_LOG_LEVEL (the
# router's --log-level; warnings only by default, `debug` to see each routing decision).
#
# With fewer cores than replicas, replicas share cores round the machine (said on start).
# Sourced (by scripts/scale-out-bench.sh), it defines the functions and runs nothing.
set -euo pipefail

CLUSTER_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOKENMILL_BIN="${TOKENMILL_BIN:-$CLUSTER_ROOT/target/release/tokenmill}"
CLUSTER_VENV="${TOKENMILL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tokenmill/venv}"
CLUSTER_DIR="${TOKENMILL_CLUSTER_DIR:-}"
CLUSTER_PIDS=()     # replica i's pid at index i
CLUSTER_ROUTER_PID=""
CLUSTER_SERVE_FLAGS=()
CLUSTER_BASE_PORT=8100
CLUSTER_N=0
CLUSTER_URL=""
CLUSTER_ROUTER=sglang
# With CLUSTER_KV_EVENTS=1 replica i publishes KV-cache events on tcp port
# CLUSTER_KV_BASE_PORT + 2i (replay on the next port), and a vllm-router running
# `--policy kv_aware` subscribes to them (VLLM_ROUTER_TOKENIZER must name a HF tokenizer).
# vllm-router 0.1.17 keeps only messages whose topic frame is "" (static sources have no topic
# flag) and decodes events only as maps tagged by "type": hence topic "" and
# "event_encoding": "map".
CLUSTER_KV_EVENTS="${CLUSTER_KV_EVENTS:-0}"
CLUSTER_KV_BASE_PORT="${CLUSTER_KV_BASE_PORT:-5600}"

cluster_log() { echo "cluster: $*" >&2; }

# The python that has the router's package, installed into the venv if it is missing.
cluster_router_python() {
  local module=sglang_router package=sglang-router==0.3.2
  if [ "$CLUSTER_ROUTER" = vllm ]; then module=vllm_router package=vllm-router==0.1.17; fi
  if ! "$CLUSTER_VENV/bin/python" -c "import $module" 2>/dev/null; then
    [ -x "$CLUSTER_VENV/bin/python" ] || python3 -m venv "$CLUSTER_VENV"
    cluster_log "installing $package into $CLUSTER_VENV"
    "$CLUSTER_VENV/bin/pip" install --quiet "$package"
  fi
  echo "$CLUSTER_VENV/bin/python"
}

# Replica i's cores: the machine's cores split into N runs (CLUSTER_CORE_SETS runs when set,
# so 1 replica can get the share 1 of N would); with fewer cores than replicas, replica i gets
# core i mod cores.
cluster_cores() {
  local i=$1 n=${CLUSTER_CORE_SETS:-$2} cores
  cores=$(nproc)
  if [ "$n" -le "$cores" ]; then
    local from=$((i * cores / n)) to=$(((i + 1) * cores / n - 1))
    echo "$from-$to"
  else
    echo $((i % cores))
  fi
}

cluster_threads() {
  local range=$1
  case "$range" in
    *-*) echo $((${range#*-} - ${range%-*} + 1)) ;;
    *) echo 1 ;;
  esac
}

cluster_url() { echo "http://127.0.0.1:$((CLUSTER_BASE_PORT + $1))"; }

# Replica i's KV-event endpoints: the PUB port, then the replay port.
cluster_kv_port() { echo $((CLUSTER_KV_BASE_PORT + 2 * $1)); }

cluster_wait_health() {
  local url=$1 pid=$2 tries=0
  until curl -sf -o /dev/null "$url/health"; do
    kill -0 "$pid" 2>/dev/null || { cluster_log "replica at $url exited; see $CLUSTER_DIR"; return 1; }
    tries=$((tries + 1))
    [ "$tries" -lt 600 ] || { cluster_log "$url not healthy after 60 s"; return 1; }
    sleep 0.1
  done
}

# Starts replica i (again, after a kill) on its cores and port, and waits for its /health.
cluster_start_replica() {
  local i=$1 cores threads
  cores=$(cluster_cores "$i" "$CLUSTER_N")
  threads=$(cluster_threads "$cores")
  local kv=()
  if [ "$CLUSTER_KV_EVENTS" = 1 ]; then
    local pub
    pub=$(cluster_kv_port "$i")
    kv=(--kv-events-config "{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"tcp://*:$pub\", \"replay_endpoint\": \"tcp://*:$((pub + 1))\", \"topic\": \"\", \"event_encoding\": \"map\"}")
  fi
  taskset -c "$cores" "$TOKENMILL_BIN" serve --port $((CLUSTER_BASE_PORT + i)) \
    --threads "$threads" "${kv[@]}" "${CLUSTER_SERVE_FLAGS[@]}" >>"$CLUSTER_DIR/replica-$i.log" 2>&1 &
  CLUSTER_PIDS[i]=$!
  cluster_wait_health "$(cluster_url "$i")" "${CLUSTER_PIDS[i]}"
  cluster_log "replica $i: $(cluster_url "$i") on cores $cores (pid ${CLUSTER_PIDS[i]})"
}

# Starts N replicas and the router in front of them; sets CLUSTER_URL to the router's URL.
# (Not in a command substitution: the pids it records must stay in this shell.)
cluster_up() {
  local n=$1 policy=$2 port=$3 python i urls=()
  CLUSTER_N=$n
  [ -x "$TOKENMILL_BIN" ] || { cluster_log "no $TOKENMILL_BIN: cargo build --release -p tokenmill"; return 1; }
  [ -n "$CLUSTER_DIR" ] || CLUSTER_DIR=$(mktemp -d)
  mkdir -p "$CLUSTER_DIR"
  [ "$n" -le "$(nproc)" ] || cluster_log "$n replicas on $(nproc) cores: replicas share cores"
  python=$(cluster_router_python)
  for ((i = 0; i < n; i++)); do
    cluster_start_replica "$i"
    urls+=("$(cluster_url "$i")")
  done
  local extra=() launcher=sglang_router.launch_router ready=/readiness quiet=warn
  read -ra extra <<<"${TOKENMILL_ROUTER_FLAGS:-}"
  if [ "$CLUSTER_ROUTER" = vllm ]; then launcher=vllm_router.launch_router ready=/health quiet=warning; fi
  quiet=${CLUSTER_ROUTER_LOG_LEVEL:-$quiet}
  if [ "$CLUSTER_KV_EVENTS" = 1 ] && [ "$policy" = kv_aware ]; then
    local model
    model=$(curl -sf "${urls[0]}/v1/models" | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])')
    for ((i = 0; i < n; i++)); do
      extra+=(--kv-event-source "${urls[i]}=tcp://127.0.0.1:$(cluster_kv_port "$i")"
        --kv-event-replay-source "${urls[i]}=tcp://127.0.0.1:$(($(cluster_kv_port "$i") + 1))")
    done
    extra+=(--kv-event-block-size 16 --kv-event-model "$model")
  fi
  "$python" -m "$launcher" --host 127.0.0.1 --port "$port" --policy "$policy" \
    --log-level "$quiet" "${extra[@]}" --worker-urls "${urls[@]}" >>"$CLUSTER_DIR/router.log" 2>&1 &
  CLUSTER_ROUTER_PID=$!
  local tries=0
  until curl -sf -o /dev/null "http://127.0.0.1:$port$ready"; do
    kill -0 "$CLUSTER_ROUTER_PID" 2>/dev/null || { cluster_log "the router exited; see $CLUSTER_DIR/router.log"; return 1; }
    tries=$((tries + 1))
    [ "$tries" -lt 600 ] || { cluster_log "router not ready after 60 s"; return 1; }
    sleep 0.1
  done
  CLUSTER_URL="http://127.0.0.1:$port"
  cluster_log "$CLUSTER_ROUTER router ($policy): $CLUSTER_URL; logs in $CLUSTER_DIR"
}

# The router's id for replica i's worker (sglang-router's GET /workers), empty if not listed.
cluster_worker_id() {
  curl -sf "$CLUSTER_URL/workers" | python3 -c '
import json, sys
url = sys.argv[1]
for worker in json.load(sys.stdin).get("workers", []):
    if worker.get("url") == url:
        print(worker.get("id", ""))
' "$(cluster_url "$1")"
}

# Takes replica i out of the router's rotation (what a Kubernetes preStop pause does for a
# Service): no request is routed to it from here on.
cluster_detach() {
  local i=$1 id tries=0
  id=$(cluster_worker_id "$i")
  [ -n "$id" ] || return 0
  curl -sf -X DELETE -o /dev/null "$CLUSTER_URL/workers/$id"
  while [ -n "$(cluster_worker_id "$i")" ]; do
    tries=$((tries + 1))
    [ "$tries" -lt 100 ] || { cluster_log "the router still lists replica $i"; return 1; }
    sleep 0.1
  done
}

# Puts replica i back into the router's rotation.
cluster_attach() {
  local i=$1 tries=0
  curl -sf -o /dev/null -X POST -H 'content-type: application/json' \
    -d "{\"url\": \"$(cluster_url "$i")\"}" "$CLUSTER_URL/workers"
  until [ -n "$(cluster_worker_id "$i")" ]; do
    tries=$((tries + 1))
    [ "$tries" -lt 300 ] || { cluster_log "the router did not take replica $i back"; return 1; }
    sleep 0.1
  done
}

# Stops the router and every replica (each by its own pid), and waits for them.
cluster_down() {
  local pid
  for pid in $CLUSTER_ROUTER_PID "${CLUSTER_PIDS[@]}"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
  for pid in $CLUSTER_ROUTER_PID "${CLUSTER_PIDS[@]}"; do
    [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
  done
  CLUSTER_ROUTER_PID=""
  CLUSTER_PIDS=()
}

cluster_main() {
  local n="${1:-}" policy=cache_aware port=30000
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 N [--policy P] [--port P] [--base-port P] [-- serve flags]" >&2; exit 2; }
  shift
  while [ $# -gt 0 ]; do
    case "$1" in
      --policy) policy=$2; shift 2 ;;
      --router) CLUSTER_ROUTER=$2; shift 2 ;;
      --port) port=$2; shift 2 ;;
      --base-port) CLUSTER_BASE_PORT=$2; shift 2 ;;
      --) shift; CLUSTER_SERVE_FLAGS=("$@"); break ;;
      *) echo "unknown option $1" >&2; exit 2 ;;
    esac
  done
  trap cluster_down EXIT
  trap 'exit 130' INT TERM
  cluster_up "$n" "$policy" "$port"
  echo "$CLUSTER_URL"
  echo "Ctrl-C stops the router and the $n replicas" >&2
  wait "$CLUSTER_ROUTER_PID"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  cluster_main "$@"
fi
