"""A request walked by its schema before kio reads it (``huddle.coordinator.kafka.walk``):
what Kafka's reader refuses is refused, nothing a client may send is, and unknown tagged
fields are dropped while known ones are kept."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.serial import entity_reader

from huddle.chaos.kafka_frames import SERVED_VERSIONS, Encoded, KafkaSeeds, encode
from huddle.coordinator.kafka import walk
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.schemas import build


@pytest.mark.parametrize(("api_key", "version"), SERVED_VERSIONS)
def test_every_well_formed_request_passes(api_key: int, version: int) -> None:
    seeds = KafkaSeeds(random.Random(version))
    cls = load_request_schema(api_key, version)
    for _ in range(20):
        encoded = encode(api_key, version, 1, seeds.request(api_key, version), "c")
        walk.check(cls, encoded.body, encoded.header_end)


def _join(version: int) -> Encoded:
    fields: dict[str, Any] = {
        "group_id": "gg",
        "session_timeout": 6_000,
        "rebalance_timeout": 6_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }
    return encode(Api.JOIN_GROUP, version, 1, build(load_request_schema(11, version), fields), "c")


def _with(encoded: Encoded, kind: str, value: bytes, nth: int = 0) -> bytes:
    prefix = [p for p in encoded.prefixes if p.kind == kind and p.offset >= encoded.header_end][nth]
    return encoded.body[: prefix.offset] + value + encoded.body[prefix.offset + prefix.width :]


BAD = {
    "a null array (legacy)": (0, "int32", struct.pack(">i", -1), 0),
    "a null array (compact)": (9, "uvarint", b"\x00", 4),
    "2^31 items (legacy)": (0, "int32", struct.pack(">i", 2**31 - 1), 0),
    "2^32 items (compact)": (9, "uvarint", walk.uvarint(2**32 - 1), 4),
    "a string past the end": (0, "int16", struct.pack(">h", 32_767), 0),
    "a length of -2": (0, "int16", struct.pack(">h", -2), 0),
    "a varint of 6 bytes": (9, "uvarint", b"\xff" * 5 + b"\x01", 4),
}


@pytest.mark.parametrize("case", list(BAD))
def test_what_kafka_refuses_is_refused(case: str) -> None:
    version, kind, value, nth = BAD[case]
    encoded = _join(version)
    body = _with(encoded, kind, value, nth)
    with pytest.raises(walk.RequestShapeError):
        walk.check(load_request_schema(Api.JOIN_GROUP, version), body, encoded.header_end)


def test_unknown_tags_are_dropped_and_known_ones_kept() -> None:
    cls = load_request_schema(Api.FETCH, 12)
    fields: dict[str, Any] = {
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [],
        "forgotten_topics_data": [],
        "rack_id": "",
        "cluster_id": "c1",  # tag 0: known
    }
    encoded = encode(Api.FETCH, 12, 1, build(cls, fields), "c")
    tags = [p for p in encoded.prefixes if p.kind == "tags"][-1]  # the request's own
    assert encoded.body[tags.offset] == 1  # the cluster id
    unknown = walk.uvarint(99) + walk.uvarint(2) + b"xy"
    body = encoded.body[: tags.offset] + b"\x02" + encoded.body[tags.offset + 1 :] + unknown
    with pytest.raises(KeyError):
        entity_reader(cls)(body, encoded.header_end)
    stripped = walk.without_unknown(cls, body, encoded.header_end)
    assert stripped == encoded.body
    request: Any = entity_reader(cls)(stripped, encoded.header_end)[0]
    assert request.cluster_id == "c1"
