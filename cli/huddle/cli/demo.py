"""The demo (the README's first command): each protocol where its design should show, one report.

Every run has real member processes with state (a partition's state is its last
``STATE_RECORDS`` records, rebuilt at ``RESTORE_RATE`` records/s on a member that did not
have it), each against its own coordinator (``DEMO_RUNS``): a rolling bounce under the
eager ``range`` assignor, ``cooperative-sticky`` (Design I), ``cooperative-deferred``
(Design II) and static membership (KIP-345); a scale-up and a process death under
``cooperative-sticky`` and ``high-availability`` (KIP-441: warm-ups, probing rebalances,
a standby); then one short run whose members are real Kafka consumers (kafka-python,
cooperative-sticky, one of them SIGKILLed: ``--kafka-client``) on the coordinator's Kafka
listener; then two short rolling bounces of confluent-kafka consumers, one under
``cooperative-sticky`` and one under KIP-848's consumer protocol (``consumer``: the
coordinator assigns; ``--no-consumer-protocol`` leaves them out), so that the consumer
protocol is compared with the classic one of the same client; then the PySpark report
comparing them all. About 6 minutes. A Kafka client that is not installed here is skipped
with a line saying why, in the output and in the comparison.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from huddle.chaos.clients import KAFKA_CLIENTS
from huddle.chaos.harness import RunSettings
from huddle.chaos.harness import run as run_chaos
from huddle.chaos.kafka_workers.launch import CLIENTS, missing
from huddle.chaos.protocols import ProtocolOptions
from huddle.chaos.scenarios import BOUNCE_DOWN_S, BUILT_IN, Scenario, Shape
from huddle.cli.render import plural
from huddle.cli.report import missing_extra
from huddle.logs import configure_logging

# the workload's state: what a move costs, in words on the comparison page (``intro``)
RATE = 50.0  # records/s per partition
STATE_RECORDS = 250  # a partition's state: its last 250 records (5 s of input)
RESTORE_RATE = 125.0  # records/s rebuilt: 2 s to rebuild a partition from nothing
DELAY_MS = 10_000  # cooperative-deferred: a bounced member is back well within it
DEFERRED = ProtocolOptions(delay_ms=DELAY_MS)
# KIP-441: caught up within 2 s of input, one standby per partition, warm-ups checked every
# second (Kafka's default is 10 minutes: the demo has 15 s), all of a member's at once
HIGH_AVAILABILITY = ProtocolOptions(
    acceptable_recovery_lag=100,
    num_standby_replicas=1,
    probing_interval_ms=1_000,
    max_warmup_replicas=8,
)


@dataclass(frozen=True, slots=True)
class DemoRun:
    scenario: str  # built-in
    protocol: str
    options: ProtocolOptions = field(default_factory=ProtocolOptions)

    @property
    def label(self) -> str:
        """Its run directory's name."""
        return f"{self.scenario}-{self.protocol}"


# each protocol where its design says it helps, beside the ones it improves on
DEMO_RUNS = (
    DemoRun("rolling-bounce", "range"),
    DemoRun("rolling-bounce", "cooperative-sticky"),
    DemoRun("rolling-bounce", "cooperative-deferred", DEFERRED),
    DemoRun("static-bounce", "cooperative-sticky"),  # static membership, the same bounces
    DemoRun("scale-up", "cooperative-sticky"),
    DemoRun("scale-up", "high-availability", HIGH_AVAILABILITY),
    DemoRun("process-death", "cooperative-sticky"),
    DemoRun("process-death", "high-availability", HIGH_AVAILABILITY),
)
# the real-client segment: short, small, one kill -9 (Kafka's rule: the session times out)
KAFKA_PROTOCOL = "cooperative-sticky"
KAFKA_SCENARIO = "process-death"
KAFKA_DURATION_S = 12.0
KAFKA_MEMBERS = 3
KAFKA_PARTITIONS = 6
# the consumer protocol (KIP-848) beside the classic cooperative one, both confluent-kafka
CONSUMER_CLIENT = "confluent-kafka"
CONSUMER_PROTOCOLS = ("cooperative-sticky", "consumer")
CONSUMER_SCENARIO = "rolling-bounce"


def add_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--members", type=int, default=4)
    demo.add_argument("--partitions", type=int, default=24)
    demo.add_argument("--duration", type=float, default=15.0, help="seconds per run")
    demo.add_argument("--run-dir", type=Path, default=None, help="default: runs/demo-<time>")
    demo.add_argument(
        "--kafka-client",
        choices=[*KAFKA_CLIENTS, "none"],
        default="kafka-python",
        help="the real Kafka client of the last run (none: no such run)",
    )
    demo.add_argument(
        "--consumer-protocol",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="two rolling bounces of confluent-kafka consumers: cooperative-sticky and "
        "KIP-848's consumer protocol",
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
    print(
        f"huddle demo: {len(DEMO_RUNS)} runs of {args.members} stateful "
        f"{plural(args.members, 'member')} over {args.partitions} "
        f"{plural(args.partitions, 'partition')}, {args.duration:g} s each, runs in {root}"
    )
    runs = plan(args, root)
    kafka, notes = kafka_run(args.kafka_client, root)
    runs += kafka
    consumer, why = consumer_runs(bool(args.consumer_protocol), root)
    runs += consumer
    notes += why
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
    spark = build_session("local[*]", verbose=bool(args.verbose), small_data=True)
    try:
        summaries = []
        for d in run_dirs:

            def step(what: str, d: Path = d) -> None:
                print(f"report: {d.name}: {what}", flush=True)

            summaries.append(write_report(analyse(spark, d, 100.0, progress=step)))
            spark.catalog.clearCache()  # its tables are written: free them for the next run
        print(write_comparison(summaries, root / "comparison", run_dirs, notes, intro()))
    finally:
        spark.stop()
    print(f"\nreports: {', '.join(str(d / 'report' / 'report.html') for d in run_dirs)}")
    print(f"comparison: {root / 'comparison' / 'comparison.html'} (and comparison.md)")
    return 1 if any(s.violations_total for s in summaries) else 0


def plan(args: argparse.Namespace, root: Path) -> list[tuple[str, RunSettings, Scenario]]:
    """The demo's runs of huddle's members: a label, the settings and the scenario each."""
    shape = Shape(duration=args.duration, members=args.members)
    runs = []
    for r in DEMO_RUNS:
        settings = RunSettings(
            run_dir=root / r.label,
            protocol=r.protocol,
            options=r.options,
            members=args.members,
            partitions=args.partitions,
            duration=args.duration,
            rate=RATE,
            stateful=True,
            restore_rate=RESTORE_RATE,
            state_records=STATE_RECORDS,
        )
        runs.append((f"{r.scenario}: {r.protocol}", settings, BUILT_IN[r.scenario](shape)))
    return runs


def intro() -> list[str]:
    """What the page says first: what moving a partition costs here, and the settings that
    make each protocol what it is."""
    rebuild_s = STATE_RECORDS / RESTORE_RATE
    ha = HIGH_AVAILABILITY
    return [
        f"Each point is one run: real member processes with state. A partition's state is "
        f"its last {STATE_RECORDS} records ({STATE_RECORDS / RATE:g} s of input at "
        f"{RATE:g} records/s); a member that did not have it rebuilds it at "
        f"{RESTORE_RATE:g} records/s, so a partition's state takes {rebuild_s:g} s to "
        "rebuild on a member that did not have it, and only what it missed on one that had "
        "it. Processing of a partition stops while it is unowned (moving, or held for a "
        "member that is away) and while its state is restored. In the rolling bounce each "
        f"member is started again {BOUNCE_DOWN_S:g} s after it stopped (then rejoins after "
        f"its start-up), sooner than the {rebuild_s:g} s its partitions' state takes to "
        "rebuild on another member.",
        f"cooperative-deferred holds a departed member's partitions up to "
        f"{DELAY_MS / 1000:g} s; static members come back within their session timeout; "
        f"high-availability runs {ha.num_standby_replicas} standby per partition, counts a "
        f"member within {ha.acceptable_recovery_lag} records as caught up, and checks "
        f"warm-ups every {(ha.probing_interval_ms or 0) / 1000:g} s.",
    ]


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


def consumer_runs(
    enabled: bool, root: Path
) -> tuple[list[tuple[str, RunSettings, Scenario]], list[str]]:
    """The consumer protocol's rolling bounce and the classic cooperative one of the same
    client (its rival on the comparison page), or none and the line that says why."""
    if not enabled:
        return [], ["no run of the consumer protocol (--no-consumer-protocol)"]
    why = missing(CONSUMER_CLIENT)
    if why is not None:
        return [], [f"no run of the consumer protocol: {why}"]
    shape = Shape(duration=KAFKA_DURATION_S, members=KAFKA_MEMBERS)
    runs = []
    for protocol in CONSUMER_PROTOCOLS:
        settings = RunSettings(
            run_dir=root / f"{CONSUMER_CLIENT}-{protocol}",
            protocol=protocol,
            client=CONSUMER_CLIENT,
            members=KAFKA_MEMBERS,
            partitions=KAFKA_PARTITIONS,
            duration=KAFKA_DURATION_S,
        )
        label = f"{CONSUMER_CLIENT} ({protocol}, {CONSUMER_SCENARIO}: real Kafka consumers)"
        runs.append((label, settings, BUILT_IN[CONSUMER_SCENARIO](shape)))
    return runs, []
