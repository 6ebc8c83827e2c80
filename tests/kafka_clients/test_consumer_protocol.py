"""confluent-kafka (librdkafka 2.16) with ``group.protocol=consumer`` (KIP-848) on huddle's
Kafka listener: two consumers share a topic's partitions, one that leaves hands the other
all of them, survivors take a killed one's partitions once its session ends, a new
consumer resumes from the offsets committed, a topic deleted and created again is given up
and read again from its start, and one fenced while its group emptied rejoins after a
coordinator restart."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import anyio
import pytest
from anyio.from_thread import start_blocking_portal

from huddle.chaos.kafka_workers import brokers
from huddle.chaos.kafka_workers.options import CONSUMER_PROTOCOL
from huddle.chaos.kafka_workers.running import Drivers, partitions_of
from huddle.client import Admin
from huddle.protocol.addresses import free_port
from tests.kafka_clients.conftest import (
    HUDDLE_FLAGS,
    PARTITIONS,
    WAIT_S,
    KafkaGroup,
    require_client,
)
from tests.kafka_clients.test_mixed_groups import HuddleMembers, _balanced

pytestmark = pytest.mark.e2e

CLIENT: Final = "confluent-kafka"


@pytest.fixture
def group(kafka_group: KafkaGroup) -> KafkaGroup:
    require_client(CLIENT)
    if kafka_group.broker.name != "huddle":
        pytest.skip("the consumer group protocol is checked on huddle only")
    return kafka_group


def test_two_consumers_share_and_a_leave_gives_the_other_all(group: KafkaGroup) -> None:
    g = group
    first = g.start("m1", CLIENT, strategy=CONSUMER_PROTOCOL)
    g.start("m2", CLIENT, strategy=CONSUMER_PROTOCOL)
    g.balanced("m1", "m2")
    first.terminate()
    assert first.proc.wait(timeout=WAIT_S) == 0
    assert first.last("left") is not None
    g.drivers.wait(
        lambda: g.drivers.balanced(("m2",), g.partitions), WAIT_S, "m2 owns every partition"
    )


def test_survivors_take_over_after_kill_9(group: KafkaGroup) -> None:
    g = group
    members = [g.start(n, CLIENT, strategy=CONSUMER_PROTOCOL) for n in ("m1", "m2", "m3")]
    g.balanced("m1", "m2", "m3")
    members[0].kill()
    g.balanced("m2", "m3")  # once m1's session (6 s here) ran out


def test_a_new_consumer_resumes_from_the_commit(group: KafkaGroup) -> None:
    g = group
    g.produce(5)
    first = g.start("m1", CLIENT, strategy=CONSUMER_PROTOCOL, commit=True)

    def committed_all() -> bool | None:
        lines = first.of("committed")
        tps = {(t, p) for e in lines for t, p, o in e["offsets"] if o == 5}
        return len(tps) == PARTITIONS or None

    g.drivers.wait(committed_all, WAIT_S, "m1 committed 5 on every partition")
    assert not first.of("commit_failed")
    assert first.stop() == 0
    g.produce(5)
    second = g.start("m2", CLIENT, strategy=CONSUMER_PROTOCOL, commit=True)
    assert g.first_reads(second) == [(p, 5) for p in range(PARTITIONS)]


def test_a_static_member_bounces_and_gets_its_partitions_back(group: KafkaGroup) -> None:
    """librdkafka's close leaves with epoch -2 (a static member's leave for now): its
    partitions wait for it (within its session), and nobody else's change."""
    g = group
    names = ("m1", "m2", "m3")
    for n in names:
        g.start(n, CLIENT, strategy=CONSUMER_PROTOCOL, instance_id=f"static-{n}")
    g.balanced(*names)
    g.bounce(
        "m1",
        ("m2", "m3"),
        lambda: g.start("m1", CLIENT, strategy=CONSUMER_PROTOCOL, instance_id="static-m1"),
    )


@pytest.fixture
def huddle_members(group: KafkaGroup) -> Iterator[HuddleMembers]:
    """huddle's own consumer-protocol Members of the group (on huddle serve's listener)."""
    with start_blocking_portal() as portal:
        members = HuddleMembers(portal, group, CONSUMER_PROTOCOL, group_protocol="consumer")
        try:
            yield members
        finally:
            members.close()


def test_a_kafka_consumer_and_a_huddle_member_share_one_group(
    group: KafkaGroup, huddle_members: HuddleMembers
) -> None:
    """Both wires reach the server's one consumer service: one group, each partition once;
    the Kafka consumer's leave hands the huddle member every partition."""
    g = group
    kafka = g.start("k1", CLIENT, strategy=CONSUMER_PROTOCOL)
    huddle_members.start("h1")
    _balanced(g, huddle_members, "k1", "h1")
    kafka.terminate()
    assert kafka.proc.wait(timeout=WAIT_S) == 0
    _balanced(g, huddle_members, "h1")


def test_a_regex_subscription_shares_and_takes_a_topic_created_later(group: KafkaGroup) -> None:
    """librdkafka sends a subscription starting with ``^`` as KIP-848's
    SubscribedTopicRegex: the coordinator resolves it, and a topic created later that
    matches is shared out too, with no consumer asked to subscribe again."""
    g = group
    later = f"{g.topic}-later"
    pattern = f"^{re.escape(g.topic)}(-later)?$"
    for name in ("m1", "m2"):
        g.start(name, CLIENT, strategy=CONSUMER_PROTOCOL, topic=pattern)
    g.balanced("m1", "m2")
    brokers.create_topic(g.broker.bootstrap, later, PARTITIONS)
    both = g.partitions | partitions_of(later, PARTITIONS)
    g.drivers.wait(lambda: g.drivers.balanced(("m1", "m2"), both), WAIT_S, "m1, m2 own both topics")


def _create_again(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` and create it again with its partition count, back to back."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="huddle-admin")
    try:
        admin.delete_topics([topic], timeout_ms=10_000)
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)], timeout_ms=10_000)
    finally:
        admin.close()


def test_a_topic_deleted_and_created_again_is_revoked_then_read_from_its_start(
    group: KafkaGroup,
) -> None:
    """The coordinator notices the new topic id: the consumer gives up the old topic's
    partitions, is given the new one's, and reads the new topic from its first record."""
    g = group
    first = g.start("m1", CLIENT, strategy=CONSUMER_PROTOCOL)
    g.balanced("m1")
    g.produce(3)
    g.drivers.wait(
        lambda: len(first.of("consumed")) == PARTITIONS or None, WAIT_S, "m1 read every partition"
    )
    at = time.monotonic()
    _create_again(g.broker.bootstrap, g.topic)

    def given_up() -> bool | None:
        taken = first.of("revoked", since=at) + first.of("lost", since=at)
        return {(t, p) for e in taken for t, p in e["partitions"]} == g.partitions or None

    g.drivers.wait(given_up, WAIT_S, "m1 gave up the old topic's partitions")
    g.balanced("m1")
    g.produce(1)
    read = g.drivers.wait(
        lambda: (
            (len(first.of("consumed", since=at)) == PARTITIONS or None)
            and first.of("consumed", since=at)
        ),
        WAIT_S,
        "m1 read every partition of the new topic",
    )
    assert sorted((e["partition"], e["offset"]) for e in read) == [
        (p, 0) for p in range(PARTITIONS)
    ]


def test_a_consumer_fenced_while_its_group_emptied_rejoins_after_a_restart(
    tmp_path: Path,
) -> None:
    """librdkafka takes GROUP_ID_NOT_FOUND to a heartbeat as fatal. A consumer stopped
    (SIGSTOP) past its session is fenced, and its group empties; the coordinator restarts
    on its data dir; the consumer, continued, heartbeats at its old epoch. The emptied group
    was kept, so it is told UNKNOWN_MEMBER_ID: it loses its partitions, joins again and is
    given them back, with no fatal error."""
    require_client(CLIENT)
    if not brokers.huddle_has_kafka_listener():
        pytest.skip("this huddle serve has no Kafka listener (--kafka-port)")
    flags = (*HUDDLE_FLAGS, "--data-dir", str(tmp_path / "data"))
    ports = (free_port(), free_port())
    with Drivers(tmp_path / "drivers") as drivers:
        with brokers.huddle(tmp_path, *flags, ports=ports) as broker:
            g = KafkaGroup(broker, "t", "g", drivers)
            brokers.create_topic(broker.bootstrap, g.topic, PARTITIONS)
            m1 = g.start("m1", CLIENT, strategy=CONSUMER_PROTOCOL)
            g.balanced("m1")
            m1.proc.send_signal(signal.SIGSTOP)  # by its PID
            try:
                drivers.wait(lambda: _state(broker) == "Empty" or None, WAIT_S, "g to empty")
            except BaseException:
                m1.proc.send_signal(signal.SIGCONT)
                raise
        with brokers.huddle(tmp_path, *flags, ports=ports) as broker:
            assert _state(broker) == "Empty"  # kept, empty, across the restart
            continued = time.monotonic()
            m1.proc.send_signal(signal.SIGCONT)
            drivers.wait(lambda: m1.of("assigned", continued) or None, WAIT_S, "m1 to rejoin")
            g.balanced("m1")
            assert m1.of("lost", continued)  # it was told it was fenced, and rejoined
            assert not m1.of("error")
            assert m1.proc.poll() is None


def _state(broker: brokers.Broker) -> str:
    """Group g's state, as huddle's admin describes it."""

    async def describe() -> str:
        async with Admin(f"{broker.host}:{broker.huddle_port}") as admin:
            described = await admin.describe_group("g")
        return described.state

    return anyio.run(describe)
