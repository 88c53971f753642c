#!/usr/bin/env python3
"""Joins vllm-router's kv_aware decisions with the replicas' admissions, from one cluster run's logs.

Each decision (router log, `--log-level debug`) names the worker it chose and the prefix tokens it
credited from that worker's KV-cache events; each admission (replica log,
RUST_LOG=tokenmill_engine=debug) says how many prompt tokens the prefix cache served and the
prompt's first block, which names its shared prefix. The k-th decision for a worker is the k-th
prompt that worker admits (one request at a time reaches the engine in arrival order).

Prints every request whose credit and hit differ, then the summary: how often the router's credit
equals what the replica reused, and, of the prompts that reused nothing, how many went to a
replica other than one that had already admitted their prefix (and how long after it had).

Given the run's saved bench JSON as well, it replays the router's cost for every decision. As
vllm-router 0.1.17's `kv_aware` is written (src/policies/kv_aware.rs of its source package), a
replica's cost is (the prompt's tokens its events do not credit + the uncredited tokens of the
requests routed there that have not yet streamed a byte) x (the requests routed there and not yet
done + 1), all counted by the router itself, and at temperature 0 it takes the cheapest. The
replay rebuilds those counts from each request's send, first token and end as the bench saved them
(`sent_s`, `ttfts`, `finished_s`; the k-th request sent is the router's k-th decision),
treats a prefix as announced by a replica once the first request routed there with it has streamed
its first token, and prints, for each prompt sent away from a replica that held its prefix, every
replica's replayed cost.

    CLUSTER_ROUTER_LOG_LEVEL=debug RUST_LOG=tokenmill_engine=debug,vllm_router_rs=debug \
      PHASES=kvaware SEEDS=0 TOKENMILL_CLUSTER_DIR=DIR scripts/scale-out-bench.sh OUT
    scripts/kv-aware-placement.py DIR [OUT/prefix-vllm-kv_aware-seed0.json]
"""
import collections
import datetime
import json
import re
import sys
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)")
DECISION = re.compile(
    r'KV prefix decision outcome="(\w+)" worker="http://[^:]+:(\d+)" input_tokens=(\d+) '
    r"new_prefill_tokens=(\d+) credited_prefix_tokens=(\d+)"
)
ADMISSION = re.compile(
    r"^(\S+) .*admitted SeqId\(\d+\): \d+ prompt tokens, (\d+) from the prefix cache, "
    r"first block Some\(BlockHash\((\w+)"
)

Decision = collections.namedtuple("Decision", "admitted replica input_tokens new_prefill credited cached prefix")


def stamp(text: str) -> datetime.datetime:
    m = STAMP.search(text)
    if not m:
        sys.exit(f"no timestamp in: {text[:120]}")
    # Python 3.11 parses at most microseconds.
    whole, _, frac = m[1].partition(".")
    return datetime.datetime.fromisoformat(whole + ("." + frac[:6] if frac else ""))


def read_decisions(cluster_dir: Path) -> list:
    """Every decision of the run in the router's order, joined with the admission it led to."""
    routed = []  # (port, input_tokens, new_prefill, credited), in the router's order
    for line in (cluster_dir / "router.log").read_text(errors="replace").splitlines():
        line = ANSI.sub("", line)
        m = DECISION.search(line)
        # Lookups of no tokens route nothing the engine admits.
        if m and int(m[3]) > 0:
            routed.append((int(m[2]), int(m[3]), int(m[4]), int(m[5])))
    if not routed:
        sys.exit("no `KV prefix decision` lines: run the router at --log-level debug with RUST_LOG naming vllm_router_rs")
    # Replica i listens on the base port + i (scripts/cluster.sh); the lowest port seen is replica 0's.
    base = min(port for port, *_ in routed)
    admissions = {}
    for log in sorted(cluster_dir.glob("replica-*.log")):
        lines = [ANSI.sub("", l) for l in log.read_text(errors="replace").splitlines()]
        admissions[int(log.stem.split("-")[1])] = [m for m in map(ADMISSION.search, lines) if m]
    taken = collections.Counter()
    decisions = []
    for port, input_tokens, new_prefill, credited in routed:
        replica = port - base
        k = taken[replica]
        taken[replica] += 1
        if k >= len(admissions.get(replica, [])):
            print(f"replica {replica}: decision {k + 1} has no admission; left out")
            continue
        m = admissions[replica][k]
        decisions.append(Decision(stamp(m[1]), replica, input_tokens, new_prefill, credited, int(m[2]), m[3][:16]))
    for replica, seen in admissions.items():
        if len(seen) != taken[replica]:
            print(f"replica {replica}: {taken[replica]} decisions but {len(seen)} admissions")
    return decisions


def summarise(decisions: list) -> None:
    rows = sorted(decisions, key=lambda d: d.admitted)
    agree = sum(1 for d in rows if d.credited == d.cached)
    first_seen = {}  # prefix -> {replica: first admission}
    elsewhere = []
    cold = 0
    for d in rows:
        if d.credited != d.cached:
            print(f"{d.admitted:%H:%M:%S.%f} replica {d.replica}: credited {d.credited}, reused {d.cached} (prefix {d.prefix})")
        held = first_seen.setdefault(d.prefix, {})
        if d.cached == 0:
            others = [t for r, t in held.items() if r != d.replica]
            if others:
                elsewhere.append((d.admitted - min(others)).total_seconds())
            else:
                cold += 1
        held.setdefault(d.replica, d.admitted)
    print(f"{len(rows)} requests joined; the router's credit equals the tokens the replica reused for {agree}")
    print(f"{sum(1 for d in rows if d.cached > 0)} reused a cached prefix; of the {cold + len(elsewhere)} that reused nothing, "
          f"{cold} went where no replica had yet admitted their prefix "
          f"({len(first_seen)} prefixes) and {len(elsewhere)} to another replica than one that had")
    if elsewhere:
        print("  seconds since that replica admitted the prefix: " + ", ".join(f"{s:.2f}" for s in sorted(elsewhere)))


def request_times(result: dict) -> list:
    """(sent, first token, end) of each request in seconds from the run's first send, in the
    order they were sent, which is the order the router decides them."""
    if "sent_s" not in result:
        sys.exit("the bench JSON has no `sent_s`: save it with a tokenmill bench that records send times")
    firsts = (sent + ttft for sent, ttft in zip(result["sent_s"], result["ttfts"]))
    return sorted(zip(result["sent_s"], firsts, result["finished_s"]))


def replay(decisions: list, bench_json: Path) -> None:
    times = request_times(json.loads(bench_json.read_text()))
    if len(times) != len(decisions):
        print(f"replay: {len(decisions)} decisions but {len(times)} requests in {bench_json.name}; joined up to the shorter")
    n = min(len(times), len(decisions))
    replicas = sorted({d.replica for d in decisions})
    # The tokens a replica's events credit for a prefix it holds: what the router credited it there.
    credit_of = collections.defaultdict(int)
    for d in decisions:
        credit_of[d.prefix] = max(credit_of[d.prefix], d.credited)
    agree = ties = 0
    away = []  # lines for prompts sent away from a replica that held their prefix
    for i in range(n):
        d, (now, _, _) = decisions[i], times[i]
        costs = {}
        held_by = []
        for r in replicas:
            mine = [(e, t) for e, t in zip(decisions[:i], times[:i]) if e.replica == r]
            in_flight = sum(1 for _, (_, _, end) in mine if end > now)
            prefilling = sum(e.new_prefill for e, (_, first, _) in mine if first > now)
            if any(e.prefix == d.prefix and first <= now for e, (_, first, _) in mine):
                held_by.append(r)
            new_prefill = d.input_tokens - (credit_of[d.prefix] if r in held_by else 0)
            costs[r] = ((new_prefill + prefilling) * (in_flight + 1), new_prefill, prefilling, in_flight)
        cheapest = min(c[0] for c in costs.values())
        winners = [r for r, c in costs.items() if c[0] == cheapest]
        if winners == [d.replica]:
            agree += 1
        elif d.replica in winners:
            ties += 1
        if held_by and d.replica not in held_by:
            parts = ", ".join(
                f"replica {r}{' (holds it)' if r in held_by else ''}: ({new} + {pre}) x ({k} + 1) = {cost}"
                for r, (cost, new, pre, k) in costs.items()
            )
            away.append(f"  at {now:.2f} s request {i} went to replica {d.replica}; replayed costs {parts}")
    print(f"replay: the replayed cost's cheapest replica is the one the router chose for {agree} of {n} requests, "
          f"one of equally cheap ones for {ties} more")
    print(f"replay: {len(away)} prompts went away from a replica that had announced their prefix:")
    for line in away:
        print(line)


def main(cluster_dir: Path, bench_json: Path | None) -> None:
    decisions = read_decisions(cluster_dir)
    summarise(decisions)
    if bench_json:
        replay(decisions, bench_json)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else None)
