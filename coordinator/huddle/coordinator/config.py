"""Settings of the coordinator: the group rules (core) and the transport (server)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from huddle.coordinator.consumer.assignors import ASSIGNORS
from huddle.coordinator.consumer.messages import BIDIRECTIONAL, MIGRATION_POLICIES
from huddle.protocol.addresses import host_problem, parse_address, parse_endpoints
from huddle.protocol.errors import InvalidArgumentError
from huddle.protocol.framing import DEFAULT_MAX_FRAME_BYTES


class InvalidConfigError(InvalidArgumentError):
    """Settings that are not valid or do not fit together (every problem, in one message).
    Also a ``ValueError``."""


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The rules the sans-IO core applies. Times are milliseconds."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    max_rebalance_timeout_ms: int = 1_800_000  # a member may hold a join phase this long
    initial_rebalance_delay_ms: int = 3_000
    max_group_size: int = 0  # 0: unlimited
    new_member_join_timeout_ms: int = 300_000
    offset_metadata_max_bytes: int = 4_096
    max_partitions: int = 1_000_000  # per topic
    max_request_partitions: int = 20_000  # partitions one OffsetCommit/OffsetFetch may name
    max_members_per_connection: int = 1_000  # members (and member ids handed out) per conn
    # Beyond Kafka, both on by default:
    rebalance_notices: bool = True  # push RebalanceStarted so members rejoin at once
    disconnect_grace_ms: int = 500  # <0 disables; dynamic members gone this long are removed
    # Committed offsets expire this long after their group emptied (all of an Empty group's
    # at once; a commit while it is Empty does not restart the clock), or after their own
    # commit for a group that never had members and for a topic no member of a Stable
    # consumer group subscribes to (Kafka's offsets.retention.minutes, KIP-211, as
    # huddle.coordinator.retention applies it); looked for every check interval
    # (offsets.retention.check.interval.ms).
    offsets_retention_ms: int = 7 * 24 * 3_600_000
    offsets_retention_check_interval_ms: int = 600_000

    def __post_init__(self) -> None:
        problems = []
        if self.offsets_retention_ms < 1 or self.offsets_retention_check_interval_ms < 1:
            problems.append("offsets retention and its check interval must be positive")
        if self.min_session_timeout_ms < 1:
            problems.append("min session timeout must be positive")
        if self.max_session_timeout_ms < self.min_session_timeout_ms:
            problems.append("max session timeout is below the min session timeout")
        for name in ("initial_rebalance_delay_ms", "max_group_size", "offset_metadata_max_bytes"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must not be negative")
        if self.max_partitions < 1:
            problems.append("max partitions must be positive")
        if self.max_request_partitions < 1:
            problems.append("max request partitions must be positive")
        if self.max_members_per_connection < 1:
            problems.append("max members per connection must be positive")
        if self.max_rebalance_timeout_ms < 1:
            problems.append("max rebalance timeout must be positive")
        if self.new_member_join_timeout_ms < 1:
            problems.append("new member join timeout must be positive")
        if problems:
            raise InvalidConfigError("; ".join(problems))


# The Kafka log's bounds (docs/kafka.md, "Bounds"): one batch (Kafka's message.max.bytes,
# fixed), one partition (--kafka-log-partition-bytes), all partitions (--kafka-log-total-bytes)
MiB = 1024 * 1024
DEFAULT_MAX_BATCH_BYTES = 1 * MiB + 12
DEFAULT_MAX_PARTITION_BYTES = 8 * MiB
DEFAULT_MAX_TOTAL_BYTES = 128 * MiB
_ANY_HOST = ("0.0.0.0", "::", "")  # listening on every address: nothing to tell a client

_SECURITY_FIELDS = (
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "tls_allow_name_changes",
    "sasl",
    "authorizer",
    "super_users",
)
_OTHER_FIELDS = (
    "metrics_port",
    "kafka_port",
    "kafka_host",
    "kafka_advertise",
    "kafka_evict_on_close_ms",
    "consumer_migration_policy",
    "consumer_assignors",
)
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")


def sasl_mechanisms(spec: str) -> tuple[str, ...]:
    """``"SCRAM-SHA-512, scram-sha-256"`` -> the mechanisms, upper case, in order."""
    return tuple(dict.fromkeys(m.strip().upper() for m in spec.split(",") if m.strip()))


def consumer_assignors(spec: str) -> tuple[str, ...]:
    """``"deferred, uniform"`` -> the server assignors offered, in order (the first is the
    default), each once."""
    return tuple(dict.fromkeys(a.strip() for a in spec.split(",") if a.strip()))


def consumer_assignor_problems(spec: str) -> list[str]:
    """What is wrong with ``--consumer-assignors`` (Kafka's ``group.consumer.assignors``)."""
    names = consumer_assignors(spec)
    if not names:
        return [f"--consumer-assignors: name one or more of {', '.join(ASSIGNORS)}"]
    unknown = [name for name in names if name not in ASSIGNORS]
    if unknown:
        return [
            f"--consumer-assignors: no server assignor {', '.join(unknown)} "
            f"(one or more of {', '.join(ASSIGNORS)})"
        ]
    return []


def super_users(spec: str) -> tuple[str, ...]:
    return tuple(u.strip() for u in spec.split(";") if u.strip())


def security_problems(cfg: ServerConfig) -> list[str]:
    problems = []
    if bool(cfg.tls_cert) != bool(cfg.tls_key):
        problems.append("TLS needs both --tls-cert and --tls-key")
    if cfg.tls_client_ca and not cfg.tls_cert:
        problems.append("--tls-client-ca (mTLS) needs TLS: --tls-cert and --tls-key")
    mechanisms = sasl_mechanisms(cfg.sasl)
    unknown = [m for m in mechanisms if m not in SASL_MECHANISMS]
    if unknown:
        problems.append(
            f"unknown SASL mechanism {', '.join(unknown)}: use {', '.join(SASL_MECHANISMS)}"
        )
    if "PLAIN" in mechanisms and not cfg.tls_cert:
        problems.append("SASL PLAIN sends passwords in the clear: it needs TLS (--tls-cert)")
    if (mechanisms or cfg.authorizer) and not (cfg.data_dir or cfg.cluster):
        problems.append(
            "users and ACLs are kept with the coordinator's state: --sasl and --authorizer "
            "need --data-dir (or --cluster)"
        )
    for principal in super_users(cfg.super_users):
        kind, sep, name = principal.partition(":")
        if not (kind and sep and name):
            problems.append(f"super user {principal!r} is not a principal (User:NAME)")
    return problems


def kafka_problems(cfg: ServerConfig) -> list[str]:
    """What is wrong with the Kafka listener's settings (nothing when there is none)."""
    problems = []
    if cfg.kafka_evict_on_close_ms < -1:
        problems.append("--kafka-evict-on-close-ms must be 0 or more (or -1: off)")
    if cfg.consumer_migration_policy not in MIGRATION_POLICIES:
        problems.append(
            f"--consumer-migration-policy must be one of {', '.join(MIGRATION_POLICIES)}"
        )
    problems.extend(consumer_assignor_problems(cfg.consumer_assignors))
    if cfg.consumer_heartbeat_interval_ms >= cfg.consumer_session_timeout_ms:
        problems.append(
            "--consumer-heartbeat-interval-ms must be below --consumer-session-timeout-ms"
        )
    if not DEFAULT_MAX_BATCH_BYTES <= cfg.kafka_log_partition_bytes <= cfg.kafka_log_total_bytes:
        problems.append(
            f"the Kafka log's bounds must be {DEFAULT_MAX_BATCH_BYTES} (one batch, Kafka's "
            "message.max.bytes) <= --kafka-log-partition-bytes <= --kafka-log-total-bytes"
        )
    if cfg.kafka_port == -1:
        if cfg.kafka_host or cfg.kafka_advertise:
            problems.append("--kafka-host and --kafka-advertise need --kafka-port")
        return problems
    if not 0 <= cfg.kafka_port <= 65_535:
        problems.append(f"Kafka port {cfg.kafka_port} is not in 0..65535 (or -1: none)")
    if cfg.kafka_host:
        host = host_problem(cfg.kafka_host)
        if host is not None:
            problems.append(f"Kafka listener: {host}")
    if cfg.kafka_advertise:
        try:
            parse_address(cfg.kafka_advertise, what="Kafka advertised address")
        except ValueError as exc:
            problems.append(str(exc))
    if cfg.cluster and not cfg.kafka_advertise and (cfg.kafka_host or cfg.host) in _ANY_HOST:
        problems.append(
            f"a cluster node's Kafka listener on {cfg.kafka_host or cfg.host!r} needs "
            "--kafka-advertise HOST:PORT (the address other nodes send Kafka clients to)"
        )
    return problems


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Transport settings of ``huddle serve``. Times are milliseconds."""

    host: str = "127.0.0.1"
    port: int = 9292
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_response_bytes: int = DEFAULT_MAX_FRAME_BYTES  # a larger answer becomes an error
    max_connections: int = 10_000
    handshake_timeout_ms: int = 10_000  # a connection must say hello within this
    stalled_frame_timeout_ms: int = 30_000  # a frame begun must be finished within this
    max_write_buffer_bytes: int = 64 * 1024 * 1024  # a client that never reads is dropped
    input_slice_ms: int = 5  # one connection's frames are handled this long, then others go
    idle_timeout_ms: int = 600_000  # a connection holding no member and silent this long closes
    max_partial_frame_bytes: int = 256 * 1024 * 1024  # unfinished frames, all connections
    shutdown_timeout_ms: int = 5_000
    data_dir: str = ""  # keep topics and committed offsets here; "": in memory only
    fsync: bool = False  # force every kept change to disk before answering
    # HOST:PORT clients are told to use (FindCoordinator); "": the address listened on
    advertise: str = ""
    node_id: str = ""  # this node's name; "": its advertised address
    # A node of a cluster on etcd ("etcd://h1:2379,h2:2379"); "": a single coordinator
    cluster: str = ""
    cluster_prefix: str = "/huddle"  # the cluster's keys in etcd
    shards: int = 50  # groups are spread over this many shards (fixed per cluster)
    lease_ttl_s: int = 3  # a node that cannot renew its lease stops serving before this
    # TLS on the listener: its certificate and key (PEM); with a client CA, every client
    # must present a certificate it signed (mTLS), whose subject is its principal.
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    # A certificate reload may change the certificate's subject, its subject alternative
    # names and the CA its chain ends at (as Kafka's ssl.allow.dn.changes and
    # ssl.allow.san.changes; off, as there: such a reload is refused).
    tls_allow_name_changes: bool = False
    # SASL mechanisms every client must authenticate with ("SCRAM-SHA-512,SCRAM-SHA-256");
    # "": none. Users are kept in the data dir, or in etcd for a cluster.
    sasl: str = ""
    authorizer: bool = False  # ACLs decide what each principal may do; nothing else is allowed
    super_users: str = ""  # principals allowed everything, ";"-separated (User:admin;User:ops)
    metrics_port: int = -1  # serve Prometheus /metrics on this port (0: any free one; -1: off)
    # A Kafka listener beside huddle's on this port (0: any free one; -1: none), on
    # ``kafka_host`` ("": ``host``), telling clients ``kafka_advertise`` ("": where it listens)
    kafka_port: int = -1
    kafka_host: str = ""
    kafka_advertise: str = ""
    # A dynamic Kafka member whose connection closed is removed after this grace (-1: never,
    # it stays until its session timeout, as with Kafka); static members always stay.
    kafka_evict_on_close_ms: int = -1
    # KIP-848's consumer groups: Kafka's group.consumer.session.timeout.ms and
    # group.consumer.heartbeat.interval.ms (the coordinator sets both for its members)
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    # Kafka's group.consumer.migration.policy: "bidirectional" (Kafka 4.0's default),
    # "upgrade" (a consumer-protocol member joining a classic group converts it),
    # "downgrade" (a consumer group left with classic members only converts back) or
    # "disabled"
    consumer_migration_policy: str = BIDIRECTIONAL
    # the server assignors consumer-protocol groups may ask for, the first the default
    # (Kafka's group.consumer.assignors): uniform, range, and huddle's deferred and paced
    consumer_assignors: str = "uniform,range"
    # how long the deferred server assignor holds a departed member's partitions for its
    # return (Kafka Connect's scheduled.rebalance.max.delay.ms)
    consumer_deferred_hold_ms: int = 300_000
    # The Kafka log's bounds: each partition's bytes and all partitions' (oldest dropped)
    kafka_log_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    kafka_log_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    group: GroupConfig = field(default_factory=GroupConfig)

    def __post_init__(self) -> None:
        problems = []
        host = host_problem(self.host)
        if host is not None:
            problems.append(host)
        if not 0 <= self.port <= 65_535:
            problems.append(f"port {self.port} is not in 0..65535")
        for f in fields(self):
            if f.name in (
                "host",
                "port",
                "group",
                "data_dir",
                "fsync",
                "advertise",
                "node_id",
                "cluster",
                "cluster_prefix",
                *_SECURITY_FIELDS,
                *_OTHER_FIELDS,
            ):
                continue
            if getattr(self, f.name) < 1:
                problems.append(f"{f.name} must be positive")
        if self.cluster:
            if self.data_dir:
                problems.append("a cluster node keeps its state in etcd: no data dir")
            try:
                parse_endpoints(self.cluster)
            except ValueError as exc:
                problems.append(str(exc))
            if not self.cluster_prefix.startswith("/") or self.cluster_prefix.rstrip("/") == "":
                problems.append(f"cluster prefix {self.cluster_prefix!r} must be /NAME")
            if not self.advertise and self.host in _ANY_HOST:
                problems.append(
                    f"a cluster node listening on {self.host!r} needs --advertise HOST:PORT "
                    "(the address other nodes send clients to)"
                )
        if self.advertise:
            try:
                parse_address(self.advertise, what="advertised address")
            except ValueError as exc:
                problems.append(str(exc))
        problems.extend(security_problems(self))
        problems.extend(kafka_problems(self))
        if not -1 <= self.metrics_port <= 65_535:
            problems.append(f"metrics port {self.metrics_port} is not in 0..65535 (or -1: off)")
        if self.max_response_bytes > self.max_write_buffer_bytes:
            problems.append(
                "max response bytes is over the max write buffer bytes: a client could be "
                "dropped for one answer"
            )
        if problems:
            raise InvalidConfigError("; ".join(problems))
