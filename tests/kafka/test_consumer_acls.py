"""ACLs on consumer-protocol (KIP-848) groups, as Kafka 4.x: a regex subscription resolves
only to the topics its member may DESCRIBE, and ConsumerGroupDescribe answers the group's
authorized operations when asked."""

from __future__ import annotations

from pathlib import Path

from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.coordinator.security.acls import Operation, ResourceType
from huddle.protocol.messages import TopicSpec
from tests.helpers import fast_server_config
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka
from tests.kafka.test_consumer_protocol import _beat, _join
from tests.kafka.test_wire import _create
from tests.security_setup import acl, keep

NOT_ASKED = -(2**31)
READ, DELETE, DESCRIBE = 1 << 3, 1 << 6, 1 << 8  # Kafka's AclOperation codes, as bits


async def test_a_regex_resolves_only_to_topics_the_member_may_describe(
    tmp_path: Path, logs: object
) -> None:
    anyone = "User:ANONYMOUS"
    await keep(
        tmp_path,
        {},
        [
            acl(anyone, Operation.CREATE, ResourceType.CLUSTER, "huddle-cluster"),
            acl(anyone, Operation.READ, ResourceType.GROUP, "g"),
            acl(anyone, Operation.DESCRIBE, ResourceType.TOPIC, "orders-a"),
        ],
    )
    config = fast_server_config(data_dir=str(tmp_path), authorizer=True)
    async with CoordinatorServer(config) as server:
        port = (await listen_kafka(server, "127.0.0.1", 0)).port
        for name in ("orders-a", "orders-b"):
            _create(server, TopicSpec(name=name, partitions=1))
        ids = server.core.topics.ids
        async with RawKafka(port) as raw:
            joined = await raw.call(
                Api.CONSUMER_GROUP_HEARTBEAT,
                1,
                1,
                **_beat(
                    "m",
                    0,
                    rebalance_timeout=30_000,
                    subscribed_topic_regex="orders-.*",
                    topic_partitions=[],
                ),
            )
            described = await raw.call(
                Api.CONSUMER_GROUP_DESCRIBE,
                1,
                2,
                group_ids=["g"],
                include_authorized_operations=True,
            )
    assert joined.error_code == 0
    assert joined.assignment is not None
    assert [t.topic_id for t in joined.assignment.topic_partitions] == [ids["orders-a"]]
    (group,) = described.groups
    assert group.error_code == 0
    # READ on the group (which lets it DESCRIBE too), not DELETE
    assert group.authorized_operations == READ | DESCRIBE


async def test_authorized_operations_only_when_asked(kafka: Listening) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=1))
    async with RawKafka(kafka.port) as conn:
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        asked = await conn.call(
            Api.CONSUMER_GROUP_DESCRIBE, 1, 2, group_ids=["g"], include_authorized_operations=True
        )
        not_asked = await conn.call(
            Api.CONSUMER_GROUP_DESCRIBE, 1, 3, group_ids=["g"], include_authorized_operations=False
        )
    # no authorizer: every operation a group supports, as Kafka answers
    assert asked.groups[0].authorized_operations == READ | DELETE | DESCRIBE
    assert not_asked.groups[0].authorized_operations == NOT_ASKED
