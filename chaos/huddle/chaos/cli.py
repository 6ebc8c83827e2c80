"""``huddle chaos``: run a chaos scenario (``run``) or list the built-in ones (``list``).

``add_arguments`` and ``run`` are what the ``huddle`` command (``huddle.cli``) dispatches to.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from huddle.chaos.clients import CLIENT_NAMES
from huddle.chaos.harness import RunSettings
from huddle.chaos.harness import run as run_scenario
from huddle.chaos.protocols import ProtocolOptions, protocol_names
from huddle.chaos.scenarios import BUILT_IN, Scenario, ScenarioError, Shape, built_in, load
from huddle.logs import configure_logging


def add_arguments(chaos: argparse.ArgumentParser) -> None:
    """``chaos run`` and ``chaos list``."""
    actions = chaos.add_subparsers(dest="chaos_action", metavar="ACTION", required=True)
    actions.add_parser("list", help="list the built-in scenarios")
    r = actions.add_parser(
        "run",
        help="run a scenario",
        description="Start a coordinator (or use --bootstrap) and member processes (through "
        "a fault proxy when the scenario injects network faults), wait for the group to "
        "settle, apply the scenario's faults, write JSON-lines events to the run dir.",
    )
    r.add_argument("scenario", nargs="?", help=f"built-in: {', '.join(BUILT_IN)}")
    r.add_argument("--file", type=Path, help="a JSON scenario file instead")
    r.add_argument(
        "--client",
        default="huddle",
        choices=CLIENT_NAMES,
        help="the members: huddle's Member, or a real Kafka consumer on the Kafka listener",
    )
    r.add_argument(
        "--protocol",
        default="cooperative-sticky",
        choices=protocol_names(),
        help="huddle's assignors; a Kafka client: range, roundrobin or cooperative-sticky; "
        "consumer: KIP-848, the coordinator assigns (--client confluent-kafka)",
    )
    r.add_argument("--delay-ms", type=int, help="cooperative-deferred: max scheduled delay")
    r.add_argument("--acceptable-recovery-lag", type=int, help="high-availability")
    r.add_argument("--num-standby-replicas", type=int, help="high-availability")
    r.add_argument("--probing-interval-ms", type=int, help="high-availability")
    r.add_argument("--max-warmup-replicas", type=int, help="high-availability")
    r.add_argument("--members", type=int, default=3)
    r.add_argument("--partitions", type=int, default=6)
    r.add_argument("--duration", type=float, default=30.0, help="seconds of scenario")
    r.add_argument("--rate", type=float, default=50.0, help="records/s per partition")
    r.add_argument("--run-dir", type=Path, help="default runs/<time>-<scenario>-<protocol>")
    r.add_argument("--bootstrap", help="use a running coordinator at HOST:PORT")
    r.add_argument(
        "--kafka-bootstrap", help="with --bootstrap and a Kafka client: its Kafka listener"
    )
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--stateful", action="store_true", help="tasks restore state (KIP-441)")
    r.add_argument("--restore-rate", type=float, default=1_000.0, help="records/s restored")
    r.add_argument(
        "--state-records",
        type=int,
        help="stateful: a partition's state is its last N records (default: all of them)",
    )
    r.add_argument("--session-timeout-ms", type=int, default=3_000)
    r.add_argument("--heartbeat-interval-ms", type=int, default=500)
    r.add_argument("--commit-interval-ms", type=int, default=1_000)
    r.add_argument(
        "--proxy",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="members connect through the fault proxy (default: only for network faults)",
    )


def _scenario(args: argparse.Namespace) -> Scenario:
    if args.file is not None:
        return load(args.file)
    if not args.scenario:
        raise ScenarioError("name a scenario or give --file")
    shape = Shape(args.duration, args.members, args.seed, args.session_timeout_ms / 1000)
    return built_in(args.scenario, shape)


def _print(line: str) -> None:
    print(line, flush=True)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    if args.chaos_action == "list":
        shape = Shape(duration=30.0, members=3)
        for name, build in BUILT_IN.items():
            print(f"{name:20} {build(shape).description}")
        return 0
    try:
        scenario = _scenario(args)
    except ScenarioError as exc:
        print(f"huddle: {exc}", file=sys.stderr)
        return 2
    if args.members < 1 or args.partitions < 1 or args.duration <= 0:
        print("huddle: --members, --partitions and --duration must be positive", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"{stamp}-{scenario.name}-{args.protocol}"
    if args.client != "huddle":
        name += f"-{args.client}"
    run_dir = args.run_dir or Path("runs") / name
    run_dir.mkdir(parents=True, exist_ok=True)
    log_file = open(run_dir / "harness.log", "a", encoding="utf-8")  # noqa: SIM115
    configure_logging("json", "info", stream=log_file)
    settings = RunSettings(
        run_dir=run_dir,
        protocol=args.protocol,
        options=ProtocolOptions(
            delay_ms=args.delay_ms,
            acceptable_recovery_lag=args.acceptable_recovery_lag,
            num_standby_replicas=args.num_standby_replicas,
            probing_interval_ms=args.probing_interval_ms,
            max_warmup_replicas=args.max_warmup_replicas,
        ),
        members=args.members,
        partitions=args.partitions,
        duration=args.duration,
        rate=args.rate,
        seed=args.seed,
        stateful=args.stateful,
        restore_rate=args.restore_rate,
        state_records=args.state_records,
        bootstrap=args.bootstrap,
        kafka_bootstrap=args.kafka_bootstrap,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        commit_interval_ms=args.commit_interval_ms,
        proxy=args.proxy,
        client=args.client,
    )
    try:
        result = run_scenario(settings, scenario, _print)
    except ScenarioError as exc:
        print(f"huddle: {exc}", file=sys.stderr)
        return 2
    finally:
        log_file.close()
    _print(f"{result.outcome}: {result.faults} faults, events in {run_dir / 'events'}")
    return result.exit_code
