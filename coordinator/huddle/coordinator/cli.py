"""The ``huddle`` command: ``serve`` the coordinator, ``ping`` it, manage topics, inspect groups.

Settings of ``huddle serve`` come from flags, else from ``HUDDLE_<FLAG>`` environment
variables (``--max-group-size`` <- ``HUDDLE_MAX_GROUP_SIZE``), else from the defaults in
``huddle.coordinator.config``. Building the configuration is pure (``parse_args`` and
``serve_settings`` take the argv and the environment) so it is tested without a process.

Exit codes: 0 success, 1 a failure at run time (unreachable coordinator, an error the
coordinator reported, an address already in use), 2 a usage or configuration mistake.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import anyio

from huddle.chaos.cli import add_chaos_parser, run_chaos
from huddle.chaos.demo import add_demo_parser, run_demo
from huddle.client.connection import ConnectionClosedError, connect, parse_bootstrap
from huddle.coordinator.admin_commands import run_admin_command
from huddle.coordinator.config import GroupConfig, ServerConfig
from huddle.coordinator.logging import LOG_FORMATS, LOG_LEVELS, LogFormat, configure_logging
from huddle.pipeline.cli import add_report_parser
from huddle.protocol.errors import HuddleError

DEFAULT_BOOTSTRAP = "127.0.0.1:9292"
ENV_PREFIX = "HUDDLE_"

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class UsageError(Exception):
    """A mistake in the command line or the environment: one line, exit code 2."""


@dataclass(frozen=True, slots=True)
class ServeFlag:
    """One ``huddle serve`` setting: its flag, its variable, where it lands in the config."""

    flag: str  # without the leading dashes
    kind: Literal["int", "str", "bool", "choice"]
    target: Literal["server", "group", "log"]
    field: str
    help: str
    choices: tuple[str, ...] = ()

    @property
    def dest(self) -> str:
        return self.flag.replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.flag.upper().replace("-", "_")


_S: Final = "server"
_G: Final = "group"
SERVE_FLAGS: tuple[ServeFlag, ...] = (
    ServeFlag("host", "str", _S, "host", "address to listen on (default 127.0.0.1)"),
    ServeFlag("port", "int", _S, "port", "port to listen on, 0 for any (default 9292)"),
    ServeFlag(
        "min-session-timeout-ms", "int", _G, "min_session_timeout_ms", "lowest session timeout"
    ),
    ServeFlag(
        "max-session-timeout-ms", "int", _G, "max_session_timeout_ms", "highest session timeout"
    ),
    ServeFlag(
        "initial-rebalance-delay-ms",
        "int",
        _G,
        "initial_rebalance_delay_ms",
        "wait this long for more members before the first rebalance of a group",
    ),
    ServeFlag("max-group-size", "int", _G, "max_group_size", "members per group, 0: no limit"),
    ServeFlag(
        "new-member-join-timeout-ms",
        "int",
        _G,
        "new_member_join_timeout_ms",
        "a new member that does not complete its join within this is removed",
    ),
    ServeFlag("max-partitions", "int", _G, "max_partitions", "partitions per topic at most"),
    ServeFlag(
        "offset-metadata-max-bytes",
        "int",
        _G,
        "offset_metadata_max_bytes",
        "largest metadata string of a committed offset",
    ),
    ServeFlag(
        "disconnect-grace-ms",
        "int",
        _G,
        "disconnect_grace_ms",
        "remove a dynamic member whose connection has been gone this long (<0: never)",
    ),
    ServeFlag(
        "notices",
        "bool",
        _G,
        "rebalance_notices",
        "push RebalanceStarted notices so members rejoin at once (default on)",
    ),
    ServeFlag("max-frame-bytes", "int", _S, "max_frame_bytes", "largest frame accepted"),
    ServeFlag("max-connections", "int", _S, "max_connections", "connections accepted at once"),
    ServeFlag(
        "handshake-timeout-ms",
        "int",
        _S,
        "handshake_timeout_ms",
        "close a connection that has not said hello within this",
    ),
    ServeFlag(
        "stalled-frame-timeout-ms",
        "int",
        _S,
        "stalled_frame_timeout_ms",
        "close a connection whose frame is not completed within this",
    ),
    ServeFlag(
        "max-write-buffer-bytes",
        "int",
        _S,
        "max_write_buffer_bytes",
        "close a connection that leaves this much unread",
    ),
    ServeFlag(
        "shutdown-timeout-ms",
        "int",
        _S,
        "shutdown_timeout_ms",
        "on SIGTERM, wait this long for write buffers to flush",
    ),
    ServeFlag(
        "data-dir",
        "str",
        _S,
        "data_dir",
        "keep topics and committed offsets in this directory across restarts "
        "(default: in memory only)",
    ),
    ServeFlag(
        "fsync",
        "bool",
        _S,
        "fsync",
        "force every kept change to disk before answering (default off)",
    ),
    ServeFlag(
        "log-format",
        "choice",
        "log",
        "format",
        "auto: console on a TTY, else JSON lines",
        choices=LOG_FORMATS,
    ),
    ServeFlag(
        "log-level",
        "choice",
        "log",
        "level",
        "lowest level logged (default info)",
        choices=tuple(LOG_LEVELS),
    ),
)


@dataclass(frozen=True, slots=True)
class ServeSettings:
    config: ServerConfig
    log_format: LogFormat = "auto"
    log_level: str = "info"


# --- parsing ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="huddle", description="A group coordinator for cooperative rebalancing."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = commands.add_parser(
        "serve",
        help="run the coordinator",
        description="Run the coordinator until SIGTERM or SIGINT. Every flag can also be set "
        "with a HUDDLE_<FLAG> environment variable, e.g. HUDDLE_PORT=9393; flags win.",
    )
    for spec in SERVE_FLAGS:
        help_text = f"{spec.help} [env {spec.env}]"
        if spec.kind == "bool":
            serve.add_argument(
                f"--{spec.flag}",
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        elif spec.kind == "choice":
            serve.add_argument(f"--{spec.flag}", choices=spec.choices, default=None, help=help_text)
        else:
            kind: Callable[[str], object] = int if spec.kind == "int" else str
            serve.add_argument(f"--{spec.flag}", type=kind, default=None, help=help_text)

    ping = commands.add_parser("ping", help="check that a coordinator answers a handshake")
    _add_client_flags(ping, json_flag=False)

    topics = commands.add_parser("topics", help="create, alter, delete and list topics")
    topic_commands = topics.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, help_text in (("create", "create a topic"), ("alter", "set a partition count")):
        sub = topic_commands.add_parser(action, help=help_text)
        sub.add_argument("name", help="topic name")
        sub.add_argument("--partitions", type=int, required=True, help="number of partitions")
        _add_client_flags(sub)
    delete = topic_commands.add_parser("delete", help="delete a topic")
    delete.add_argument("name", help="topic name")
    _add_client_flags(delete)
    _add_client_flags(topic_commands.add_parser("list", help="list topics"))

    groups = commands.add_parser("groups", help="list and describe groups")
    group_commands = groups.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add_client_flags(group_commands.add_parser("list", help="list groups"))
    describe = group_commands.add_parser("describe", help="describe a group and its members")
    describe.add_argument("group", help="group id")
    _add_client_flags(describe)

    add_chaos_parser(commands)
    add_report_parser(commands)
    add_demo_parser(commands)
    return parser


def _add_client_flags(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    parser.add_argument(
        "--bootstrap",
        default=None,
        help=f"coordinator HOST:PORT (default {DEFAULT_BOOTSTRAP}) [env HUDDLE_BOOTSTRAP]",
    )
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the coordinator"
    )
    if json_flag:
        parser.add_argument("--json", action="store_true", help="machine-readable output")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse a command line; argparse itself reports usage errors (exit 2)."""
    return build_parser().parse_args(argv)


def _from_env(spec: ServeFlag, raw: str) -> object:
    value = raw.strip()
    if spec.kind == "int":
        try:
            return int(value)
        except ValueError:
            raise UsageError(f"{spec.env}={raw!r} is not an integer") from None
    if spec.kind == "bool":
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise UsageError(f"{spec.env}={raw!r} is not a boolean (use true or false)")
    if spec.kind == "choice" and value not in spec.choices:
        raise UsageError(f"{spec.env}={raw!r} is not one of {', '.join(spec.choices)}")
    return value


def serve_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> ServeSettings:
    """The configuration of ``huddle serve``: flags, else environment, else defaults.

    Raises UsageError for an unreadable environment value or an invalid configuration.
    """
    values: dict[str, dict[str, Any]] = {"server": {}, "group": {}, "log": {}}
    for spec in SERVE_FLAGS:
        value = getattr(args, spec.dest, None)
        if value is None and spec.env in environ:
            value = _from_env(spec, environ[spec.env])
        if value is not None:
            values[spec.target][spec.field] = value
    try:
        group = GroupConfig(**values["group"])
        config = ServerConfig(group=group, **values["server"])
    except ValueError as exc:
        raise UsageError(f"invalid configuration: {exc}") from None
    log = values["log"]
    return ServeSettings(config, log.get("format", "auto"), log.get("level", "info"))


def bootstrap_of(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    """``--bootstrap``, else ``HUDDLE_BOOTSTRAP``, else 127.0.0.1:9292; UsageError if bad."""
    bootstrap = args.bootstrap or environ.get("HUDDLE_BOOTSTRAP") or DEFAULT_BOOTSTRAP
    try:
        parse_bootstrap(bootstrap)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return str(bootstrap)


# --- running ----------------------------------------------------------------------------


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_serve(settings: ServeSettings) -> int:
    from huddle.coordinator.journal import DataDirError
    from huddle.coordinator.server import ListenError, StorageFailedError, serve

    configure_logging(settings.log_format, settings.log_level)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(serve(settings.config))
    except (ListenError, DataDirError, StorageFailedError) as exc:
        print(f"huddle: {exc}", file=sys.stderr)
        return 1
    return 0


def _os_reason(exc: OSError) -> str:
    """'connection refused' rather than 'All connection attempts failed'."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, socket.gaierror):
            return str(current.strerror or current).lower()
        if isinstance(current, OSError) and current.errno:
            return os.strerror(current.errno).lower()
        current = current.__cause__
    return str(exc).lower()


async def _ping(bootstrap: str, wait_s: float) -> str:
    async with connect(bootstrap, client_id="huddle-cli", timeout=wait_s, notices=False) as conn:
        return f"ok huddle protocol v{conn.server_version} at {bootstrap}"


def run_client_command(args: argparse.Namespace, bootstrap: str) -> int:
    """Run ping / topics / groups; print the result; one error line and exit 1 on failure."""
    timeout = float(args.timeout)
    try:
        if args.command == "ping":
            output = anyio.run(_ping, bootstrap, timeout)
        else:
            output = anyio.run(run_admin_command, args, bootstrap, timeout)
    except HuddleError as exc:
        print(f"huddle: {exc.message} ({exc.code.name})", file=sys.stderr)
        return 1
    except ConnectionClosedError as exc:
        print(f"huddle: connection to {bootstrap} closed: {exc.message}", file=sys.stderr)
        return 1
    except TimeoutError:
        print(f"huddle: no answer from {bootstrap} within {timeout:g} s", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"huddle: cannot connect to {bootstrap}: {_os_reason(exc)}", file=sys.stderr)
        return 1
    if output:
        print(output)
    return 0


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = parse_args(argv)
    env = os.environ if environ is None else environ
    if args.command == "chaos":
        return run_chaos(args)
    if args.command == "demo":
        return run_demo(args)
    if args.command == "report":
        from huddle.pipeline.cli import run_report  # PySpark loads only for this command

        return run_report(args)
    try:
        if args.command == "serve":
            settings = serve_settings(args, env)
        else:
            bootstrap = bootstrap_of(args, env)
    except UsageError as exc:
        print(f"huddle: {exc}", file=sys.stderr)
        return 2
    try:
        if args.command == "serve":
            return run_serve(settings)
        return run_client_command(args, bootstrap)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
