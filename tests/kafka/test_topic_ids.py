"""Topics by id on the Kafka wire (KIP-516): Metadata v10+ answers each topic's id, v12
finds a topic by it; Fetch v13+, OffsetCommit v10 and OffsetFetch v10 name topics by id;
CreateTopics v7 answers the id given and DeleteTopics v6 deletes by id. An id no topic has
(never made, or a topic deleted, even if made again since) is UNKNOWN_TOPIC_ID."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from huddle.coordinator.kafka.apis import Api
from huddle.protocol.messages import TopicSpec
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka
from tests.kafka.test_wire import _create
from tests.kafka_log.records import batch

UNKNOWN_TOPIC_ID = 100
UNKNOWN_TOPIC_OR_PARTITION = 3
NOBODY = uuid.UUID("3b1f1c1e-2b9a-4c57-8f0e-6a1d2c3b4a59")  # no topic's id


def _metadata_topics(version: int, **topic: Any) -> dict[str, Any]:
    return {
        "topics": [topic],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,  # v8-10
        "include_topic_authorized_operations": False,
    }


async def _produce(conn: RawKafka, values: list[bytes]) -> None:
    answer = await conn.call(
        Api.PRODUCE,
        9,
        90,
        transactional_id=None,
        acks=-1,
        timeout=5_000,
        topic_data=[{"name": "t", "partition_data": [{"index": 0, "records": batch(values)}]}],
    )
    assert answer.responses[0].partition_responses[0].error_code == 0


async def _fetch(conn: RawKafka, version: int, *topic_ids: uuid.UUID) -> Any:
    partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 16}
    return await conn.call(
        Api.FETCH,
        version,
        91,
        max_wait=0,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[{"topic_id": i, "partitions": [partition]} for i in topic_ids],
        forgotten_topics_data=[],
    )


@pytest.mark.parametrize("version", [10, 11, 12])
async def test_metadata_answers_each_topic_s_id(kafka: Listening, version: int) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=2))
    async with RawKafka(kafka.port) as conn:
        answer = await conn.call(Api.METADATA, version, 1, **_metadata_topics(version, name="t"))
    (topic,) = answer.topics
    assert (topic.name, topic.error_code) == ("t", 0)
    assert topic.topic_id == kafka.server.core.topics.ids["t"]


async def test_metadata_v12_finds_a_topic_by_its_id_and_not_by_an_unknown_one(
    kafka: Listening,
) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=3))
    t_id = kafka.server.core.topics.ids["t"]
    async with RawKafka(kafka.port) as conn:
        found = await conn.call(Api.METADATA, 12, 1, **_metadata_topics(12, topic_id=t_id))
        missing = await conn.call(Api.METADATA, 12, 2, **_metadata_topics(12, topic_id=NOBODY))
    (topic,) = found.topics
    assert (topic.name, topic.topic_id, topic.error_code) == ("t", t_id, 0)
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
    (unknown,) = missing.topics
    assert (unknown.name, unknown.topic_id, unknown.error_code) == (None, NOBODY, 100)
    assert unknown.partitions == ()


@pytest.mark.parametrize("version", range(13, 19))
async def test_fetch_by_topic_id_reads_the_topic_and_an_unknown_id_is_an_error(
    kafka: Listening, version: int
) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=1))
    t_id = kafka.server.core.topics.ids["t"]
    async with RawKafka(kafka.port) as conn:
        await _produce(conn, [b"a", b"b"])
        answer = await _fetch(conn, version, NOBODY, t_id)
    assert answer.error_code == 0
    unknown, known = answer.responses
    assert unknown.topic_id == NOBODY
    assert [(p.partition_index, p.error_code) for p in unknown.partitions] == [(0, 100)]
    assert known.topic_id == t_id
    (partition,) = known.partitions
    assert (partition.error_code, partition.high_watermark) == (0, 2)
    assert partition.records  # the two records, in one batch


async def test_a_topic_made_again_has_a_new_id_and_the_old_one_is_unknown(
    kafka: Listening,
) -> None:
    async with RawKafka(kafka.port) as conn:
        made = await conn.call(
            Api.CREATE_TOPICS,
            7,
            1,
            topics=[{"name": "t", "num_partitions": 1, "replication_factor": 1}],
            timeout=5_000,
        )
        first = made.topics[0].topic_id
        assert first == kafka.server.core.topics.ids["t"]
        gone = await conn.call(
            Api.DELETE_TOPICS, 6, 2, topics=[{"name": None, "topic_id": first}], timeout=5_000
        )
        assert [(r.name, r.topic_id, r.error_code) for r in gone.responses] == [("t", first, 0)]
        assert "t" not in kafka.server.core.topics.partitions
        again = await conn.call(
            Api.DELETE_TOPICS, 6, 3, topics=[{"name": None, "topic_id": first}], timeout=5_000
        )
        assert [r.error_code for r in again.responses] == [UNKNOWN_TOPIC_ID]
        _create(kafka.server, TopicSpec(name="t", partitions=1))
        second = kafka.server.core.topics.ids["t"]
        assert second != first
        old = await _fetch(conn, 13, first)
        new = await _fetch(conn, 13, second)
    assert [p.error_code for p in old.responses[0].partitions] == [UNKNOWN_TOPIC_ID]
    assert [p.error_code for p in new.responses[0].partitions] == [0]


async def test_offsets_committed_and_fetched_by_topic_id(kafka: Listening) -> None:
    _create(kafka.server, TopicSpec(name="t", partitions=2))
    t_id = kafka.server.core.topics.ids["t"]

    def partition(i: int, offset: int) -> dict[str, Any]:
        return {"partition_index": i, "committed_offset": offset, "committed_metadata": "m"}

    async with RawKafka(kafka.port) as conn:
        committed = await conn.call(
            Api.OFFSET_COMMIT,
            10,
            1,
            group_id="g",
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                {"topic_id": t_id, "partitions": [partition(0, 5), partition(1, 7)]},
                {"topic_id": NOBODY, "partitions": [partition(0, 9)]},
            ],
        )
        asked = await conn.call(
            Api.OFFSET_FETCH,
            10,
            2,
            groups=[
                {
                    "group_id": "g",
                    "topics": [
                        {"topic_id": t_id, "partition_indexes": [0, 1]},
                        {"topic_id": NOBODY, "partition_indexes": [3]},
                    ],
                }
            ],
        )
        every = await conn.call(Api.OFFSET_FETCH, 10, 3, groups=[{"group_id": "g", "topics": None}])
    assert [
        (t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions])
        for t in committed.topics
    ] == [
        (t_id, [(0, 0), (1, 0)]),
        (NOBODY, [(0, UNKNOWN_TOPIC_ID)]),
    ]
    assert kafka.server.core.groups["g"].offsets.keys() == {("t", 0), ("t", 1)}
    for answer, expected in (
        (asked, [(t_id, [(0, 5, 0), (1, 7, 0)]), (NOBODY, [(3, -1, UNKNOWN_TOPIC_ID)])]),
        (every, [(t_id, [(0, 5, 0), (1, 7, 0)])]),
    ):
        (group,) = answer.groups
        assert group.error_code == 0
        found = [
            (
                t.topic_id,
                [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions],
            )
            for t in group.topics
        ]
        assert found == expected
