"""``huddle serve``: run the coordinator with settings from flags, environment and defaults.

Settings come from flags, else from ``HUDDLE_<FLAG>`` environment variables
(``--max-group-size`` <- ``HUDDLE_MAX_GROUP_SIZE``), else from the defaults in
``huddle.coordinator.config``. Building the configuration is pure (``serve_settings`` takes
the parsed arguments and the environment) so it is tested without a process. This module
imports the coordinator only; the server itself loads when the command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from huddle.cli.usage import ENV_PREFIX, UsageError
from huddle.coordinator.config import GroupConfig, ServerConfig
from huddle.coordinator.consumer.messages import MIGRATION_POLICIES
from huddle.logs import LOG_FORMATS, LOG_LEVELS, LogFormat, configure_logging, flush_logs

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


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
        "advertise",
        "str",
        _S,
        "advertise",
        "HOST:PORT clients are told to use (FindCoordinator; default: the address listened on)",
    ),
    ServeFlag(
        "node-id", "str", _S, "node_id", "this node's name (default: its advertised address)"
    ),
    ServeFlag(
        "cluster",
        "str",
        _S,
        "cluster",
        "run as a node of a cluster on etcd: etcd://HOST:PORT[,HOST:PORT...] (default: one "
        "coordinator on its own)",
    ),
    ServeFlag(
        "cluster-prefix",
        "str",
        _S,
        "cluster_prefix",
        "the cluster's keys in etcd (default /huddle)",
    ),
    ServeFlag(
        "shards",
        "int",
        _S,
        "shards",
        "shards groups are spread over, fixed for a cluster (default 50, as Kafka's "
        "__consumer_offsets partitions)",
    ),
    ServeFlag(
        "lease-ttl-s",
        "int",
        _S,
        "lease_ttl_s",
        "a node's etcd lease; one that cannot renew it stops serving before it ends (default 3)",
    ),
    ServeFlag(
        "metrics-port",
        "int",
        _S,
        "metrics_port",
        "serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port; default off)",
    ),
    ServeFlag(
        "kafka-port",
        "int",
        _S,
        "kafka_port",
        "also listen for Kafka clients on this port (0: any free port; default: no Kafka listener)",
    ),
    ServeFlag(
        "kafka-host", "str", _S, "kafka_host", "address of the Kafka listener (default: --host)"
    ),
    ServeFlag(
        "kafka-advertise",
        "str",
        _S,
        "kafka_advertise",
        "HOST:PORT Kafka clients are told to use (Metadata, FindCoordinator; default: the "
        "address the Kafka listener listens on)",
    ),
    ServeFlag(
        "kafka-evict-on-close-ms",
        "int",
        _S,
        "kafka_evict_on_close_ms",
        "remove a dynamic Kafka member whose group connection closed and did not come back "
        "within this grace (default -1: off, it stays until its session timeout, as Kafka's; "
        "static members always stay)",
    ),
    ServeFlag(
        "consumer-session-timeout-ms",
        "int",
        _S,
        "consumer_session_timeout_ms",
        "a consumer-protocol (KIP-848) member not heard from this long is fenced (default "
        "45000, Kafka's group.consumer.session.timeout.ms)",
    ),
    ServeFlag(
        "consumer-heartbeat-interval-ms",
        "int",
        _S,
        "consumer_heartbeat_interval_ms",
        "how often consumer-protocol members are told to heartbeat (default 5000, Kafka's "
        "group.consumer.heartbeat.interval.ms)",
    ),
    ServeFlag(
        "consumer-migration-policy",
        "choice",
        _S,
        "consumer_migration_policy",
        "Kafka's group.consumer.migration.policy, on the Kafka listener: upgrade (a "
        "consumer-protocol member joining a classic group makes it a consumer group whose "
        "classic members go on through JoinGroup), downgrade (a consumer group whose last "
        "consumer-protocol member leaves or is fenced, its other members all classic, "
        "becomes a classic group again and rebalances), bidirectional (both; the default, "
        "as Kafka 4.0's) or disabled (neither: the consumer member is refused "
        "GROUP_ID_NOT_FOUND)",
        choices=MIGRATION_POLICIES,
    ),
    ServeFlag(
        "consumer-assignors",
        "str",
        _S,
        "consumer_assignors",
        "the server assignors consumer-protocol groups may ask for, comma-separated, the "
        "first the default (default uniform,range; also deferred, paced: Kafka's "
        "group.consumer.assignors)",
    ),
    ServeFlag(
        "consumer-deferred-hold-ms",
        "int",
        _S,
        "consumer_deferred_hold_ms",
        "how long the deferred server assignor holds a departed member's partitions for its "
        "return (default 300000, as Kafka Connect's scheduled.rebalance.max.delay.ms)",
    ),
    ServeFlag(
        "kafka-log-partition-bytes",
        "int",
        _S,
        "kafka_log_partition_bytes",
        "the Kafka log keeps at most this many bytes per partition, dropping the oldest "
        "(default 8388608: 8 MiB)",
    ),
    ServeFlag(
        "kafka-log-total-bytes",
        "int",
        _S,
        "kafka_log_total_bytes",
        "the Kafka log keeps at most this many bytes over all partitions, dropping the "
        "oldest (default 134217728: 128 MiB)",
    ),
    ServeFlag("tls-cert", "str", _S, "tls_cert", "TLS on the listener: its certificate (PEM)"),
    ServeFlag("tls-key", "str", _S, "tls_key", "the TLS certificate's private key (PEM)"),
    ServeFlag(
        "tls-client-ca",
        "str",
        _S,
        "tls_client_ca",
        "require client certificates signed by this CA (mTLS); a certificate's subject is "
        "its principal",
    ),
    ServeFlag(
        "tls-allow-name-changes",
        "bool",
        _S,
        "tls_allow_name_changes",
        "let a certificate reload (SIGHUP) change the certificate's subject, its SANs or the "
        "CA its chain ends at (default off: such a reload is refused, as Kafka's)",
    ),
    ServeFlag(
        "sasl",
        "str",
        _S,
        "sasl",
        "require SASL authentication: SCRAM-SHA-512,SCRAM-SHA-256,PLAIN (PLAIN only with "
        "TLS); users from `huddle users`",
    ),
    ServeFlag(
        "authorizer",
        "bool",
        _S,
        "authorizer",
        "decide every request by ACLs (`huddle acls`): what is not allowed is denied",
    ),
    ServeFlag(
        "super-users",
        "str",
        _S,
        "super_users",
        "principals allowed everything, ;-separated (User:admin;User:ops)",
    ),
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
        "offsets-retention-ms",
        "int",
        _G,
        "offsets_retention_ms",
        "committed offsets expire this long after their group emptied, or after their own "
        "commit for a group that never had members and for topics a Stable group no longer "
        "subscribes to (default 7 days, as Kafka)",
    ),
    ServeFlag(
        "offsets-retention-check-interval-ms",
        "int",
        _G,
        "offsets_retention_check_interval_ms",
        "how often offsets are checked for expiry (default 600000)",
    ),
    ServeFlag(
        "max-rebalance-timeout-ms",
        "int",
        _G,
        "max_rebalance_timeout_ms",
        "a JoinGroup with a longer rebalance timeout gets INVALID_SESSION_TIMEOUT",
    ),
    ServeFlag(
        "max-members-per-connection",
        "int",
        _G,
        "max_members_per_connection",
        "members and member ids one connection may hold",
    ),
    ServeFlag(
        "new-member-join-timeout-ms",
        "int",
        _G,
        "new_member_join_timeout_ms",
        "a new member that does not complete its join within this is removed",
    ),
    ServeFlag("max-partitions", "int", _G, "max_partitions", "partitions per topic at most"),
    ServeFlag(
        "max-request-partitions",
        "int",
        _G,
        "max_request_partitions",
        "partitions one offset commit or fetch may name",
    ),
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
    ServeFlag(
        "max-response-bytes",
        "int",
        _S,
        "max_response_bytes",
        "largest answer sent; a request whose answer is larger gets MESSAGE_TOO_LARGE",
    ),
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
        "input-slice-ms",
        "int",
        _S,
        "input_slice_ms",
        "handle one connection's requests this long, then let the others have their turn",
    ),
    ServeFlag(
        "idle-timeout-ms",
        "int",
        _S,
        "idle_timeout_ms",
        "close a connection that holds no member and has sent and been sent nothing for this long",
    ),
    ServeFlag(
        "max-partial-frame-bytes",
        "int",
        _S,
        "max_partial_frame_bytes",
        "bytes of unfinished frames held over all connections; past it a connection is refused",
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
        "keep topics, committed offsets and groups in this directory across restarts "
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


def shown_default(spec: ServeFlag) -> str:
    """A flag's default as ``--help`` shows it, from the configuration's own defaults."""
    if spec.target == "log":
        return {"format": "auto", "level": "info"}[spec.field]
    defaults = GroupConfig() if spec.target == _G else ServerConfig()
    value = getattr(defaults, spec.field)
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value) if value != "" else "none"


def add_arguments(serve: argparse.ArgumentParser) -> None:
    for spec in SERVE_FLAGS:
        text = (
            spec.help if "default" in spec.help else f"{spec.help} (default {shown_default(spec)})"
        )
        help_text = f"{text} [env {spec.env}]"
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


# --- running ----------------------------------------------------------------------------


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_serve(settings: ServeSettings) -> int:
    from huddle.coordinator.security.listener import SecurityStartError
    from huddle.coordinator.server import (
        ClusterStartError,
        ListenError,
        StorageFailedError,
        serve,
    )
    from huddle.coordinator.storage.journal import DataDirError

    configure_logging(settings.log_format, settings.log_level)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(serve(settings.config))
    except (
        ListenError,
        DataDirError,
        StorageFailedError,
        ClusterStartError,
        SecurityStartError,
    ) as exc:
        flush_logs()  # the log's last lines first, then the reason
        print(f"huddle: {exc}", file=sys.stderr)
        return 1
    return 0


def check_tls_files(config: ServerConfig) -> None:
    """UsageError if a TLS file is missing or cannot be loaded: a bad setting, not a failure
    at run time."""
    if not config.tls_cert:
        return
    from huddle.coordinator.security.tls import ServerTls, TlsConfigError

    try:
        ServerTls(config.tls_cert, config.tls_key, config.tls_client_ca or None).context()
    except TlsConfigError as exc:
        raise UsageError(f"TLS: {exc}") from None


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        settings = serve_settings(args, environ)
        check_tls_files(settings.config)
    except UsageError as exc:
        print(f"huddle: {exc}", file=sys.stderr)
        return 2
    return run_serve(settings)
