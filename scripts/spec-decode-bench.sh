#!/usr/bin/env bash
# The measurements of docs/speculative-decoding.md: tokenmill with and without speculation
# (`--speculative-config`, methods ngram and suffix) beside llama.cpp's llama-server without
# speculation and with each of its n-gram `--spec-type` modes, on the default model, greedy,
# the same prompts and the same client (`tokenmill bench serve`) for every server:
#
#   grounded  1 user:   NUM_PROMPTS (20) input-grounded chat prompts (`--dataset grounded`:
#                        code edits, extraction, rewriting, format conversion) one at a time.
#   mix       USERS (16) users: MIX_PROMPTS (64) prompts, grounded and open-chat in turn
#                        (`--dataset grounded-mix`).
#
# Each run gets a fresh server (the suffix method remembers earlier replies, and a second run of
# the same prompts on one server would draft from the first), warmed up with prompts of another
# seed, prompt caching off on both sides. The configurations take turns within each of REPEAT
# rounds, so a neighbour's load on a shared machine falls on all of them alike. Prints per
# workload and configuration the medians over the rounds of median TPOT, median TTFT, P99 ITL
# and output tok/s, the acceptance rate and mean acceptance length the server reported (pooled
# over the rounds: accepted / drafted tokens, 1 + accepted / drafts), and how
# many prompts' greedy text differed from the same server without speculation (in any round);
# then the ratios the targets of the issue ask for. A configuration whose server does not start
# (a method this build refuses) is reported as not run.
#
#   cargo build --release -p tokenmill && scripts/spec-decode-bench.sh [OUTPUT_DIR]
#   REPEAT=1 WORKLOADS=grounded CONFIGS=$'tokenmill=\nllama-server=' scripts/spec-decode-bench.sh out
#
# OUTPUT_DIR (default: a new directory from mktemp) receives per workload each run's
# `--save-result` JSON, `--save-responses` JSON lines, bench and server logs, and summary.md.
# CONFIGS: lines of NAME=EXTRA FLAGS; a NAME starting with "llama-server" runs llama-server, any
# other tokenmill, and the configurations named exactly "tokenmill" and "llama-server" are the
# baselines the others are compared with, listed before them (default: both, tokenmill with
# ngram and suffix, and llama-server with every n-gram --spec-type this build lists, each at
# its defaults).
# WORKLOADS: grounded and/or mix (default both). TOKENMILL: the binary (default
# ./target/release/tokenmill, built here). LLAMA_SERVER: its binary (default: the one
# scripts/build-llama-server.sh builds or finds). MODEL: a GGUF (default: the default model).
# PORT: 8018. REPEAT: 3. OUTPUT_LEN: the reply cap, 256 tokens. SUMMARY_ONLY=1: run nothing,
# print summary.md again from OUTPUT_DIR's runs (same CONFIGS, WORKLOADS and REPEAT).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-$(mktemp -d -t tokenmill-spec.XXXXXX)}"
mkdir -p "$OUT"
PORT="${PORT:-8018}"
REPEAT="${REPEAT:-3}"
NUM_PROMPTS="${NUM_PROMPTS:-20}"
USERS="${USERS:-16}"
MIX_PROMPTS="${MIX_PROMPTS:-64}"
OUTPUT_LEN="${OUTPUT_LEN:-256}"
WORKLOADS="${WORKLOADS:-grounded mix}"
THREADS="$(nproc)"
if [ -z "${TOKENMILL:-}" ]; then
  cargo build --release -p tokenmill >&2
  TOKENMILL=./target/release/tokenmill
fi
MODEL="${MODEL:-$(scripts/fetch-model.sh)}"
LLAMA_SERVER="${LLAMA_SERVER:-$(scripts/build-llama-server.sh)}"

# tokenmill's two drafters at 4 tokens a step; llama-server's n-gram modes as this build names
# them (they change between versions), each with its own defaults.
NGRAM='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2}'
SUFFIX='{"method":"suffix","num_speculative_tokens":4}'
LLAMA_MODES=$("$LLAMA_SERVER" --help 2>&1 | awk '$1 == "--spec-type" { print $2; exit }' | tr ',' '\n' | grep '^ngram' || true)
if [ -z "${CONFIGS:-}" ]; then
  CONFIGS="tokenmill=
tokenmill-ngram=--speculative-config '$NGRAM'
tokenmill-suffix=--speculative-config '$SUFFIX'
llama-server="
  for mode in $LLAMA_MODES; do CONFIGS+=$'\n'"llama-server-$mode=--spec-type $mode"; done
fi

# The server command of a configuration: its engine's base command, then its own flags.
# llama-server: one slot per user, 1024 tokens of context each (prompt, template and reply).
server_command() { # NAME FLAGS
  case "$1" in
    llama-server*)
      echo "$LLAMA_SERVER -m $MODEL --port $PORT --threads $THREADS --no-cache-prompt --cache-ram 0 --parallel $USERS -c $((USERS * 1024)) --metrics $2" ;;
    *) echo "$TOKENMILL serve --model $MODEL --port $PORT --no-enable-prefix-caching $2" ;;
  esac
}

SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
trap stop_server EXIT
trap 'exit 130' INT TERM

# Fails when the server exits at startup (a method this build refuses, say), so that
# configuration is skipped and the others still run.
start_server() { # NAME FLAGS LOG
  local tries=0
  # exec: the shell becomes the server, so its pid is the one to stop.
  sh -c "exec $(server_command "$1" "$2")" >"$3" 2>&1 &
  SERVER_PID=$!
  until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      wait "$SERVER_PID" 2>/dev/null || true
      SERVER_PID=""
      echo "$1 exited at startup, skipped; see $3:" >&2
      tail -3 "$3" >&2
      return 1
    fi
    tries=$((tries + 1))
    [ "$tries" -lt 1200 ] || { echo "$1 did not become healthy; see $3" >&2; exit 1; }
    sleep 0.1
  done
}

bench() { # OUTPUT_PREFIX DATASET PROMPTS CONCURRENCY SEED [--save-responses FILE ...]
  local prefix=$1 dataset=$2 prompts=$3 users=$4 seed=$5
  shift 5
  "$TOKENMILL" bench serve --base-url "http://127.0.0.1:$PORT" --endpoint chat \
    --dataset "$dataset" --num-prompts "$prompts" --max-concurrency "$users" \
    --output-len "$OUTPUT_LEN" --seed "$seed" --no-progress-bar "$@" >"$prefix.log" 2>&1 ||
    { echo "bench failed; see $prefix.log" >&2; tail -5 "$prefix.log" >&2; exit 1; }
}

# One measured run: a fresh server, a warm-up on prompts of another seed, then the workload.
run() { # WORKLOAD NAME FLAGS ROUND
  local dir="$OUT/$1" dataset prompts users
  mkdir -p "$dir"
  case "$1" in
    grounded) dataset=grounded; prompts=$NUM_PROMPTS; users=1 ;;
    mix) dataset=grounded-mix; prompts=$MIX_PROMPTS; users=$USERS ;;
    *) echo "unknown workload '$1' (grounded, mix)" >&2; exit 2 ;;
  esac
  start_server "$2" "$3" "$dir/$2-$4.server.log" || return 0
  bench "$dir/$2-$4.warmup" "$dataset" "$((users > 4 ? users : 4))" "$users" 1000
  bench "$dir/$2-$4" "$dataset" "$prompts" "$users" 0 \
    --save-result "$dir/$2-$4.json" --save-responses "$dir/$2-$4.responses.jsonl"
  stop_server
  echo "$1 round $4: $2 done" >&2
}

echo "results in $OUT" >&2
# On a busy machine llama-server's TPOT grows far more than tokenmill's (tens of times, at a
# load average of 9 on 2 cores), so figures from a loaded machine compare little.
if awk -v cores="$THREADS" '{ exit !($1 > cores / 2) }' /proc/loadavg; then
  echo "warning: load average $(cut -d' ' -f1 /proc/loadavg) on $THREADS cores; llama-server's figures will mostly measure the neighbours" >&2
fi
[ -n "${SUMMARY_ONLY:-}" ] || for workload in $WORKLOADS; do
  for r in $(seq "$REPEAT"); do
    while IFS= read -r line; do
      [ -n "$line" ] || continue
      run "$workload" "${line%%=*}" "${line#*=}" "$r"
    done <<<"$CONFIGS"
  done
done

{
  echo "spec-decode bench: $(basename "$MODEL"), $THREADS cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(date -u +%F), commit $(git rev-parse --short HEAD), REPEAT=$REPEAT, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 - "$OUT" "$CONFIGS" "$REPEAT" "$WORKLOADS" "$USERS" <<'EOF'
import json, statistics, sys
out, configs, repeat, workloads, users = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(), sys.argv[5]
names = [line.split("=", 1)[0] for line in configs.splitlines() if line.strip()]
rounds = range(1, repeat + 1)

def baseline(name):
    return "llama-server" if name.startswith("llama-server") else "tokenmill"

def texts(workload, name, r):
    with open(f"{out}/{workload}/{name}-{r}.responses.jsonl") as f:
        return [json.loads(line)["text"] for line in f]

def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None

def pooled(spec, numerator, denominator, plus=0.0):
    """Sum of numerator over sum of denominator across rounds; None when nothing was drafted."""
    if any(s.get(denominator) is None for s in spec):
        return None
    total = sum(s[denominator] for s in spec)
    return plus + sum(s[numerator] for s in spec) / total if total else None

def fmt(value, digits=2):
    return "n/a" if value is None else f"{value:.{digits}f}"

summary = {}
for workload in workloads:
    title = f"{workload}, 1 user" if workload == "grounded" else f"{workload}, {users} users"
    print(f"\n### {title}\n")
    print("| configuration | TPOT median (ms) | TTFT median (ms) | ITL P99 (ms) | output tok/s "
          "| acceptance rate | mean acceptance length | prompts differing from no-spec |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        try:
            runs = [json.load(open(f"{out}/{workload}/{name}-{r}.json")) for r in rounds]
        except FileNotFoundError:
            print(f"| {name} | not run: the server did not start (see {workload}/{name}-1.server.log) |||||||")
            continue
        spec = [run.get("spec_decode") or {} for run in runs]
        row = {
            "tpot": median(run["median_tpot_ms"] for run in runs),
            "ttft": median(run["median_ttft_ms"] for run in runs),
            "itl_p99": median(run["p99_itl_ms"] for run in runs),
            "tok_s": median(run["output_throughput"] for run in runs),
            # Pooled over the rounds: a round in which the server drafted nothing (its cost
            # model found no gain) counts as such, rather than dropping out of a median.
            "acceptance_rate": pooled(spec, "num_accepted_tokens", "num_draft_tokens"),
            "mean_acceptance_length": pooled(spec, "num_accepted_tokens", "num_drafts", 1.0),
            "failed": sum(run["failed"] for run in runs),
        }
        # Prompts whose text differs from the baseline's in the same round, in any round; for a
        # baseline, prompts whose text changed between its own rounds.
        base = baseline(name)
        differing = set()
        have_base = (workload, base) in summary or name == base
        for r in (rounds if have_base else []):
            ours = texts(workload, name, r)
            theirs = texts(workload, base, r if name != base else 1)
            differing |= {i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b}
        row["differing"] = len(differing) if have_base else None
        row["prompts"] = len(texts(workload, name, 1))
        summary[(workload, name)] = row
        diff = ("n/a (no baseline)" if row["differing"] is None
                else f"{row['differing']} of {row['prompts']}" + (" (between rounds)" if name == base else ""))
        failed = f" ({row['failed']} failed)" if row["failed"] else ""
        print(f"| {name}{failed} | {fmt(row['tpot'])} | {fmt(row['ttft'])} | {fmt(row['itl_p99'])} "
              f"| {fmt(row['tok_s'], 1)} | {fmt(row['acceptance_rate'])} "
              f"| {fmt(row['mean_acceptance_length'])} | {diff} |")

def ratio(a, b, key):
    x, y = summary.get(a), summary.get(b)
    if not x or not y or x[key] is None or not y[key]:
        return "n/a"
    return f"{x[key] / y[key]:.3f}"

print("\n### Ratios\n")
llama_modes = [n for n in names if n.startswith("llama-server-")]
best = None
if "grounded" in workloads and llama_modes:
    timed = [n for n in llama_modes if summary.get(("grounded", n), {}).get("tpot") is not None]
    best = min(timed, key=lambda n: summary[("grounded", n)]["tpot"]) if timed else None
for method in [n for n in names if n.startswith("tokenmill-")]:
    if "grounded" in workloads:
        print(f"- grounded, 1 user: {method} TPOT / tokenmill TPOT = "
              f"{ratio(('grounded', method), ('grounded', 'tokenmill'), 'tpot')} (target <= 0.65)")
        if best:
            print(f"- grounded, 1 user: {method} TPOT / {best} TPOT (llama-server's best n-gram mode) = "
                  f"{ratio(('grounded', method), ('grounded', best), 'tpot')} (target <= 0.8)")
    if "mix" in workloads:
        print(f"- mix, {users} users: {method} tok/s / tokenmill tok/s = "
              f"{ratio(('mix', method), ('mix', 'tokenmill'), 'tok_s')} (target >= 0.95)")
if best:
    print(f"- grounded, 1 user: {best} TPOT / llama-server TPOT = "
          f"{ratio(('grounded', best), ('grounded', 'llama-server'), 'tpot')}")
EOF
} | tee "$OUT/summary.md"
