"""Metadata answers encoded fast are kio's own bytes, in every version served, and fast."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kio.serial import entity_reader

from huddle.coordinator.kafka import metadata_encoding, schemas
from huddle.coordinator.kafka.apis import SERVED, Api

LOW, HIGH = SERVED[Api.METADATA]
TOPICS = [("a", 0, 3), ("unknown", 3, 0), ("b", 0, 0), ("c", 0, 1)]  # name, error, partitions


def _values(topics: list[tuple[str, int, int]], node: int) -> dict[str, Any]:
    return {
        "brokers": [{"node_id": node, "host": "h", "port": 9092}],
        "cluster_id": "huddle",
        "controller_id": node,
        "topics": [
            {
                "error_code": code,
                "name": name,
                "is_internal": False,
                "topic_authorized_operations": -(2**31),
            }
            for name, code, _ in topics
        ],
        "cluster_authorized_operations": -(2**31),
    }


def _by_kio(
    version: int,
    topics: list[tuple[str, int, int]],
    node: int,
    leaders: list[list[int]] | None = None,
) -> bytes:
    values = _values(topics, node)
    if leaders is None:
        leaders = [[node] * count for *_, count in topics]
    for topic, led in zip(values["topics"], leaders, strict=True):
        topic["partitions"] = [
            {
                "error_code": 0,
                "partition_index": i,
                "leader_id": leader,
                "leader_epoch": 0,
                "replica_nodes": [leader],
                "isr_nodes": [leader],
                "offline_replicas": [],
            }
            for i, leader in enumerate(led)
        ]
    cls = schemas.response_class(Api.METADATA, version)
    return schemas.entity_bytes(schemas.build(cls, values))


@pytest.mark.parametrize("version", range(LOW, HIGH + 1))
@pytest.mark.parametrize("topics", [TOPICS, [], [("big", 0, 300)]], ids=["mixed", "none", "big"])
def test_the_fast_encoding_is_kio_s_encoding(version: int, topics: list[Any]) -> None:
    leaders = [[7] * count for *_, count in topics]
    fast = metadata_encoding.encode(version, _values(topics, 7), leaders)
    assert fast == _by_kio(version, topics, 7)


@pytest.mark.parametrize("version", range(LOW, HIGH + 1))
def test_partitions_led_by_several_brokers_are_kio_s_encoding(version: int) -> None:
    """In a cluster each partition names its own leader."""
    leaders = [[3, 1, 1, 2, 3], [], [2]]
    fast = metadata_encoding.encode(version, _values(TOPICS[:3], 1), leaders)
    assert fast == _by_kio(version, TOPICS[:3], 1, leaders)


def _best_of_3(encode: Callable[[], bytes]) -> float:
    spent = []
    for _ in range(3):
        started = time.perf_counter()
        encode()
        spent.append(time.perf_counter() - started)
    return min(spent)


def test_a_topic_of_10000_partitions_is_encoded_many_times_faster_than_by_kio() -> None:
    topics = [("t", 0, 10_000)]
    values = _values(topics, 0)
    fast = _best_of_3(lambda: metadata_encoding.encode(HIGH, values, [[0] * 10_000]))
    by_kio = _best_of_3(lambda: _by_kio(HIGH, topics, 0))
    assert by_kio > 5 * fast, f"{fast * 1000:.1f} ms, kio's {by_kio * 1000:.1f} ms"
    body = metadata_encoding.encode(HIGH, values, [[0] * 10_000])
    response, size = entity_reader(schemas.response_class(Api.METADATA, HIGH))(body, 0)
    assert size == len(body)
    assert [p.partition_index for p in response.topics[0].partitions] == list(range(10_000))
