"""The embedded schemas: round trips, and members of different versions reading each other."""

from __future__ import annotations

import msgspec
import pytest

from huddle.protocol.embedded import (
    Assignment,
    EmbeddedSchemaError,
    Subscription,
    TaskLag,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode,
    grouped,
)

TP = TopicPartition


def test_subscription_and_assignment_round_trip() -> None:
    owned = {TP("b", 2), TP("a", 1), TP("a", 0)}
    sub = Subscription(topics=["a", "b"], owned_partitions=grouped(owned), generation=4)
    back = decode_subscription(encode(sub))
    assert back == sub
    assert back.owned == owned
    assert [t.topic for t in back.owned_partitions] == ["a", "b"]  # grouped, sorted
    assignment = Assignment(
        assigned=grouped([TP("a", 0)]),
        revoked=grouped([TP("a", 1)]),
        scheduled_rebalance_delay_ms=5,
    )
    again = decode_assignment(encode(assignment))
    assert again.partitions == {TP("a", 0)}
    assert again.revoked_partitions == {TP("a", 1)}
    assert again.scheduled_rebalance_delay_ms == 5


class SubscriptionV3(msgspec.Struct, kw_only=True):
    """What a later member might send: a version with a field this one does not know."""

    version: int = 3
    topics: list[str]
    rack: str = ""


class SubscriptionV0(msgspec.Struct, kw_only=True):
    """A minimal older shape: only topics."""

    topics: list[str]


def test_a_newer_subscription_is_read_by_an_older_member() -> None:
    newer = msgspec.msgpack.encode(SubscriptionV3(topics=["t"], rack="eu-1"))
    read = decode_subscription(newer)
    assert read.version == 3
    assert read.topics == ["t"]
    assert read.owned == frozenset()


def test_an_older_subscription_gets_defaults() -> None:
    read = decode_subscription(msgspec.msgpack.encode(SubscriptionV0(topics=["t"])))
    assert read.generation == -1
    assert read.user_data == b""
    assert read.lags == {}  # a version 1 member reports no task lags


def test_task_lags_and_standby_travel() -> None:
    sub = Subscription(topics=["t"], task_lags=[TaskLag("t", 0, 12), TaskLag("t", 3, 0)])
    assert decode_subscription(encode(sub)).lags == {TP("t", 0): 12, TP("t", 3): 0}
    assignment = Assignment(standby=grouped([TP("t", 1)]), warmup=grouped([TP("t", 2)]))
    back = decode_assignment(encode(assignment))
    assert back.standby_partitions == {TP("t", 1)}
    assert back.warmup_partitions == {TP("t", 2)}


def test_garbage_is_a_clear_error_and_empty_bytes_an_empty_assignment() -> None:
    with pytest.raises(EmbeddedSchemaError, match="not a subscription"):
        decode_subscription(b"\xc1garbage")
    with pytest.raises(EmbeddedSchemaError, match="not an assignment"):
        decode_assignment(msgspec.msgpack.encode({"assigned": "nope"}))
    assert decode_assignment(b"").partitions == frozenset()
