"""Who a chaos run's members are, and what that asks of the run.

``huddle`` (the default): huddle's own ``Member`` (``python -m huddle.chaos.worker``) with
its synthetic workload, on huddle's listener. A Kafka client (``KAFKA_CLIENTS``): an
unmodified Kafka consumer (``python -m huddle.chaos.kafka_member``) on the coordinator's
Kafka listener, reading real records that a producer process
(``huddle.chaos.kafka_workers.producer``) appends to the topic on huddle's small log. Both
write the same event file (``huddle.chaos.events``).

``check`` refuses, with one line, what a Kafka-client run cannot do (yet): ``--bootstrap``,
stateful tasks, and a protocol the client does not have. A cluster scenario runs every node
with a Kafka listener, and the members bootstrap from all of them.
"""

from __future__ import annotations

import sys
from typing import Final

from huddle.chaos.kafka_workers import launch
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
    if not is_kafka(client):
        return
    why = launch.missing(client)
    if why is not None:
        raise ScenarioError(f"client {client}: {why}")
    strategies = launch.CLIENTS[client].strategies
    if settings.protocol not in strategies:
        raise ScenarioError(
            f"client {client} has no protocol {settings.protocol!r}: one of {', '.join(strategies)}"
        )
    refusals = [
        (settings.bootstrap is not None, "--bootstrap: a Kafka-client run starts its own"),
        (settings.stateful, "--stateful: Kafka clients have no standby tasks"),
        (scenario.static and not launch.CLIENTS[client].static, "no static membership"),
    ]
    for refused, why in refusals:
        if refused:
            raise ScenarioError(f"client {client}: {why}")


def listener_flags(kafka_port: int, proxy: FaultProxy | None = None) -> list[str]:
    """``huddle serve``'s flags for a Kafka-client run: the Kafka listener, advertising the
    fault proxy in front of it if there is one (Kafka clients go where Metadata says)."""
    flags = ["--kafka-host", HOST, "--kafka-port", str(kafka_port)]
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
