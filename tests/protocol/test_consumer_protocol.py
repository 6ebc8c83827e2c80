"""Kafka's ConsumerProtocolSubscription and ConsumerProtocolAssignment, every version,
read and written by huddle's own reader, cross-checked against two codecs (kio and
kafka-python's), and bad bytes refused with a clear ``EmbeddedSchemaError``."""

from __future__ import annotations

import importlib
import io
import struct
from typing import Any

import pytest
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as PyAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as PySubscription,
)
from kio.serial import entity_reader, entity_writer

from huddle.protocol.consumer_protocol import (
    EmbeddedSchemaError,
    KafkaAssignment,
    KafkaSubscription,
    read_assignment,
    read_sticky_user_data,
    read_subscription,
    read_topics,
    write_assignment,
    write_sticky_user_data,
    write_subscription,
)

VERSIONS = (0, 1, 2, 3)


def _kio(kind: str, version: int) -> Any:
    module = importlib.import_module(f"kio.schema.consumer_protocol_{kind}.v{version}.data")
    return getattr(module, f"ConsumerProtocol{kind.title()}")


def _sub(version: int) -> KafkaSubscription:
    """A subscription with every field its version has set to something not the default."""
    return KafkaSubscription(
        version,
        ["orders", "clicks-ü"],
        b"\x00\x01user",
        [("orders", [0, 2, 5]), ("clicks-ü", [1])] if version >= 1 else [],
        7 if version >= 2 else -1,
        "rack-a" if version >= 3 else None,
    )


def _assignment(version: int) -> KafkaAssignment:
    return KafkaAssignment(version, [("orders", [0, 3]), ("clicks", [])], b"data")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_subscription_round_trips_in_every_version(version: int) -> None:
    sub = _sub(version)
    assert read_subscription(write_subscription(sub)) == sub
    assert read_topics(write_subscription(sub)) == sub.topics


@pytest.mark.parametrize("version", VERSIONS)
def test_an_assignment_round_trips_in_every_version(version: int) -> None:
    assert read_assignment(write_assignment(_assignment(version))) == _assignment(version)


@pytest.mark.parametrize("version", VERSIONS)
def test_kio_writes_the_same_bytes_and_reads_ours(version: int) -> None:
    sub = _sub(version)
    fields: dict[str, Any] = {"topics": tuple(sub.topics), "user_data": sub.user_data}
    if version >= 1:
        cls = _kio("subscription", version)
        tp = importlib.import_module(cls.__module__).TopicPartition
        fields["owned_partitions"] = tuple(
            tp(topic=t, partitions=tuple(ps)) for t, ps in sub.owned_partitions
        )
    if version >= 2:
        fields["generation_id"] = sub.generation_id
    if version >= 3:
        fields["rack_id"] = sub.rack_id
    cls = _kio("subscription", version)
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", version))
    entity_writer(cls)(buffer, cls(**fields))
    ours = write_subscription(sub)
    assert ours == buffer.getvalue()
    read, _ = entity_reader(cls)(ours, 2)
    assert read == cls(**fields)


@pytest.mark.parametrize("version", VERSIONS)
def test_kafka_python_reads_ours_and_we_read_its(version: int) -> None:
    sub = _sub(version)
    theirs = PySubscription.decode(write_subscription(sub))
    assert list(theirs.topics) == sub.topics
    assert theirs.user_data == sub.user_data
    if version >= 1:
        owned = [(t.topic, list(t.partitions)) for t in theirs.owned_partitions]
        assert owned == sub.owned_partitions
    if version >= 2:
        assert theirs.generation_id == sub.generation_id
    assert read_subscription(theirs.encode()) == sub
    assignment = _assignment(version)
    decoded = PyAssignment.decode(write_assignment(assignment))
    assigned = [(t, list(ps)) for t, ps in decoded.assigned_partitions]
    assert assigned == assignment.assigned_partitions
    written = PyAssignment(version=version, assigned_partitions=[("orders", [1])], user_data=b"")
    assert read_assignment(written.encode()) == KafkaAssignment(version, [("orders", [1])], b"")


def test_null_user_data_and_rack_are_read_as_none() -> None:
    sub = KafkaSubscription(3, ["t"], None, [], -1, None)
    assert read_subscription(write_subscription(sub)) == sub
    assert read_assignment(write_assignment(KafkaAssignment(0, [], None))).user_data is None


def test_a_newer_version_is_read_as_version_3_and_its_extra_fields_left() -> None:
    newer = b"\x00\x07" + write_subscription(_sub(3))[2:] + b"\x00\x00\x00\x09more"
    assert read_subscription(newer) == _sub(3)._replace(version=3)
    assignment = b"\x00\x05" + write_assignment(_assignment(3))[2:] + b"\x01\x02"
    assert read_assignment(assignment) == _assignment(3)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_a_clear_error(version: int) -> None:
    for data, read in (
        (write_subscription(_sub(version)), read_subscription),
        (write_assignment(_assignment(version)), read_assignment),
    ):
        for cut in range(len(data)):
            with pytest.raises(EmbeddedSchemaError, match=r"not a Kafka \w+: .* at byte \d+"):
                read(data[:cut])


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\xff\xfe" + b"\x00" * 8, "version -2 is not one"),
        (b"\x00\x00\x7f\xff\xff\xff", "topics counts 2147483647, more than the bytes left"),
        (b"\x00\x00\xff\xff\xff\xff", "topics counts -1"),
        (b"\x00\x00\x00\x00\x00\x01\xff\xfe", "a topic has length -2"),
        (b"\x00\x00\x00\x00\x00\x01\x00\x02\xc3\x28\xff\xff\xff\xff", "a topic is not UTF-8"),
        (b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xfe", "user data has length -2"),
        (b"\x00\x00\x00\x00\x00\x01\xff\xff", "a topic has length -1"),  # names are not null
    ],
)
def test_bad_subscription_bytes_say_what_is_wrong(data: bytes, says: str) -> None:
    with pytest.raises(EmbeddedSchemaError, match=says):
        read_subscription(data)


def test_bad_assignment_bytes_say_what_is_wrong() -> None:
    huge_ids = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x10\x00\x00"
    with pytest.raises(EmbeddedSchemaError, match="assigned partitions ids counts 1048576"):
        read_assignment(huge_ids)


def test_a_version_out_of_range_is_not_written() -> None:
    with pytest.raises(EmbeddedSchemaError, match="versions 0-3, not 4"):
        write_subscription(_sub(3)._replace(version=4))
    with pytest.raises(EmbeddedSchemaError, match="versions 0-3, not -1"):
        write_assignment(_assignment(0)._replace(version=-1))


def test_sticky_user_data_is_read_as_java_and_kafka_python_write_it() -> None:
    from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData

    java_v1 = b"\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x05"
    assert read_sticky_user_data(java_v1 + b"\x00\x00\x00\x07") == ([("t", [3, 5])], 7)
    assert read_sticky_user_data(java_v1) == ([("t", [3, 5])], -1)  # v0: no generation
    assert write_sticky_user_data([("t", [3, 5])], 7) == java_v1 + b"\x00\x00\x00\x07"
    theirs = StickyAssignorUserData(previous_assignment=[("t", [0, 1])], generation=4)
    assert read_sticky_user_data(theirs.encode()) == ([("t", [0, 1])], 4)


@pytest.mark.parametrize("data", [b"", b"\x01\x02", b"\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x09"])
def test_bad_sticky_user_data_is_a_clear_error(data: bytes) -> None:
    with pytest.raises(EmbeddedSchemaError, match="not a Kafka StickyAssignorUserData"):
        read_sticky_user_data(data)
