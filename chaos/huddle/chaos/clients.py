"""Who a chaos run's members are, and what that asks of the run.

``huddle`` (the default): huddle's own ``Member`` (``python -m huddle.chaos.worker``) with
its synthetic workload, on huddle's listener. A Kafka client (``KAFKA_CLIENTS``): an
unmodified Kafka consumer (``python -m huddle.chaos.kafka_member``) on the coordinator's
Kafka listener, reading real records that a producer process
(``huddle.chaos.kafka_workers.producer``) appends to the topic on huddle's small log. Both
write the same event file (``huddle.chaos.events``).

``check`` refuses, with one line, what a Kafka-client run cannot do (yet): stateful tasks,
a protocol the client does not have, and a running coordinator (``--bootstrap``) without
its Kafka listener (``--kafka-bootstrap``) or behind the fault proxy. A cluster scenario
runs every node with a Kafka listener, and the members bootstrap from all of them.

The ``consumer`` protocol (KIP-848) is confluent-kafka's ``group.protocol=consumer``: its
session timeout and heartbeat interval are the coordinator's, so the run's
(``session_timeout_ms``, ``heartbeat_interval_ms``) go to ``huddle serve`` as
``--consumer-session-timeout-ms`` and ``--consumer-heartbeat-interval-ms``
(``listener_flags``): a consumer-protocol member is fenced as late as a classic one. It
has no group-wide generation: a member tells its member epoch where a classic member tells
its generation (``generation_word``).
"""

from __future__ import annotations

import sys
from typing import Final

from huddle.chaos.kafka_workers import launch
from huddle.chaos.kafka_workers.options import CONSUMER_PROTOCOL
from huddle.chaos.procs import HOST
from huddle.chaos.proxy import FaultProxy
from huddle.chaos.runsettings import HUDDLE_CLIENT, RunSettings
from huddle.chaos.scenarios import Scenario, ScenarioError
from huddle.chaos.worker import WorkerSettings

KAFKA_CLIENTS: Final = ("kafka-python", "aiokafka", "confluent-kafka")
CLIENT_NAMES: Final = (HUDDLE_CLIENT, *KAFKA_CLIENTS)
WORKER_MODULES: Final = {HUDDLE_CLIENT: "huddle.chaos.worker"} | dict.fromkeys(
    KAFKA_CLIENTS, "huddle.chaos.kafka_member"
)
PRODUCER_MODULE: Final = "huddle.chaos.kafka_workers.producer"


def is_kafka(client: str) -> bool:
    return client != HUDDLE_CLIENT


def check(settings: RunSettings, scenario: Scenario) -> None:
    """ScenarioError (one line) if this run cannot have ``settings.client`` as its members."""
    client = settings.client
    if client not in CLIENT_NAMES:
        raise ScenarioError(f"unknown client {client!r}: one of {', '.join(CLIENT_NAMES)}")
    if settings.kafka_bootstrap is not None and (not is_kafka(client) or not settings.bootstrap):
        raise ScenarioError("--kafka-bootstrap: for Kafka-client members, with --bootstrap")
    if not is_kafka(client):
        if settings.protocol == CONSUMER_PROTOCOL:
            raise ScenarioError(
                f"protocol {CONSUMER_PROTOCOL}: its members are Kafka consumers on the Kafka "
                f"listener (--client {', '.join(consumer_clients())})"
            )
        return
    why = launch.missing(client)
    if why is not None:
        raise ScenarioError(f"client {client}: {why}")
    strategies = launch.CLIENTS[client].strategies
    if settings.protocol not in strategies:
        raise ScenarioError(
            f"client {client} has no protocol {settings.protocol!r}: one of {', '.join(strategies)}"
        )
    running = settings.bootstrap is not None
    refusals = [
        (
            running and settings.kafka_bootstrap is None,
            "--bootstrap needs --kafka-bootstrap, the running coordinator's Kafka listener",
        ),
        (
            running and bool(scenario.network_faults or settings.proxy),
            "the fault proxy needs the harness's own coordinator (a running one advertises "
            "its Kafka listener, not the proxy)",
        ),
        (settings.stateful, "--stateful: Kafka clients have no standby tasks"),
        (scenario.static and not launch.CLIENTS[client].static, "no static membership"),
    ]
    for refused, why in refusals:
        if refused:
            raise ScenarioError(f"client {client}: {why}")


def consumer_clients() -> list[str]:
    """The Kafka clients that speak the ``consumer`` protocol (KIP-848)."""
    return [c for c in KAFKA_CLIENTS if CONSUMER_PROTOCOL in launch.CLIENTS[c].strategies]


def generation_word(protocol: str) -> str:
    """What the members' ``generation`` is under ``protocol``: the consumer protocol's is
    each member's epoch (all equal once the group settled)."""
    return "epoch" if protocol == CONSUMER_PROTOCOL else "generation"


def consumer_flags(settings: RunSettings) -> list[str]:
    """``huddle serve``'s flags for the consumer protocol's timers: the run's session
    timeout and heartbeat interval (a classic member sends its own)."""
    return [
        "--consumer-session-timeout-ms", str(settings.session_timeout_ms),
        "--consumer-heartbeat-interval-ms", str(settings.heartbeat_interval_ms),
    ]  # fmt: skip


def listener_flags(
    kafka_port: int, settings: RunSettings, proxy: FaultProxy | None = None
) -> list[str]:
    """``huddle serve``'s flags for a Kafka-client run: the Kafka listener, advertising the
    fault proxy in front of it if there is one (Kafka clients go where Metadata says), and
    the consumer protocol's timers."""
    flags = ["--kafka-host", HOST, "--kafka-port", str(kafka_port), *consumer_flags(settings)]
    return flags if proxy is None else [*flags, "--kafka-advertise", f"{HOST}:{proxy.port}"]


def member_argv(settings: RunSettings, worker: WorkerSettings) -> list[str]:
    """The command line of one member process for ``settings.client``."""
    return [sys.executable, "-m", WORKER_MODULES[settings.client], worker.to_json()]


def producer_argv(settings: RunSettings, bootstrap: str, max_seconds: float) -> list[str]:
    """The command line of the producer that feeds a Kafka-client run's topic."""
    s = settings
    return [
        sys.executable, "-m", PRODUCER_MODULE, "--bootstrap", bootstrap, "--topic", s.topic,
        "--partitions", str(s.partitions), "--rate", f"{s.rate:g}",
        "--max-seconds", f"{max_seconds:g}",
    ]  # fmt: skip
