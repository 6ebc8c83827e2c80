"""A rolling upgrade from ``group.protocol=classic`` to ``consumer`` on huddle's Kafka listener:
two classic consumers (kafka-python, or confluent-kafka's classic protocol) share a topic,
a confluent-kafka consumer with ``group.protocol=consumer`` joins their group (which huddle
upgrades to a consumer group online), the three share the partitions, and once a classic
one stops the other two own them all. Whenever the group is balanced, no partition is owned
by two consumers.

And the way back (the ``bidirectional`` migration policy, huddle's default as Kafka's):
when the consumer-protocol member leaves, the group is a classic group again, its classic
members rebalance and own everything between them, and at no moment of the whole run was
a partition owned by two consumers (their ownership events, in order of time)."""

from __future__ import annotations

import warnings
from typing import Final

import pytest

from huddle.chaos.kafka_workers.options import CONSUMER_PROTOCOL, COOPERATIVE_STICKY, RANGE
from huddle.chaos.kafka_workers.running import OWNERSHIP, Drivers
from tests.kafka_clients.conftest import WAIT_S, KafkaGroup, require_client

pytestmark = pytest.mark.e2e

CONSUMER: Final = "confluent-kafka"


@pytest.mark.parametrize("classic", ["kafka-python", "confluent-kafka"])
def test_a_classic_group_takes_a_consumer_protocol_member(
    kafka_group: KafkaGroup, classic: str
) -> None:
    g = kafka_group
    require_client(classic)
    require_client(CONSUMER)
    if g.broker.name != "huddle":
        pytest.skip("mixed groups are checked on huddle only")
    first = g.start("c1", classic)
    g.start("c2", classic)
    g.balanced("c1", "c2")
    g.start("n1", CONSUMER, strategy=CONSUMER_PROTOCOL)
    g.balanced("c1", "c2", "n1")
    assert first.stop() == 0
    g.balanced("c2", "n1")


@pytest.mark.parametrize("strategy", [RANGE, COOPERATIVE_STICKY])
@pytest.mark.parametrize("classic", ["kafka-python", "confluent-kafka"])
def test_the_consumer_protocol_member_leaving_makes_the_group_classic_again(
    kafka_group: KafkaGroup, classic: str, strategy: str
) -> None:
    g = kafka_group
    require_client(classic)
    require_client(CONSUMER)
    if g.broker.name != "huddle":
        pytest.skip("mixed groups are checked on huddle only")
    g.start("c1", classic, strategy=strategy)
    g.start("c2", classic, strategy=strategy)
    g.balanced("c1", "c2")
    assert _described(g) == ("Stable", strategy)  # a classic group, its protocol chosen
    consumer = g.start("n1", CONSUMER, strategy=CONSUMER_PROTOCOL)
    g.balanced("c1", "c2", "n1")
    assert _described(g)[1] == ""  # a consumer group: no classic protocol
    assert consumer.stop() == 0
    g.balanced("c1", "c2")
    # a classic group again, its protocol chosen in its own rebalance
    classic_again = ("Stable", strategy)
    g.drivers.wait(
        lambda: _described(g) == classic_again or None, WAIT_S, "the group is classic again"
    )
    _never_owned_twice(g.drivers, ("c1", "c2", "n1"))


def _described(g: KafkaGroup) -> tuple[str, str]:
    """The group's state and classic protocol as DescribeGroups shows them (a consumer
    group has no classic protocol: "")."""
    with warnings.catch_warnings():  # kafka-python's deprecated importlib.resources calls
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=g.broker.bootstrap, client_id="huddle-admin")
    try:
        described = admin.describe_groups([g.group])[g.group]
        return str(described["group_state"]), str(described["protocol_data"])
    finally:
        admin.close()


def _never_owned_twice(drivers: Drivers, names: tuple[str, ...]) -> None:
    """Each partition had one owner at a time, by the drivers' ownership events in order of
    their time (one monotonic clock: the processes share the machine)."""
    events = sorted(
        ((e["mono"], name, e) for name in names for e in drivers.all[name].events),
        key=lambda item: item[0],
    )
    owned: dict[str, frozenset[tuple[str, int]]] = {}
    for _, name, event in events:
        if event["event"] not in OWNERSHIP:
            continue
        owned[name] = frozenset((t, p) for t, p in event["owned"])
        others = set().union(*(o for n, o in owned.items() if n != name))
        assert not owned[name] & others, f"owned twice at {event}: {owned}"
