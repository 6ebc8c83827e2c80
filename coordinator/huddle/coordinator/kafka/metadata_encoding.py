"""Metadata answers, encoded without writing each partition through kio.

A Metadata answer lists every partition of every topic asked for, and kio's writer (pure
Python) takes about 10 µs for each: a topic of 10,000 partitions held the event loop, and
every other member's heartbeat, for 100 ms per Metadata. Here every partition of a topic is
alike on this one broker but for its index: one partition is written by kio, and the
others are that one with the index changed. The rest of the answer (brokers, each topic
without its partitions) is kio's own encoding, cut where its partition arrays go; the
result is the same bytes as kio's encoding of the whole (``tests/kafka/test_metadata_encoding``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, Final

from huddle.coordinator.kafka import schemas
from huddle.coordinator.kafka.walk import FIXED_SIZES, fields, uvarint

METADATA: Final = 3
_INDEX: Final = struct.Struct(">i")


def encode(version: int, values: Mapping[str, Any], leaders: Sequence[Sequence[int]]) -> bytes:
    """The Metadata response body of ``version``: ``values`` as ``schemas.build`` takes
    them, each topic's ``partitions`` left out; the i-th topic has ``len(leaders[i])``
    partitions, partition ``p`` led by node ``leaders[i][p]``, its only replica."""
    cls = schemas.response_class(METADATA, version)
    topic_cls = _entity(cls, "topics")
    flexible = bool(cls.__flexible__)
    topics = values.get("topics", ())
    head, end = _around(cls, "topics", {**values, "topics": []})
    out = [head, _count(len(topics), flexible)]
    for topic, led in zip(topics, leaders, strict=True):
        topic_head, topic_end = _around(topic_cls, "partitions", {**topic, "partitions": []})
        out.append(topic_head)
        out.append(_count(len(led), flexible))
        if len(set(led)) <= 1:  # one leader (or none): the same template throughout
            before, after = _split(version, led[0]) if led else (b"", b"")
            out.extend(before + _INDEX.pack(i) + after for i in range(len(led)))
        else:
            for i, leader in enumerate(led):
                before, after = _split(version, leader)
                out.append(before + _INDEX.pack(i) + after)
        out.append(topic_end)
    out.append(end)
    return b"".join(out)


def partitions_bytes(version: int, count: int) -> int:
    """What ``count`` partitions take in a Metadata answer of ``version`` (each the same)."""
    template, _ = _template(version, 0)
    return count * len(template)


def _count(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else _INDEX.pack(n)


def _entity(cls: Any, name: str) -> Any:
    (field,) = [f for f in fields(cls) if f.name == name]
    return field.entity


def _around(cls: Any, array: str, values: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """kio's encoding of ``values`` (``array`` empty), cut before and after that array."""
    whole = schemas.entity_bytes(schemas.build(cls, values))
    after = _after(cls, array)
    empty = len(_count(0, bool(cls.__flexible__)))
    return whole[: len(whole) - after - empty], whole[len(whole) - after :]


@cache
def _after(cls: Any, array: str) -> int:
    """The bytes after ``array`` in an encoding of ``cls``: fixed-size fields only (an
    authorized-operations field), then an empty tag section if flexible."""
    names = [f.name for f in fields(cls)]
    later = [f for f in fields(cls)[names.index(array) + 1 :] if f.tag is None]
    size = sum(FIXED_SIZES[f.kafka_type or ""] for f in later)
    return size + (1 if cls.__flexible__ else 0)


@cache
def _split(version: int, leader: int) -> tuple[bytes, bytes]:
    """A partition led by ``leader``: its bytes before its index, and after."""
    template, at = _template(version, leader)
    return template[:at], template[at + _INDEX.size :]


@cache
def _template(version: int, leader: int) -> tuple[bytes, int]:
    """One partition (index 0) as kio writes it, and where its index is."""
    cls = _entity(_entity(schemas.response_class(METADATA, version), "topics"), "partitions")
    values = {
        "error_code": 0,
        "partition_index": 0,
        "leader_id": leader,
        "leader_epoch": 0,
        "replica_nodes": [leader],
        "isr_nodes": [leader],
        "offline_replicas": [],
    }
    encoded = schemas.entity_bytes(schemas.build(cls, values))
    names = [f.name for f in fields(cls)]
    before = fields(cls)[: names.index("partition_index")]
    return encoded, sum(FIXED_SIZES[f.kafka_type or ""] for f in before)
