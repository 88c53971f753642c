#!/usr/bin/env python3
"""Joins vllm-router's kv_aware decisions with the replicas' admissions, from one cluster run's logs.

Each decision (router log, `--log-level debug`) names the worker it chose and the prefix tokens it
credited from that worker's KV-cache events; each admission (replica log,
RUST_LOG=tokenmill_engine=debug) says how many prompt tokens the prefix cache served and the
prompt's first block, which names its shared prefix. The k-th decision for a worker is the k-th
prompt that worker admits (one request at a time reaches the engine in arrival order).

Prints every request whose credit and hit differ, then the summary: how often the router's credit
equals what the replica reused, and, of the prompts that reused nothing, how many went to a
replica other than one that already held their prefix (and how long it had held it).

    CLUSTER_ROUTER_LOG_LEVEL=debug RUST_LOG=tokenmill_engine=debug,vllm_router_rs=debug \
      PHASES=kvaware SEEDS=0 TOKENMILL_CLUSTER_DIR=DIR scripts/scale-out-bench.sh OUT
    scripts/kv-aware-placement.py DIR
"""
import collections
import datetime
import re
import sys
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")
DECISION = re.compile(
    r'KV prefix decision outcome="(\w+)" worker="http://[^:]+:(\d+)" input_tokens=(\d+) '
    r"new_prefill_tokens=\d+ credited_prefix_tokens=(\d+)"
)
ADMISSION = re.compile(
    r"^(\S+) .*admitted SeqId\(\d+\): \d+ prompt tokens, (\d+) from the prefix cache, "
    r"first block Some\(BlockHash\((\w+)"
)


def main(cluster_dir: Path) -> None:
    # Decisions per worker port, in order (lookups of no tokens route nothing the engine admits).
    decisions = collections.defaultdict(list)
    for line in (cluster_dir / "router.log").read_text(errors="replace").splitlines():
        m = DECISION.search(ANSI.sub("", line))
        if m and int(m[3]) > 0:
            decisions[int(m[2])].append(int(m[4]))
    if not decisions:
        sys.exit("no `KV prefix decision` lines: run the router at --log-level debug with RUST_LOG naming vllm_router_rs")
    # Replica i listens on the base port + i (scripts/cluster.sh); the lowest port seen is replica 0's.
    base = min(decisions)
    rows = []  # (time, replica, credited, cached, prefix)
    for log in sorted(cluster_dir.glob("replica-*.log")):
        replica = int(log.stem.split("-")[1])
        admissions = [ANSI.sub("", l) for l in log.read_text(errors="replace").splitlines()]
        admissions = [m for m in map(ADMISSION.search, admissions) if m]
        credits = decisions.get(base + replica, [])
        if len(credits) != len(admissions):
            print(f"replica {replica}: {len(credits)} decisions but {len(admissions)} admissions; joined up to the shorter")
        for credit, m in zip(credits, admissions):
            when = datetime.datetime.fromisoformat(m[1].rstrip("Z"))
            rows.append((when, replica, credit, int(m[2]), m[3][:16]))
    rows.sort()
    agree = sum(1 for r in rows if r[2] == r[3])
    first_seen = {}  # prefix -> {replica: first admission time}
    elsewhere = []
    cold = 0
    for when, replica, credit, cached, prefix in rows:
        if credit != cached:
            print(f"{when:%H:%M:%S.%f} replica {replica}: credited {credit}, reused {cached} (prefix {prefix})")
        held = first_seen.setdefault(prefix, {})
        if cached == 0:
            others = [t for r, t in held.items() if r != replica]
            if others:
                elsewhere.append((when - min(others)).total_seconds())
            else:
                cold += 1
        held.setdefault(replica, when)
    print(f"{len(rows)} requests joined; the router's credit equals the tokens the replica reused for {agree}")
    print(f"{sum(1 for r in rows if r[3] > 0)} reused a cached prefix; of the {cold + len(elsewhere)} that reused nothing, "
          f"{cold} went where no replica had yet admitted their prefix "
          f"({len(first_seen)} prefixes) and {len(elsewhere)} to another replica than one that had")
    if elsewhere:
        print("  seconds since that replica admitted the prefix: " + ", ".join(f"{s:.1f}" for s in sorted(elsewhere)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
