"""Real Kafka clients against a Kafka listener: the broker is a parameter.

``kafka_broker`` runs once per session for each broker: ``huddle`` (``huddle serve`` with
its Kafka listener and no initial rebalance delay; skipped while this huddle has none) and
``tansu``, the reference broker (only with HUDDLE_TEST_TANSU=1: it is for checking the tests
themselves, and its binary is downloaded on first use); with
HUDDLE_TEST_KAFKA_BOOTSTRAP=HOST:PORT also a Kafka listener already running there
(``external``). ``kafka_group`` gives a test a fresh 6-partition topic, a group name and a
``Drivers`` whose processes are all stopped by PID when the test ends; every wait has a
deadline (``Drivers.wait``), none is a fixed sleep.

A client whose program or package is missing skips with the reason, unless
HUDDLE_REQUIRE_KAFKA_CLIENTS=1 (as in CI), when it fails instead.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from huddle.chaos.kafka_workers import brokers, launch
from huddle.chaos.kafka_workers.emit import Partition
from huddle.chaos.kafka_workers.options import DriverOptions
from huddle.chaos.kafka_workers.running import Driver, Drivers, partitions_of

HERE: Final = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """This folder's e2e tests (real Kafka clients, each against its own broker) are
    marked ``clients``: they wait on the clients' timers (heartbeats, session timeouts),
    not on the CPU, so ``make test`` runs them on workers beside each other."""
    for item in items:
        if HERE in item.path.parents and item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.clients)


PARTITIONS: Final = 6
WAIT_S: Final = 40.0
_serial = itertools.count(1)

# What the reference broker is known not to do (seen with tansu 0.6): those tests are
# expected to fail there, and say why.
TANSU_GAPS: Final = {
    "kcat": "librdkafka 2.0.2 cannot read tansu's ApiVersions v3 response (tagged fields)",
}
# The tests wait for a balanced group, not for a figure: huddle starts without Kafka's initial
# rebalance delay (3 s, extended by 3 s while members keep arriving; the coordinator's own
# tests cover it), which saves up to 6 s per group formed (about a third of the run).
# Consumer-protocol (KIP-848) members are fenced after 6 s, as the classic tests' sessions.
HUDDLE_FLAGS: Final = (
    "--initial-rebalance-delay-ms",
    "0",
    "--consumer-session-timeout-ms",
    "6000",
    "--consumer-heartbeat-interval-ms",
    "1000",
)
TANSU_AIOKAFKA_LEAVE: Final = (
    "its generations start at 0, and aiokafka sends LeaveGroup only from generation 1"
)


def require_client(name: str) -> None:
    reason = launch.missing(name)
    if reason is None:
        return
    if os.environ.get("HUDDLE_REQUIRE_KAFKA_CLIENTS") == "1":
        pytest.fail(f"HUDDLE_REQUIRE_KAFKA_CLIENTS=1 but {reason}", pytrace=False)
    pytest.skip(reason)


EXTERNAL_ENV: Final = "HUDDLE_TEST_KAFKA_BOOTSTRAP"


@pytest.fixture(scope="session", params=[*brokers.BROKERS, "external"])
def kafka_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[brokers.Broker]:
    name = request.param
    if name == "external":
        bootstrap = os.environ.get(EXTERNAL_ENV)
        if not bootstrap:
            pytest.skip(f"no {EXTERNAL_ENV}=HOST:PORT of a running Kafka listener")
        host, _, port = bootstrap.rpartition(":")
        require_client("kafka-python")
        yield brokers.Broker("external", 0, int(port), host)
        return
    if name == "tansu" and os.environ.get("HUDDLE_TEST_TANSU") != "1":
        pytest.skip("the reference broker runs only with HUDDLE_TEST_TANSU=1")
    if name == "huddle" and not brokers.huddle_has_kafka_listener():
        pytest.skip("this huddle serve has no Kafka listener (--kafka-port) yet")
    require_client("kafka-python")  # topics are made with its admin client
    flags = HUDDLE_FLAGS if name == "huddle" else ()
    with brokers.broker(name, tmp_path_factory.mktemp(name), fetch=True, flags=flags) as broker:
        yield broker


@dataclass
class KafkaGroup:
    """A fresh topic and group on ``broker``, and the drivers a test starts in it."""

    broker: brokers.Broker
    topic: str
    group: str
    drivers: Drivers

    @property
    def partitions(self) -> frozenset[Partition]:
        return partitions_of(self.topic, PARTITIONS)

    def options(self, client: str, **kw: Any) -> DriverOptions:
        settings: dict[str, Any] = {
            "bootstrap": self.broker.bootstrap,
            "group": self.group,
            "topic": self.topic,
            "strategy": launch.CLIENTS[client].eager,
            "session_ms": 6_000,
            "heartbeat_ms": 1_000,
            "commit": False,
            "max_seconds": 240.0,
            **kw,
        }
        return DriverOptions(**settings)

    def start(self, name: str, client: str, **kw: Any) -> Driver:
        return self.drivers.start(name, client, self.options(client, **kw))

    def balanced(self, *names: str, timeout: float = WAIT_S) -> float:
        """Waits until the named drivers own every partition between them, each some;
        returns when that came about (monotonic)."""
        return self.drivers.wait(
            lambda: self.drivers.balanced(names, self.partitions),
            timeout,
            f"{', '.join(names)} own all {PARTITIONS} partitions",
        )

    def bounce(self, name: str, others: Sequence[str], restart: Callable[[], Driver]) -> None:
        """Stops driver ``name``, starts it again (``restart``) and checks it owns what it
        had, and that none of ``others`` noticed (nothing revoked, assigned or lost)."""
        bounced = self.drivers.all[name]
        had = bounced.owned
        assert bounced.stop() == 0
        left = bounced.last("left")
        assert left is not None
        back = restart()
        self.drivers.wait(lambda: back.owned or None, WAIT_S, f"{name} owns partitions again")
        assert back.owned == had
        noticed = [
            e for o in others for e in self.drivers.all[o].events if e["mono"] > left["mono"]
        ]
        assert not [e for e in noticed if e["event"] in ("revoked", "assigned", "lost")]

    def first_reads(self, member: Driver) -> list[tuple[int, int]]:
        """Waits until ``member`` read every partition; (partition, first offset read) of
        each, sorted."""
        read = self.drivers.wait(
            lambda: member.of("consumed") if len(member.of("consumed")) == PARTITIONS else None,
            WAIT_S,
            f"{member.name} read every partition",
        )
        return sorted((e["partition"], e["offset"]) for e in read)

    def produce(self, per_partition: int) -> None:
        brokers.produce(self.broker.bootstrap, self.topic, PARTITIONS, per_partition)


@pytest.fixture
def kafka_group(kafka_broker: brokers.Broker, tmp_path: Path) -> Iterator[KafkaGroup]:
    topic = f"t{next(_serial)}-{os.getpid()}"
    brokers.create_topic(kafka_broker.bootstrap, topic, PARTITIONS)
    with Drivers(tmp_path / "drivers") as drivers:
        yield KafkaGroup(kafka_broker, topic, f"{topic}-group", drivers)
