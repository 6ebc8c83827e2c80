"""The demo (the README's first command): one rolling bounce, three protocols, one report.

Runs the ``rolling-bounce`` scenario with real member processes under the eager ``range``
assignor, ``cooperative-sticky`` (Design I) and ``cooperative-deferred`` (Design II), each
against its own coordinator; then one short run whose members are real Kafka consumers
(kafka-python, cooperative-sticky, one of them SIGKILLed: ``--kafka-client``) on the
coordinator's Kafka listener; then the PySpark report comparing them all. About 4 minutes.
A Kafka client that is not installed here is skipped with a line saying why, in the output
and in the comparison.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from huddle.chaos.clients import KAFKA_CLIENTS
from huddle.chaos.harness import RunSettings
from huddle.chaos.harness import run as run_chaos
from huddle.chaos.kafka_workers.launch import CLIENTS, missing
from huddle.chaos.protocols import ProtocolOptions
from huddle.chaos.scenarios import BUILT_IN, Scenario, Shape
from huddle.cli.render import plural
from huddle.cli.report import missing_extra
from huddle.logs import configure_logging

PROTOCOLS = ("range", "cooperative-sticky", "cooperative-deferred")
# the real-client segment: short, small, one kill -9 (Kafka's rule: the session times out)
KAFKA_PROTOCOL = "cooperative-sticky"
KAFKA_SCENARIO = "process-death"
KAFKA_DURATION_S = 12.0
KAFKA_MEMBERS = 3
KAFKA_PARTITIONS = 6


def add_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--members", type=int, default=6)
    demo.add_argument("--partitions", type=int, default=60)
    demo.add_argument("--duration", type=float, default=30.0, help="seconds per protocol")
    demo.add_argument("--run-dir", type=Path, default=None, help="default: runs/demo-<time>")
    demo.add_argument(
        "--kafka-client",
        choices=[*KAFKA_CLIENTS, "none"],
        default="kafka-python",
        help="the real Kafka client of the last run (none: no such run)",
    )
    demo.add_argument(
        "--verbose", action="store_true", help="Spark's own console progress and log lines too"
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    problem = missing_extra("huddle demo")  # before minutes of runs, not after them
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    from huddle.pipeline.analysis import analyse
    from huddle.pipeline.compare import write_comparison
    from huddle.pipeline.report import write_report
    from huddle.pipeline.spark import build_session

    root: Path = args.run_dir or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    root.mkdir(parents=True, exist_ok=True)
    configure_logging("json", "info", stream=open(root / "harness.log", "a", encoding="utf-8"))  # noqa: SIM115
    shape = Shape(duration=args.duration, members=args.members)
    print(
        f"huddle demo: rolling bounce of {args.members} {plural(args.members, 'member')} over "
        f"{args.partitions} {plural(args.partitions, 'partition')}, {args.duration:g} s per "
        f"protocol, runs in {root}"
    )
    runs: list[tuple[str, RunSettings, Scenario]] = []
    for protocol in PROTOCOLS:
        settings = RunSettings(
            run_dir=root / protocol,
            protocol=protocol,
            # deferred: a bounced member comes back well within the delay
            options=ProtocolOptions(delay_ms=10_000),
            members=args.members,
            partitions=args.partitions,
            duration=args.duration,
        )
        runs.append((protocol, settings, BUILT_IN["rolling-bounce"](shape)))
    kafka, notes = kafka_run(args.kafka_client, root)
    runs += kafka
    for note in notes:
        print(f"huddle demo: {note}")
    run_dirs: list[Path] = []
    for label, settings, scenario in runs:
        print(f"\n== {label} ==")
        result = run_chaos(settings, scenario, print)
        if result.outcome != "completed":
            print(f"huddle demo: the {label} run ended {result.outcome}")
            return result.exit_code
        run_dirs.append(settings.run_dir)
    print("\n== report (PySpark) ==", flush=True)
    spark = build_session("local[*]", verbose=bool(args.verbose))
    try:
        summaries = []
        for d in run_dirs:

            def step(what: str, d: Path = d) -> None:
                print(f"report: {d.name}: {what}", flush=True)

            summaries.append(write_report(analyse(spark, d, 100.0, progress=step)))
        print(write_comparison(summaries, root / "comparison", run_dirs, notes))
    finally:
        spark.stop()
    print(f"\nreports: {', '.join(str(d / 'report' / 'report.html') for d in run_dirs)}")
    print(f"comparison: {root / 'comparison' / 'comparison.html'} (and comparison.md)")
    return 1 if any(s.violations_total for s in summaries) else 0


def kafka_run(client: str, root: Path) -> tuple[list[tuple[str, RunSettings, Scenario]], list[str]]:
    """The real-client run, or none and the line that says why."""
    if client == "none":
        return [], ["no run with a real Kafka client (--kafka-client none)"]
    why = missing(client)
    if why is not None:
        return [], [f"no run with a real Kafka client: {why}"]
    # aiokafka has no cooperative protocol: its eager default (range)
    protocol = KAFKA_PROTOCOL if CLIENTS[client].cooperative else CLIENTS[client].eager
    settings = RunSettings(
        run_dir=root / client,
        protocol=protocol,
        client=client,
        members=KAFKA_MEMBERS,
        partitions=KAFKA_PARTITIONS,
        duration=KAFKA_DURATION_S,
    )
    scenario = BUILT_IN[KAFKA_SCENARIO](Shape(duration=KAFKA_DURATION_S, members=KAFKA_MEMBERS))
    label = f"{client} ({protocol}, {KAFKA_SCENARIO}: real Kafka consumers)"
    return [(label, settings, scenario)], []
