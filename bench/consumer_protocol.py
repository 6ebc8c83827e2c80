"""KIP-848's consumer protocol against the classic protocols, through chaos runs on ONE server.

``python -m bench.consumer_protocol`` starts one ``huddle serve`` with its Kafka listener
(the consumer protocol's session timeout and heartbeat interval set to the classic members'
own: 3 s and 0.5 s) and runs the chaos harness against it (a fresh group and topic per
run), with these members:

- ``consumer``: confluent-kafka consumers, ``group.protocol=consumer`` (the coordinator's
  ``uniform`` assignor), on the Kafka listener;
- ``cooperative-sticky (confluent-kafka)``: the same client, classic protocol (KIP-429);
- ``cooperative-sticky (huddle)`` and ``cooperative-deferred (huddle)``: huddle's own
  members on huddle's listener, the classic protocol with Design II's hold (``--delay-ms``)
  and without it (its baseline: huddle's members are not confluent-kafka's).

First ``rolling-bounce`` (each member SIGTERMed and started again in turn), ``--repeats``
rounds, the protocols in a rotated order each round; then one ``join-and-kill`` run per
protocol: a member joins at 20 % of the run, ``member-1`` is SIGKILLed at 45 %. Measured
from the members' events (``bench.handovers``): the partition-seconds no member owned in the
rolling bounce (the report's *unowned* figure; median over the rounds) and the partitions
moved to another member (median), the partition-seconds
two members owned at once (a safety figure), the seconds a joining member took to own its
share, the partitions other members stopped in that join that did not go to it, and the
seconds until each partition of the killed member was owned again (its session must end
first). Targets: the consumer protocol's bounce figure at most cooperative-sticky's (the same
client), and a join that stops no one else's partitions. Prints the CPU model; every run is
bounded by the harness (its duration plus a fixed allowance).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from bench import handovers
from bench.common import cpu_model, quiet_logs
from huddle.chaos.harness import RunSettings, run
from huddle.chaos.kafka_workers import brokers
from huddle.chaos.protocols import ProtocolOptions
from huddle.chaos.scenarios import Scenario, Shape, Step, built_in

SESSION_MS: Final = 3_000
HEARTBEAT_MS: Final = 500
SERVE_FLAGS: Final = (
    "--initial-rebalance-delay-ms", "0", "--min-session-timeout-ms", "500",
    "--disconnect-grace-ms", "1000",
    "--consumer-session-timeout-ms", str(SESSION_MS),
    "--consumer-heartbeat-interval-ms", str(HEARTBEAT_MS),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Case:
    label: str
    protocol: str
    client: str
    options: ProtocolOptions = field(default_factory=ProtocolOptions)


def cases(delay_ms: int) -> list[Case]:
    return [
        Case("consumer", "consumer", "confluent-kafka"),
        Case("cooperative-sticky (confluent-kafka)", "cooperative-sticky", "confluent-kafka"),
        Case("cooperative-sticky (huddle)", "cooperative-sticky", "huddle"),
        Case(
            f"cooperative-deferred {delay_ms / 1000:g}s (huddle)",
            "cooperative-deferred",
            "huddle",
            ProtocolOptions(delay_ms=delay_ms),
        ),
    ]


def join_and_kill(shape: Shape) -> Scenario:
    d = shape.duration
    return Scenario(
        "join-and-kill",
        "one member joins at 20% of the run; member-1 is SIGKILLed at 45%",
        (Step(0.2 * d, "scale_up", value=1), Step(0.45 * d, "kill", "member-1")),
    )


@dataclass(slots=True)
class Figures:
    bounce: list[float] = field(default_factory=list)  # unowned partition-seconds per round
    moved: list[int] = field(default_factory=list)  # partitions moved per round
    twice: float = 0.0  # partition-seconds owned twice, over every run
    failed: list[str] = field(default_factory=list)  # runs that did not complete or settle
    join: handovers.Join | None = None
    kill: handovers.Kill | None = None


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _settled(records: list[handovers.Record]) -> bool:
    return any(r["event"] == "steady" and r.get("settled") for r in records)


def measure(
    case: Case, scenario: Scenario, base: RunSettings, run_dir: Path, figures: Figures
) -> handovers.Timeline | None:
    """One chaos run of ``case``; its figures added to ``figures``."""
    name = run_dir.name
    settings = replace(
        base,
        run_dir=run_dir,
        protocol=case.protocol,
        client=case.client,
        options=case.options,
        group=name,
        topic=name,
        kafka_bootstrap=base.kafka_bootstrap if case.client != "huddle" else None,
    )
    began = time.monotonic()
    result = run(settings, scenario, _progress)
    _progress(f"{name}: {result.outcome} in {time.monotonic() - began:.1f} s")
    records = handovers.run_events(run_dir)
    if result.outcome != "completed" or not _settled(records):
        figures.failed.append(f"{name} ({result.outcome}, settled {_settled(records)})")
        return None
    t = handovers.timeline(records)
    figures.twice += handovers.twice_seconds(t)
    if scenario.name == "rolling-bounce":
        figures.bounce.append(handovers.unowned_seconds(t))
        figures.moved.append(handovers.moves(t))
    else:
        figures.join = handovers.join(t, records)
        figures.kill = handovers.kill(t)
    return t


def _fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def report(all_cases: list[Case], figures: dict[str, Figures], args: argparse.Namespace) -> bool:
    print(
        f"rolling bounce: {args.members} members, {args.partitions} partitions, "
        f"{args.duration:g} s runs, {args.repeats} round(s); join-and-kill: "
        f"{args.join_duration:g} s; session {SESSION_MS} ms, heartbeat {HEARTBEAT_MS} ms"
    )
    print(
        f"{'protocol':38} {'bounce unowned p-s (median; each)':34} {'moved':>5} "
        f"{'join share s':>12} {'join: others stopped':>20} "
        f"{'kill re-owned s (median/max)':>28} {'owned twice p-s':>15}"
    )
    for case in all_cases:
        f = figures[case.label]
        median = statistics.median(f.bounce) if f.bounce else None
        each = ", ".join(f"{v:.2f}" for v in f.bounce)
        bounce = f"{_fmt(median)} ({each})" if f.bounce else "-"
        join = f.join
        share = "-" if join is None else _fmt(join.share_s)
        others = "-" if join is None else f"{join.disturbed} (gave it {join.given})"
        k = f.kill
        if k is None or not k.seconds:
            kill = "-" if k is None else f"never ({k.never} of {k.owned})"
        else:
            kill = f"{statistics.median(k.seconds):.2f}/{max(k.seconds):.2f}"
            kill += f" never {k.never}" if k.never else ""
        moved = f"{statistics.median(f.moved):g}" if f.moved else "-"
        print(
            f"{case.label:38} {bounce:34} {moved:>5} {share:>12} {others:>20} {kill:>28} "
            f"{f.twice:15.2f}"
        )
    met = True
    consumer, cooperative = (figures[c.label] for c in all_cases[:2])
    if consumer.bounce and cooperative.bounce:
        mine, theirs = statistics.median(consumer.bounce), statistics.median(cooperative.bounce)
        ok = mine <= theirs
        print(
            f"target: consumer rolling-bounce unowned <= cooperative-sticky (confluent-kafka): "
            f"{mine:.2f} vs {theirs:.2f} partition-seconds ({mine / theirs if theirs else 0:.2f}x):"
            f" {'met' if ok else 'NOT met'}"
        )
        met &= ok
    join = consumer.join
    ok = join is not None and join.share_s is not None and join.disturbed == 0
    print(
        f"target: a consumer-protocol join stops no one else's partitions: "
        f"{'-' if join is None else join.disturbed} stopped: {'met' if ok else 'NOT met'}"
    )
    met &= ok
    twice = sum(f.twice for f in figures.values())
    failed = [name for f in figures.values() for name in f.failed]
    print(f"owned twice over every run: {twice:.2f} partition-seconds")
    if failed:
        print(f"runs left out: {', '.join(failed)}")
    return met and twice == 0 and not failed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.consumer_protocol", description=__doc__)
    p.add_argument("--repeats", type=int, default=2, help="rolling-bounce rounds")
    p.add_argument("--duration", type=float, default=12.0, help="seconds per bounce run")
    p.add_argument("--join-duration", type=float, default=16.0, help="the join-and-kill run")
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--partitions", type=int, default=12)
    p.add_argument("--delay-ms", type=int, default=3_000, help="cooperative-deferred's hold")
    p.add_argument("--keep", type=Path, help="keep the run directories here (default: removed)")
    args = p.parse_args(argv)
    quiet_logs()
    print(f"CPU: {cpu_model()}")
    root = args.keep or Path(tempfile.mkdtemp(prefix="huddle-bench-consumer-"))
    root.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    try:
        with brokers.huddle(root, *SERVE_FLAGS) as server:
            met = _bench(args, root, server)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
        print(f"total wall time {time.monotonic() - began:.0f} s")
    print(f"all targets {'met' if met else 'NOT met'}")
    return 0 if met else 1


def _bench(args: argparse.Namespace, root: Path, server: brokers.Broker) -> bool:
    all_cases = cases(args.delay_ms)
    base = RunSettings(
        run_dir=root,
        members=args.members,
        partitions=args.partitions,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        bootstrap=f"{server.host}:{server.huddle_port}",
        kafka_bootstrap=server.bootstrap,
    )
    figures = {c.label: Figures() for c in all_cases}
    bounce = built_in("rolling-bounce", Shape(args.duration, args.members, 0, SESSION_MS / 1000))
    serial = 0
    for r in range(args.repeats):
        turn = r % len(all_cases)
        for case in all_cases[turn:] + all_cases[:turn]:  # each round in another order
            serial += 1
            base = replace(base, duration=args.duration)
            run_dir = root / f"r{serial}-bounce-{case.protocol}-{case.client}"
            measure(case, bounce, base, run_dir, figures[case.label])
    joining = join_and_kill(Shape(args.join_duration, args.members))
    for case in all_cases:
        serial += 1
        base = replace(base, duration=args.join_duration)
        run_dir = root / f"r{serial}-join-{case.protocol}-{case.client}"
        measure(case, joining, base, run_dir, figures[case.label])
    return report(all_cases, figures, args)


if __name__ == "__main__":
    sys.exit(main())
