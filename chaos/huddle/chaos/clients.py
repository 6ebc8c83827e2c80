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

The ``consumer`` protocol (KIP-848, and ``consumer-deferred``/``consumer-paced``: the same
with huddle's server assignors) is confluent-kafka's ``group.protocol=consumer`` or
huddle's ``Member(group_protocol="consumer")``: its session timeout and heartbeat interval
are the coordinator's, so the run's (``session_timeout_ms``, ``heartbeat_interval_ms``) go
to ``huddle serve`` as ``--consumer-session-timeout-ms`` and
``--consumer-heartbeat-interval-ms`` (``consumer_flags``): a consumer-protocol member is
fenced as late as a classic one. ``--consumer-assignors`` offers every server assignor, the
one the protocol's name asks for first: huddle's member asks for none, so it gets the
default. It has no group-wide generation: a member tells its member epoch where a classic
member tells its generation (``generation_word``).

huddle's consumer member reconnects after a lost connection, a coordinator restart and a
cluster failover, and continues at its epoch, so it runs every scenario (a cluster's nodes
get ``consumer_flags`` too) and ``--stateful`` (tasks restored from the offset committed at
its epoch; it has no standby replicas: the coordinator assigns no standby tasks). Refused
for it: a running coordinator (``--bootstrap``) with ``consumer-deferred`` or
``consumer-paced``: its default server assignor is its own, and that member cannot ask for
another.
"""

from __future__ import annotations

import sys
from typing import Final

from huddle.chaos.kafka_workers import launch
from huddle.chaos.kafka_workers.options import CONSUMER_PROTOCOL, CONSUMER_PROTOCOLS, is_consumer
from huddle.chaos.procs import HOST
from huddle.chaos.protocols import server_assignors
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


def huddle_consumer(settings: RunSettings) -> bool:
    """Whether the run's members are huddle's own on the consumer protocol."""
    return not is_kafka(settings.client) and is_consumer(settings.protocol)


def check(settings: RunSettings, scenario: Scenario) -> None:
    """ScenarioError (one line) if this run cannot have ``settings.client`` as its members."""
    client = settings.client
    if client not in CLIENT_NAMES:
        raise ScenarioError(f"unknown client {client!r}: one of {', '.join(CLIENT_NAMES)}")
    if settings.kafka_bootstrap is not None and (not is_kafka(client) or not settings.bootstrap):
        raise ScenarioError("--kafka-bootstrap: for Kafka-client members, with --bootstrap")
    if not is_kafka(client):
        if is_consumer(settings.protocol):
            _check_huddle_consumer(settings, scenario)
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


def _check_huddle_consumer(settings: RunSettings, scenario: Scenario) -> None:
    """huddle's consumer member: what it cannot do (see the module)."""
    protocol = settings.protocol
    asked = CONSUMER_PROTOCOLS[protocol]
    if settings.bootstrap is not None and asked is not None:
        raise ScenarioError(
            f"protocol {protocol} with huddle's members ({scenario.name}): it asks for no "
            f"server assignor: the harness's own coordinator makes {asked} its default (no "
            f"--bootstrap); Kafka consumers can (--client {', '.join(consumer_clients())})"
        )


def consumer_clients() -> list[str]:
    """The Kafka clients that speak the ``consumer`` protocol (KIP-848)."""
    return [c for c in KAFKA_CLIENTS if CONSUMER_PROTOCOL in launch.CLIENTS[c].strategies]


def generation_word(protocol: str) -> str:
    """What the members' ``generation`` is under ``protocol``: the consumer protocol's is
    each member's epoch (all equal once the group settled)."""
    return "epoch" if is_consumer(protocol) else "generation"


def consumer_flags(settings: RunSettings) -> list[str]:
    """``huddle serve``'s flags for the consumer protocol: the run's session timeout and
    heartbeat interval (a classic member sends its own), and the server assignors, the one
    the run's protocol asks for first (the default); ``consumer-deferred``'s hold is the
    run's ``--delay-ms``."""
    flags = [
        "--consumer-session-timeout-ms", str(settings.session_timeout_ms),
        "--consumer-heartbeat-interval-ms", str(settings.heartbeat_interval_ms),
        "--consumer-assignors", server_assignors(settings.protocol),
    ]  # fmt: skip
    hold_ms = settings.options.delay_ms
    if hold_ms is not None and CONSUMER_PROTOCOLS.get(settings.protocol) == "deferred":
        flags += ["--consumer-deferred-hold-ms", str(hold_ms)]
    return flags


def node_flags(settings: RunSettings) -> list[str]:
    """A cluster node's ``huddle serve`` flags for the run's members: the consumer
    protocol's (``consumer_flags``) when they may speak it (Kafka clients, huddle's consumer
    members), none for huddle's classic members."""
    return (
        consumer_flags(settings) if is_kafka(settings.client) or huddle_consumer(settings) else []
    )


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
