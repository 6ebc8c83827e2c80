"""The chaos scenarios that fault the coordinator and the network, with huddle's own members
on the consumer protocol (KIP-848) beside ``cooperative-sticky``: the pipeline's figures and
safety checks of each run.

``python -m bench.consumer_chaos`` runs, with the chaos harness's Python API (a coordinator,
or etcd and three coordinator nodes, and real member processes on 127.0.0.1), each of
``coordinator-restart``, ``network-faults``, ``coordinator-failover``, ``etcd-faults`` and a
``--stateful`` ``rolling-bounce`` once with ``cooperative-sticky`` and once with ``consumer``
(one after the other, so the pair meets the same machine noise; 3 members, 6 partitions),
then analyses every run in one Spark session (``huddle.pipeline.analysis.analyse`` +
``summarise``) and prints one table. The exit status is 1 when a run did not complete or
the pipeline found a safety violation.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common import cpu_model, quiet_logs
from huddle.chaos.harness import RunSettings, run
from huddle.chaos.scenarios import Shape, built_in
from huddle.pipeline.defaults import DEFAULT_GAP_MS, DEFAULT_MASTER

PROTOCOLS = ("cooperative-sticky", "consumer")
# scenario, seconds, stateful
SCENARIOS: tuple[tuple[str, float, bool], ...] = (
    ("coordinator-restart", 12.0, False),
    ("network-faults", 15.0, False),
    ("coordinator-failover", 20.0, False),
    ("etcd-faults", 40.0, False),
    ("rolling-bounce", 12.0, True),
)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.consumer_chaos", description=__doc__)
    p.add_argument("--scale", type=float, default=1.0, help="multiplies every run's seconds")
    p.add_argument("--keep", type=Path, help="keep the run directories here (default: removed)")
    p.add_argument("--master", default=DEFAULT_MASTER)
    args = p.parse_args(argv)
    quiet_logs()
    root = args.keep or Path(tempfile.mkdtemp(prefix="huddle-bench-consumer-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        return _bench(args, root)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
        print(f"total wall time {time.monotonic() - started:.0f} s")


def _bench(args: argparse.Namespace, root: Path) -> int:
    runs: list[tuple[str, str, Path, str]] = []  # label, protocol, run dir, outcome
    for scenario, seconds, stateful in SCENARIOS:
        duration = seconds * args.scale
        label = f"{scenario} --stateful" if stateful else scenario
        for protocol in PROTOCOLS:
            run_dir = root / f"{len(runs)}-{scenario}-{protocol}"
            settings = RunSettings(
                run_dir=run_dir, protocol=protocol, duration=duration, stateful=stateful
            )
            shape = Shape(duration, settings.members, 0, settings.session_timeout_ms / 1000)
            result = run(settings, built_in(scenario, shape), _progress)
            runs.append((label, protocol, run_dir, result.outcome))

    from huddle.pipeline.analysis import analyse
    from huddle.pipeline.spark import build_session
    from huddle.pipeline.summary import summarise

    spark = build_session(args.master, app_name="bench-consumer-chaos", driver_memory="4g")
    try:
        summaries = [summarise(analyse(spark, d, DEFAULT_GAP_MS)) for _, _, d, _ in runs]
    finally:
        spark.stop()

    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(
        "| scenario | protocol | outcome | unavailable partition-s | longest outage s "
        "| rebalances | records | processed again | violations |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ok = True
    for (label, protocol, _, outcome), s in zip(runs, summaries, strict=True):
        ok = ok and outcome == "completed" and s.violations_total == 0
        print(
            f"| {label} | {protocol} | {outcome} "
            f"| {s.total_unavailable_partition_seconds or 0.0:.2f} "
            f"| {s.max_outage_seconds or 0.0:.2f} | {s.rebalance_count} "
            f"| {s.records_processed} | {s.duplicates} | {s.violations_total} |"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
