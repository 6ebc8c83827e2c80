"""The Kafka-wire fuzzer's parts: seeds written as kio writes them, mutations reproducible
from the seed, and the oracle's reading of a stream (what must be answered or closed)."""

from __future__ import annotations

import io
import random
import struct

import pytest
from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from huddle.chaos.kafka_frames import SERVED_VERSIONS, KafkaSeeds, encode
from huddle.chaos.kafka_fuzz import KafkaFrameFuzzer
from huddle.chaos.kafka_oracle import Answer, expect
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.schemas import build


@pytest.mark.parametrize(("api_key", "version"), SERVED_VERSIONS)
def test_seeds_of_every_served_version_are_written_as_kio_writes_them(
    api_key: int, version: int
) -> None:
    seeds = KafkaSeeds(random.Random(api_key * 100 + version))
    cls = load_request_schema(api_key, version)
    header_cls = cls.__header_schema__
    for _ in range(10):
        request = seeds.request(api_key, version)
        encoded = encode(api_key, version, 9, request, "fuzz")
        by_kio = io.BytesIO()
        header = header_cls(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(9),
            client_id="fuzz",
        )
        entity_writer(header_cls)(by_kio, header)
        entity_writer(cls)(by_kio, request)
        assert encoded.body == by_kio.getvalue()
        _, size = entity_reader(cls)(encoded.body, encoded.header_end)
        assert encoded.header_end + size == len(encoded.body)


def test_a_kafka_fuzz_run_is_reproducible_from_its_seed() -> None:
    first, second = KafkaFrameFuzzer(7), KafkaFrameFuzzer(7)
    frames = [first.next() for _ in range(400)]
    assert frames == [second.next() for _ in range(400)]
    assert len({f.mutation.split("+")[0] for f in frames}) == 14, "every kind of mutation"
    assert {f.api_key for f in frames} == {api for api, _ in SERVED_VERSIONS}


def _frame(api_key: int, version: int, correlation_id: int, **fields: object) -> bytes:
    request = build(load_request_schema(api_key, version), fields)
    body = encode(api_key, version, correlation_id, request, "c").body
    return struct.pack(">i", len(body)) + body


def _raw(api_key: int, version: int, correlation_id: int) -> bytes:
    """A frame of a request header (an empty client id) and nothing else."""
    body = struct.pack(">hhih", api_key, version, correlation_id, 0)
    return struct.pack(">i", len(body)) + body


BEAT = {"group_id": "g", "generation_id": 1, "member_id": "m"}


def test_the_oracle_expects_answers_in_order_then_a_close_at_a_frame_cut_short() -> None:
    stream = (
        _frame(Api.HEARTBEAT, 4, 1, **BEAT)
        + _raw(Api.API_VERSIONS, 99, 2)  # a version not served: answered in v0
        + _frame(Api.HEARTBEAT, 0, 3, **BEAT)[:-1]
    )
    expected = expect(stream)
    assert expected.answers == [Answer(Api.HEARTBEAT, 4, 1), Answer(Api.API_VERSIONS, 0, 2)]
    assert expected.ended_mid_frame
    assert expected.close_kind == "mid-frame"


def test_the_oracle_closes_after_an_api_not_served_and_expects_nothing_after() -> None:
    beat = _frame(Api.HEARTBEAT, 0, 1, **BEAT)
    expected = expect(beat + _raw(999, 0, 2) + _frame(Api.HEARTBEAT, 0, 3, **BEAT))
    assert expected.answers == [Answer(Api.HEARTBEAT, 0, 1)]
    assert expected.close_kind == "not-served"


def test_the_oracle_reads_a_null_array_where_none_is_allowed_as_unreadable() -> None:
    join = _frame(
        Api.JOIN_GROUP,
        0,
        1,
        group_id="g",
        session_timeout=6_000,
        member_id="",
        protocol_type="consumer",
        protocols=[],
    )
    nulled = join[:-4] + struct.pack(">i", -1)  # the protocols: the last field
    assert expect(join).answers == [Answer(Api.JOIN_GROUP, 0, 1)]
    assert expect(nulled).close_kind == "unreadable:JOIN_GROUP"


def test_the_oracle_expects_no_answer_to_a_produce_with_acks_0() -> None:
    produce = _frame(Api.PRODUCE, 9, 1, acks=0, timeout=1000, topic_data=[])
    expected = expect(produce + _frame(Api.API_VERSIONS, 3, 2, client_software_name="c"))
    assert expected.answers == [Answer(Api.API_VERSIONS, 3, 2)]
    assert expected.may_close
    assert expected.closes is None


def test_the_oracle_counts_what_may_rightly_hold_an_answer() -> None:
    fetch = _frame(
        Api.FETCH, 4, 1, max_wait=500, min_bytes=1, max_bytes=1, topics=[], isolation_level=0
    )
    expected = expect(fetch + fetch)
    assert expected.wait_ms == 1_000
    answered = struct.pack(">i", 1) + b"\x00" * 8  # not read: only its count matters here
    short, _ = expected.check([], closed=True)
    assert short == ["0 of 2 answers, then closed (no request to end the connection)"]
    assert expected.check([], closed=False, gave_up=True)[0] == []
    too_many, _ = expected.check([answered] * 3, closed=False)
    assert "3 responses to 2 requests" in too_many
