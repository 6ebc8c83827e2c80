"""The options every driver takes, as command-line flags, and their validation."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from huddle.protocol.errors import InvalidArgumentError

# The assignors a driver may be asked for (Kafka's names); each client has some of them.
RANGE: Final = "range"
ROUNDROBIN: Final = "roundrobin"
COOPERATIVE_STICKY: Final = "cooperative-sticky"
STRATEGIES: Final = (RANGE, ROUNDROBIN, COOPERATIVE_STICKY)
# Not an assignor: KIP-848's consumer group protocol (``group.protocol=consumer``), where the
# coordinator assigns; the confluent-kafka driver offers it
CONSUMER_PROTOCOL: Final = "consumer"
# The consumer protocol with a server assignor asked for (librdkafka's
# ``group.remote.assignor``; huddle serve --consumer-assignors offers them): name -> assignor.
# ``consumer`` asks for none: the coordinator's default (``uniform``).
CONSUMER_PROTOCOLS: Final[dict[str, str | None]] = {
    CONSUMER_PROTOCOL: None,
    f"{CONSUMER_PROTOCOL}-deferred": "deferred",
    f"{CONSUMER_PROTOCOL}-paced": "paced",
}


def is_consumer(protocol: str) -> bool:
    """Whether ``protocol`` is KIP-848's consumer protocol (with some server assignor)."""
    return protocol in CONSUMER_PROTOCOLS


# SASL mechanisms a driver may log in with (Kafka's names; huddle's listener serves these)
SASL_MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")


@dataclass(frozen=True, slots=True)
class DriverOptions:
    bootstrap: str  # HOST:PORT[,HOST:PORT...]
    group: str
    topic: str
    strategy: str = RANGE
    session_ms: int = 6_000
    heartbeat_ms: int = 1_000
    rebalance_ms: int = 10_000  # max.poll.interval.ms (the JoinGroup's rebalance timeout)
    instance_id: str | None = None  # group.instance.id: static membership (KIP-345)
    commit: bool = True  # commit the positions of what was read, after every batch
    client_id: str | None = None
    max_seconds: float = 600.0  # stop by itself after this long (a bound on every run)
    # TLS (the CA file that signs the listener's certificate) and SASL; the password is read
    # from a file (its first line), so that it is not on a command line
    tls_ca: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password_file: str | None = None

    @property
    def security_protocol(self) -> str:
        """Kafka's name for how the driver connects: PLAINTEXT, SSL, SASL_PLAINTEXT or
        SASL_SSL."""
        tls = self.tls_ca is not None
        if self.sasl_mechanism is None:
            return "SSL" if tls else "PLAINTEXT"
        return "SASL_SSL" if tls else "SASL_PLAINTEXT"

    def sasl_password(self) -> str:
        """The first line of the password file."""
        if self.sasl_password_file is None:
            raise InvalidArgumentError("no --sasl-password-file")
        with open(self.sasl_password_file, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")

    def to_argv(self) -> list[str]:
        """These options as the flags ``parse`` reads back."""
        argv = [
            "--bootstrap",
            self.bootstrap,
            "--group",
            self.group,
            "--topic",
            self.topic,
            "--strategy",
            self.strategy,
            "--session-ms",
            str(self.session_ms),
            "--heartbeat-ms",
            str(self.heartbeat_ms),
            "--rebalance-ms",
            str(self.rebalance_ms),
            "--max-seconds",
            str(self.max_seconds),
            "--commit" if self.commit else "--no-commit",
        ]
        if self.instance_id is not None:
            argv += ["--instance-id", self.instance_id]
        if self.client_id is not None:
            argv += ["--client-id", self.client_id]
        for flag, value in (
            ("--tls-ca", self.tls_ca),
            ("--sasl-mechanism", self.sasl_mechanism),
            ("--sasl-username", self.sasl_username),
            ("--sasl-password-file", self.sasl_password_file),
        ):
            if value is not None:
                argv += [flag, value]
        return argv


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def parser(client: str, strategies: Sequence[str]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{client} driver",
        description=f"Join a consumer group with {client}; print its events as JSON lines.",
    )
    p.add_argument("--bootstrap", required=True, help="HOST:PORT of a Kafka listener")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--strategy", choices=list(strategies), default=strategies[0])
    p.add_argument("--session-ms", type=_positive, default=6_000)
    p.add_argument("--heartbeat-ms", type=_positive, default=1_000)
    p.add_argument("--rebalance-ms", type=_positive, default=10_000)
    p.add_argument("--instance-id", default=None, help="group.instance.id (static member)")
    p.add_argument("--commit", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--client-id", default=None)
    p.add_argument("--max-seconds", type=float, default=600.0)
    p.add_argument("--tls-ca", default=None, help="connect over TLS, trusting this CA file")
    p.add_argument("--sasl-mechanism", choices=SASL_MECHANISMS, default=None)
    p.add_argument("--sasl-username", default=None)
    p.add_argument("--sasl-password-file", default=None, help="the password: its first line")
    return p


def parse(
    argv: Sequence[str],
    client: str,
    strategies: Sequence[str],
    *,
    static: bool = True,
    secure: bool = False,
) -> DriverOptions:
    """The options in ``argv``; exits with status 2 and one line on bad or unsupported ones
    (``static``: whether the client has static membership; ``secure``: whether the driver
    takes the TLS and SASL options)."""
    p = parser(client, strategies)
    a = p.parse_args(list(argv))
    if a.instance_id is not None and not static:
        p.error(f"{client} has no static membership (group.instance.id)")
    security = (a.tls_ca, a.sasl_mechanism, a.sasl_username, a.sasl_password_file)
    if not secure and any(v is not None for v in security):
        p.error(f"the {client} driver takes no TLS or SASL options")
    sasl = (a.sasl_mechanism, a.sasl_username, a.sasl_password_file)
    if any(v is not None for v in sasl) and None in sasl:
        p.error("SASL needs --sasl-mechanism, --sasl-username and --sasl-password-file")
    if a.heartbeat_ms >= a.session_ms:
        p.error("--heartbeat-ms must be below --session-ms")
    if a.max_seconds <= 0:
        p.error("--max-seconds must be positive")
    return DriverOptions(
        bootstrap=a.bootstrap,
        group=a.group,
        topic=a.topic,
        strategy=a.strategy,
        session_ms=a.session_ms,
        heartbeat_ms=a.heartbeat_ms,
        rebalance_ms=a.rebalance_ms,
        instance_id=a.instance_id,
        commit=a.commit,
        client_id=a.client_id,
        max_seconds=a.max_seconds,
        tls_ca=a.tls_ca,
        sasl_mechanism=a.sasl_mechanism,
        sasl_username=a.sasl_username,
        sasl_password_file=a.sasl_password_file,
    )


def consumer_settings(options: DriverOptions, client: str) -> dict[str, object]:
    """The consumer settings that kafka-python and aiokafka name alike (both take the Java
    client's names): where to connect, the group, the member and its timeouts. Offsets are
    committed by the driver, and a new group reads from the earliest record."""
    return {
        "bootstrap_servers": options.bootstrap.split(","),
        "group_id": options.group,
        "client_id": options.client_id or client,
        "group_instance_id": options.instance_id,
        "session_timeout_ms": options.session_ms,
        "heartbeat_interval_ms": options.heartbeat_ms,
        "max_poll_interval_ms": options.rebalance_ms,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
    }
