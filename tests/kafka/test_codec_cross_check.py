"""Two codecs agree on every (API, version) the listener advertises: a request written by
kafka-python's ``kafka.protocol`` (every field set, none at its default) is read by the
listener's own entry points (``header``, ``schemas.decode``) with the same values, and an
answer encoded by the listener's path (``KafkaCodec``, ``schemas.build``, and Metadata's
own encoding) is read by kafka-python's client parser with the same values."""

from __future__ import annotations

from typing import Any, Final

import pytest

from huddle.coordinator.kafka import header, metadata_encoding, schemas
from huddle.coordinator.kafka.answers import KafkaCodec, Slot
from huddle.coordinator.kafka.apis import SERVED, Api
from huddle.coordinator.kafka.translate import Encoded
from tests.kafka import second_codec
from tests.kafka.second_codec import REQUESTS, RESPONSES

# (API, version) the listener serves that kafka-python does not define, and why: with
# kafka-python 3.0, only KIP-848's consumer group APIs (it has no consumer protocol;
# tests/kafka/test_consumer_protocol.py checks them through kio against librdkafka's use).
# A version it lacks (an older kafka-python, a newer listener) is listed here and skipped.
_NO_KIP_848: Final = "kafka-python does not define KIP-848's consumer group APIs"
KAFKA_PYTHON_LACKS: Final[dict[tuple[Api, int], str]] = {
    (Api.CONSUMER_GROUP_HEARTBEAT, 0): _NO_KIP_848,
    (Api.CONSUMER_GROUP_HEARTBEAT, 1): _NO_KIP_848,
    (Api.CONSUMER_GROUP_DESCRIBE, 0): _NO_KIP_848,
    (Api.CONSUMER_GROUP_DESCRIBE, 1): _NO_KIP_848,
}

_MAX_RESPONSE: Final = 1 << 24


def _pairs() -> list[Any]:
    pairs = []
    for api, (low, high) in sorted(SERVED.items()):
        for version in range(low, high + 1):
            reason = KAFKA_PYTHON_LACKS.get((api, version))
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            pairs.append(pytest.param(api, version, id=f"{api.name}-v{version}", marks=marks))
    return pairs


PAIRS: Final = _pairs()


def test_every_version_kafka_python_lacks_is_listed_with_its_reason() -> None:
    lacking = {
        (api, version)
        for api, (low, high) in SERVED.items()
        for version in range(low, high + 1)
        if (span := second_codec.versions(api)) is None or not span[0] <= version <= span[1]
    }
    assert lacking == set(KAFKA_PYTHON_LACKS)


@pytest.mark.parametrize(("api", "version"), PAIRS)
def test_a_request_kafka_python_writes_is_read_with_the_same_values(api: Api, version: int) -> None:
    cls = REQUESTS[api]
    sent = second_codec.values(cls._struct, version)
    frame = second_codec.request_frame(cls, version, sent, correlation_id=4242)

    body = frame[4:]
    assert int.from_bytes(frame[:4], "big") == len(body)
    start = header.start(body)
    assert (start.api_key, start.version, start.correlation_id) == (api, version, 4242)
    client_id, offset = header.client_id_and_end(body, schemas.flexible(api, version))
    assert client_id == "cross-check"
    request = schemas.decode(api, version, body, offset)

    assert second_codec.plain_kio(request, cls._struct, version) == sent


@pytest.mark.parametrize(("api", "version"), PAIRS)
def test_an_answer_the_listener_encodes_is_parsed_by_kafka_python(api: Api, version: int) -> None:
    cls = RESPONSES[api]
    expected = second_codec.values(cls._struct, version)
    if api == Api.API_VERSIONS:  # answered in its own version, with the versions served
        expected["api_keys"] = [
            {"api_key": int(k), "min_version": low, "max_version": high}
            for k, (low, high) in sorted(SERVED.items())
        ]
    kio_values = second_codec.to_kio(
        schemas.response_class(api, version), cls._struct, version, expected
    )

    frame = _answered(api, version, 99, lambda parts: kio_values)
    correlation_id, response = second_codec.parse_response(cls, version, frame)

    assert correlation_id == 99
    assert second_codec.plain_kafka_python(cls._struct, version, response) == expected


@pytest.mark.parametrize(
    "version", [pytest.param(v, id=f"v{v}") for v in range(SERVED[Api.METADATA][1] + 1)]
)
def test_metadata_s_own_encoding_is_parsed_by_kafka_python(version: int) -> None:
    """The fast path (each partition written from one template) against kafka-python."""
    cls = RESPONSES[Api.METADATA]
    expected = second_codec.values(cls._struct, version)
    counts = [3, 0]
    leader = expected["brokers"][1]["node_id"]
    for topic, count in zip(expected["topics"], counts, strict=True):
        topic["partitions"] = []
        template = second_codec.values(cls._struct.fields["topics"], version)["partitions"][0]
        for index in range(count):
            partition = {name: _partition_value(name, index, leader) for name in template}
            topic["partitions"].append(partition)
    kio_values = second_codec.to_kio(
        schemas.response_class(Api.METADATA, version), cls._struct, version, expected
    )
    for topic in kio_values["topics"]:
        del topic["partitions"]
    leaders = [[leader] * count for count in counts]
    body = metadata_encoding.encode(version, kio_values, leaders)

    frame = _answered(Api.METADATA, version, 7, lambda parts: Encoded(body))
    correlation_id, response = second_codec.parse_response(cls, version, frame)

    assert correlation_id == 7
    assert second_codec.plain_kafka_python(cls._struct, version, response) == expected


def _partition_value(name: str, index: int, leader: int) -> Any:
    """A partition as Metadata's encoding writes it: led by ``leader``, its only replica."""
    return {
        "error_code": 0,
        "partition_index": index,
        "leader_id": leader,
        "leader_epoch": 0,
        "replica_nodes": [leader],
        "isr_nodes": [leader],
        "offline_replicas": [],
    }[name]


def _answered(api: int, version: int, correlation_id: int, answer: Any) -> bytes:
    """The frame the listener sends for a slot the wire answers with ``answer``."""
    codec = KafkaCodec(_MAX_RESPONSE)
    slot = Slot(api, version, correlation_id, answer, 0)
    codec.open(slot)
    out = bytearray()
    codec.encode_into(codec.release(slot), out)
    return bytes(out)
