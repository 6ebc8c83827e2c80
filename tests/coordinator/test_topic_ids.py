"""Topic ids (``huddle.coordinator.topic_ids``): random version 4 UUIDs, never one Kafka
reserves or avoids, never two topics' at once; a deleted topic's name made again gets a
new one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from huddle.coordinator.topic_ids import derived_topic_id, kafka_text, new_topic_id
from huddle.coordinator.topics import TopicRegistry
from huddle.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    TopicSpec,
)

DASHED = uuid.UUID(bytes=bytes([0xF8]) + bytes(15), version=4)  # its text starts with "-"


def test_a_new_id_is_version_4_and_never_one_kafka_avoids(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kafka_text(DASHED).startswith("-")
    good = uuid.UUID("9f0a4c44-6b1e-4d3a-8c55-0c1c2f3a4b5d")
    draws = iter([DASHED, good])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    assert new_topic_id() == good


def test_ids_are_random_and_written_as_kafka_writes_them() -> None:
    drawn = {new_topic_id() for _ in range(1_000)}
    assert len(drawn) == 1_000
    assert all(i.version == 4 and i.int > 1 for i in drawn)
    assert kafka_text(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"  # as Kafka's ZERO_UUID


def test_a_derived_id_is_the_same_for_one_creation_and_another_for_the_next() -> None:
    assert derived_topic_id("t", 7) == derived_topic_id("t", 7)
    assert derived_topic_id("t", 7) != derived_topic_id("t", 9)
    assert derived_topic_id("t", 7) != derived_topic_id("u", 7)
    assert all(
        derived_topic_id("t", n).version == 4
        and not kafka_text(derived_topic_id("t", n)).startswith("-")
        for n in range(2_000)
    )


def test_no_two_topics_share_an_id_even_if_a_draw_repeats() -> None:
    same = uuid.UUID("9f0a4c44-6b1e-4d3a-8c55-0c1c2f3a4b5d")
    other = uuid.UUID("1f0a4c44-6b1e-4d3a-8c55-0c1c2f3a4b5d")
    draws: Iterator[uuid.UUID] = iter([same, same, same, other])
    registry = TopicRegistry(10, lambda: next(draws))
    specs = [TopicSpec(name="a", partitions=1), TopicSpec(name="b", partitions=1)]
    answer, _ = registry.change(CreateTopicsRequest(topics=specs[:1]), 1)
    answer, _ = registry.change(CreateTopicsRequest(topics=specs[1:]), 2)
    assert isinstance(answer, CreateTopicsResponse)
    assert registry.ids == {"a": same, "b": other}
    assert registry.names == {same: "a", other: "b"}


def test_a_topic_deleted_and_created_again_gets_a_new_id() -> None:
    registry = TopicRegistry(10)
    create = CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)])
    _, changed = registry.change(create, 1)
    first = registry.ids["t"]
    assert [t.topic_id for t in changed] == [first]
    _, changed = registry.change(DeleteTopicsRequest(topics=["t"]), 2)
    assert [t.topic_id for t in changed] == [None]
    assert registry.ids == {}
    assert registry.names == {}
    registry.change(create, 3)
    assert registry.ids["t"] != first
    assert registry.names == {registry.ids["t"]: "t"}
