"""The fault campaign against a coordinator cluster: how soon every shard is served again.

``python -m bench.etcd_faults [--duration 600] [--seed 0]`` runs the ``etcd-faults`` chaos
scenario with the harness's Python API: one etcd and three ``huddle serve --cluster`` nodes
(lease TTL 2 s, 6 shards; each node reaching etcd, and reached by its clients, through a
fault proxy of its own), three cooperative-sticky members committing every 200 ms, and
faults one at a time, each healed: etcd frozen (SIGSTOP 1.5-2.7 s), killed and started
again on its data dir and port, the group's owner frozen past its lease, its links to etcd
and to its clients blackholed or reset, its open connections to etcd dropping what it sends
(one way), a member frozen. After each heal it measures the
time until etcd answers, then until every shard is served again.

Prints (JSON, with the CPU model) the faults survived, the recoveries that missed the bound
(the lease TTL plus a few seconds), and the time from etcd answering to every shard served:
median and max, overall and per heal. The exit status is 1 when a recovery missed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import cpu_model, quiet_logs
from huddle.chaos import events as ev
from huddle.chaos.cluster import SERVED_SLACK_S
from huddle.chaos.eventfiles import read_events
from huddle.chaos.events import events_dir
from huddle.chaos.harness import RunSettings, run
from huddle.chaos.scenarios import CLUSTER_LEASE_S, ETCD_FAULT_ACTIONS, Shape, built_in


def figures(times: list[float]) -> dict[str, float | int]:
    return {
        "count": len(times),
        "median_s": round(statistics.median(times), 3),
        "max_s": round(max(times), 3),
    }


def summarise(run_dir: Path, outcome: str) -> dict[str, Any]:
    chaos = read_events(events_dir(run_dir) / "chaos.jsonl")
    faults = [r for r in chaos if r["event"] == ev.FAULT and r["action"] in ETCD_FAULT_ACTIONS]
    served = [r for r in chaos if r["event"] == ev.SHARDS_SERVED]
    bound = CLUSTER_LEASE_S + SERVED_SLACK_S
    missed = [r for r in served if r["served_s"] is None or r["served_s"] > bound]
    times = [float(r["served_s"]) for r in served if r["served_s"] is not None]
    per_heal = {
        heal: figures([float(r["served_s"]) for r in served if r["after"] == heal])
        for heal in sorted({r["after"] for r in served})
        if all(r["served_s"] is not None for r in served if r["after"] == heal)
    }
    return {
        "cpu": cpu_model(),
        "outcome": outcome,
        "lease_ttl_s": CLUSTER_LEASE_S,
        "bound_s": bound,
        "faults": len(faults),
        "faults_by_kind": {
            a: sum(r["action"] == a for r in faults) for a in sorted(ETCD_FAULT_ACTIONS)
        },
        "recoveries_measured": len(served),
        "recoveries_missed": len(missed),
        "etcd_answering_to_every_shard_served": figures(times) if times else None,
        "by_heal": per_heal,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of faults")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="run dir to keep (default: a temporary one)")
    args = parser.parse_args()
    quiet_logs()
    run_dir = args.keep or Path(tempfile.mkdtemp(prefix="huddle-etcd-faults-"))
    settings = RunSettings(
        run_dir=run_dir,
        members=3,
        partitions=6,
        duration=args.duration,
        seed=args.seed,
        commit_interval_ms=200,
        session_timeout_ms=10_000,
    )
    scenario = built_in("etcd-faults", Shape(args.duration, 3, args.seed))
    try:
        result = run(settings, scenario, lambda line: print(line, file=sys.stderr, flush=True))
        summary = summarise(run_dir, result.outcome)
    finally:
        if args.keep is None:
            shutil.rmtree(run_dir, ignore_errors=True)
    print(json.dumps(summary, indent=2))
    if summary["outcome"] != "completed" or summary["recoveries_missed"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
