"""Mixed groups: huddle ``Member``s on huddle's listener and real Kafka consumers on the Kafka
listener, in one group, on ``huddle serve`` (the reference broker has no huddle listener).

Each test starts a member of one kind first (it leads: the coordinator's first member leads
while it stays), then one and another of the other kind, then the first leaves cleanly, so
its partitions go to the other kind, which leads from then on. After every rebalance each
partition is owned exactly once, and every member owns some. huddle's members speak Kafka's
embedded format (``embedded="kafka"``), which a Kafka client leader reads; a huddle leader
reads the Kafka members' subscriptions and answers each in its own format.

huddle's Members run in this process, each entered through a blocking portal (an event loop
in a thread of its own); the Kafka clients are driver processes (conftest.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Final

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from huddle.chaos.kafka_workers.emit import Partition
from huddle.chaos.kafka_workers.options import COOPERATIVE_STICKY, RANGE
from huddle.client.member import Member
from tests.kafka_clients.conftest import PARTITIONS, WAIT_S, KafkaGroup, require_client

pytestmark = pytest.mark.e2e

SESSION_MS: Final = 6_000
CASES: Final = [
    ("kafka-python", RANGE),
    ("kafka-python", COOPERATIVE_STICKY),
    ("confluent-kafka", RANGE),
    ("confluent-kafka", COOPERATIVE_STICKY),
]


class HuddleMembers:
    """huddle Members of one test's group; each left cleanly when the test ends."""

    def __init__(
        self, portal: BlockingPortal, g: KafkaGroup, strategy: str, group_protocol: str = "classic"
    ) -> None:
        self.portal, self.g, self.strategy = portal, g, strategy
        self.group_protocol = group_protocol
        self.members: dict[str, Member] = {}
        self._exits: dict[str, Callable[[], object]] = {}

    def start(self, name: str) -> None:
        bootstrap = f"{self.g.broker.host}:{self.g.broker.huddle_port}"

        def make() -> Member:
            return Member(
                bootstrap,
                group_id=self.g.group,
                topics=[self.g.topic],
                assignors=[self.strategy],
                session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=1_000,
                rebalance_timeout_ms=10_000,
                client_id=f"huddle-{name}",
                embedded="kafka",
                group_protocol=self.group_protocol,
            )

        member = self.portal.call(make)
        entered = self.portal.wrap_async_context_manager(member)
        entered.__enter__()
        self.members[name] = member
        self._exits[name] = lambda: entered.__exit__(None, None, None)

    def stop(self, name: str) -> None:
        """Leave cleanly: revoke, LeaveGroup, close."""
        self._exits.pop(name)()

    def owned(self, name: str) -> frozenset[Partition]:
        if name not in self._exits:
            return frozenset()
        member = self.members[name]
        return frozenset(
            (tp.topic, tp.partition) for tp in self.portal.call(lambda: member.assignment)
        )

    def leads(self, name: str) -> bool:
        member = self.members[name]
        return bool(self.portal.call(lambda: member.is_leader))

    def close(self) -> None:
        for name in list(self._exits):
            with contextlib.suppress(Exception):
                self.stop(name)


@pytest.fixture
def mixed(kafka_group: KafkaGroup) -> KafkaGroup:
    if kafka_group.broker.name != "huddle":
        pytest.skip(f"{kafka_group.broker.name} has no huddle listener")
    return kafka_group


@pytest.fixture
def portal() -> Iterator[BlockingPortal]:
    with start_blocking_portal() as p:
        yield p


def _owned_once(g: KafkaGroup, huddle: HuddleMembers, names: list[str]) -> bool | None:
    """Whether the named members (huddle's or drivers) own every partition between them,
    each partition once, each member some."""
    owned = [huddle.owned(n) if n in huddle.members else g.drivers.all[n].owned for n in names]
    if any(not o for o in owned) or sum(map(len, owned)) != PARTITIONS:
        return None
    return frozenset().union(*owned) == g.partitions or None


def _balanced(g: KafkaGroup, huddle: HuddleMembers, *names: str) -> None:
    what = f"{', '.join(names)} own each of the {PARTITIONS} partitions once"
    g.drivers.wait(lambda: _owned_once(g, huddle, list(names)), WAIT_S, what)


@pytest.mark.parametrize(("client", "strategy"), CASES)
@pytest.mark.parametrize("leader", ["kafka", "huddle"])
def test_huddle_and_kafka_members_share_a_group(
    mixed: KafkaGroup, portal: BlockingPortal, client: str, strategy: str, leader: str
) -> None:
    require_client(client)
    g = mixed
    huddle = HuddleMembers(portal, g, strategy)
    try:
        kafka_names, huddle_names = ["k1", "k2"], ["h1", "h2"]
        first, others = (
            (kafka_names, huddle_names) if leader == "kafka" else (huddle_names, kafka_names)
        )

        def start(name: str) -> None:
            if name in kafka_names:
                g.start(name, client, strategy=strategy, session_ms=SESSION_MS)
            else:
                huddle.start(name)

        start(first[0])
        _balanced(g, huddle, first[0])
        start(others[0])
        _balanced(g, huddle, first[0], others[0])
        if leader == "huddle":
            assert huddle.leads("h1")
        else:
            assert not huddle.leads("h1")
        start(others[1])
        _balanced(g, huddle, first[0], *others)
        # the first member (the leader) leaves: the other kind takes its partitions, and leads
        if leader == "kafka":
            assert g.drivers.all["k1"].stop() == 0
        else:
            huddle.stop("h1")
        _balanced(g, huddle, *others)
        if leader == "kafka":
            assert any(huddle.leads(n) for n in huddle_names)
    finally:
        huddle.close()
