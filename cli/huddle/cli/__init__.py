"""The ``huddle`` command: parse the command line and dispatch to one subcommand.

This is the top layer of huddle. It imports a subcommand's module only when that subcommand
runs, so ``huddle serve`` loads the coordinator and nothing of the member library, the chaos
harness or the pipeline (and the container image, which has no PySpark, never needs it).

Each subcommand's module offers ``add_arguments(parser)`` and ``run(args, environ) -> int``.
Exit codes: 0 success, 1 a failure at run time (unreachable coordinator, an error the
coordinator reported, an address already in use), 2 a usage or configuration mistake.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from huddle.cli.parsing import HuddleParser
from huddle.logs import command_logging

__all__ = ["COMMANDS", "build_parser", "main", "parse_args"]


AddArguments = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace, Mapping[str, str]], int]


@dataclass(frozen=True, slots=True)
class Command:
    help: str
    module: str  # imported only when this subcommand runs
    description: str | None = None
    add: str = "add_arguments"  # the module's function that adds the arguments
    run: str = "run"  # the module's function that runs the command
    own_logs: bool = False  # sets up its own logging (else: warnings and up on stderr)

    def arguments(self) -> AddArguments:
        return cast(AddArguments, getattr(importlib.import_module(self.module), self.add))

    def runner(self) -> Run:
        return cast(Run, getattr(importlib.import_module(self.module), self.run))


COMMANDS: dict[str, Command] = {
    "serve": Command(
        "run the coordinator",
        "huddle.cli.serve",
        "Run the coordinator until SIGTERM or SIGINT. Every flag can also be set with a "
        "HUDDLE_<FLAG> environment variable, e.g. HUDDLE_PORT=9393; flags win.",
        own_logs=True,
    ),
    "ping": Command(
        "check that a coordinator answers a handshake", "huddle.cli.admin", add="add_ping"
    ),
    "topics": Command(
        "create, alter, delete and list topics", "huddle.cli.admin", add="add_topics"
    ),
    "groups": Command("list and describe groups", "huddle.cli.admin", add="add_groups"),
    "cluster": Command(
        "show a coordinator cluster: nodes, shard owners and epochs, groups per node",
        "huddle.cli.admin",
        add="add_cluster",
    ),
    "users": Command(
        "add, remove and list the users SASL authenticates",
        "huddle.cli.security",
        "Users are kept with the coordinator's state: --data-dir DIR or a cluster's etcd "
        "(HUDDLE_DATA_DIR, HUDDLE_CLUSTER). A running coordinator takes a change within a "
        "second. Only salted SCRAM keys are kept, never a password.",
        add="add_users",
    ),
    "acls": Command(
        "add, remove and list ACLs (with huddle serve --authorizer)",
        "huddle.cli.security",
        "Kafka's ACL model: a principal, a host, an operation and a GROUP, TOPIC or CLUSTER "
        "resource (LITERAL or PREFIXED), ALLOW or DENY; a DENY wins.",
        add="add_acls",
    ),
    "data": Command(
        "check or repair a coordinator's data dir",
        "huddle.cli.data",
        "check: what is wrong with DIR's journal (exit 1 if damaged). repair: keep every "
        "intact record in a new journal; the damaged one stays beside it as a backup.",
    ),
    "chaos": Command(
        "run fault-injection scenarios against real member processes",
        "huddle.chaos.cli",
        own_logs=True,
    ),
    "sim": Command(
        "deterministic simulation: seeds of faults, every invariant checked",
        "huddle.sim.cli",
        "The real coordinator core and member flows under one seeded clock and network. "
        "run: many seeds per protocol with a summary; replay SEED: one seed's step log.",
    ),
    "report": Command(
        "analyse chaos runs' event logs with PySpark",
        "huddle.cli.report",
        "Ownership, unavailability, rebalances and safety checks of chaos runs; writes "
        "RUN_DIR/report/ (Parquet tables, summary.json, report.md, PNGs).",
    ),
    "demo": Command(
        "each protocol through a stateful rolling bounce, scale-up and process death; the report",
        "huddle.cli.demo",
        own_logs=True,
    ),
}


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(argv: Sequence[str] = ()) -> HuddleParser:
    """The parser; only the subcommand named in ``argv`` gets (and imports) its arguments."""
    parser = HuddleParser(
        prog="huddle", description="A group coordinator for cooperative rebalancing."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = _chosen(argv)
    for name, command in COMMANDS.items():
        sub = commands.add_parser(name, help=command.help, description=command.description)
        if name == chosen:
            command.arguments()(sub)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse a command line; a usage error is one line and a hint on stderr (exit 2)."""
    words = list(sys.argv[1:] if argv is None else argv)
    return build_parser(words).parse_args(words)


def _open_standard_streams() -> None:
    """Open /dev/null where file descriptor 0, 1 or 2 is closed (``huddle serve 2>&-``).

    Else the next file or socket opened takes that number, and what writes to "stderr"
    writes into it (uvloop aborted when its epoll descriptor was fd 2); and Python's
    ``sys.stderr`` is None then, which a log set-up cannot write to."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
            if opened != fd:  # pragma: no cover - only if a lower one closed meanwhile
                os.dup2(opened, fd)
                os.close(opened)
        if getattr(sys, name) is None:
            mode = "r" if fd == 0 else "w"
            setattr(sys, name, open(fd, mode, encoding="utf-8", closefd=False))  # noqa: SIM115


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run one command line. Without ``argv`` (the ``huddle`` script, ``python -m huddle``)
    this is the whole process, set up first: a closed standard stream reopened on
    /dev/null, and a one-shot command's log events on stderr (warnings and up; stdout is
    for its output). With ``argv`` (a test, a program of yours), the caller's streams and
    logging stay as they are."""
    process = argv is None
    if process:
        _open_standard_streams()
    args = parse_args(argv)
    env = os.environ if environ is None else environ
    command = COMMANDS[args.command]
    own_logs = command.own_logs or not process
    try:
        with contextlib.nullcontext() if own_logs else command_logging("warning"):
            return command.runner()(args, env)
    except KeyboardInterrupt:
        return 130
