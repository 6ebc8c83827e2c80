"""The embedded protocol: what members tell the leader and what the leader tells them.

The coordinator carries these as opaque bytes (JoinGroup protocol metadata, SyncGroup
assignments); it reads only the subscribed topics of a ``consumer`` group, for offset
retention, as Kafka's coordinator does (``subscribed_topics``, which reads Kafka clients'
subscriptions too). Both are msgpack maps with a ``version``: a newer
member may add fields, an older one ignores fields it does not know and gets defaults for
fields it does not send, so mixed versions interoperate.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

import msgspec

from huddle.protocol.errors import HuddleError

SUBSCRIPTION_VERSION = 2
ASSIGNMENT_VERSION = 2
# The protocol type of groups whose members send a ``Subscription`` (as Kafka's consumer
# protocol type): the coordinator reads their subscribed topics, for offset retention.
CONSUMER_PROTOCOL_TYPE = "consumer"


class TopicPartition(NamedTuple):
    """One resource: partition ``partition`` of topic ``topic``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class TopicPartitions(msgspec.Struct, frozen=True, kw_only=True):
    """Partitions of one topic, as they travel."""

    topic: str
    partitions: list[int]


class TaskLag(msgspec.Struct, frozen=True, array_like=True):
    """How far a member's local state for a task (a partition) is behind (v2)."""

    topic: str
    partition: int
    lag: int


class Subscription(msgspec.Struct, frozen=True, kw_only=True):
    """Member -> leader, inside JoinGroup metadata."""

    version: int = SUBSCRIPTION_VERSION
    topics: list[str]
    owned_partitions: list[TopicPartitions] = msgspec.field(default_factory=list)
    generation: int = -1  # the generation in which the member owned them; -1: none
    user_data: bytes = b""
    # v2: the lag of the member's local state per task; a task not listed has none here.
    task_lags: list[TaskLag] = msgspec.field(default_factory=list)

    @property
    def owned(self) -> frozenset[TopicPartition]:
        return flatten(self.owned_partitions)

    @property
    def lags(self) -> dict[TopicPartition, int]:
        return {TopicPartition(t.topic, t.partition): t.lag for t in self.task_lags}


class Assignment(msgspec.Struct, frozen=True, kw_only=True):
    """Leader -> member, inside SyncGroup. ``assigned`` is everything the member owns after
    this round; ``revoked`` what the round took away from it (for cooperative protocols);
    a positive ``scheduled_rebalance_delay_ms`` asks the member to rejoin after that delay."""

    version: int = ASSIGNMENT_VERSION
    assigned: list[TopicPartitions] = msgspec.field(default_factory=list)
    revoked: list[TopicPartitions] = msgspec.field(default_factory=list)
    scheduled_rebalance_delay_ms: int = 0
    user_data: bytes = b""
    # v2 (KIP-441): replicas of tasks' state to keep up to date, not to process.
    standby: list[TopicPartitions] = msgspec.field(default_factory=list)
    warmup: list[TopicPartitions] = msgspec.field(default_factory=list)

    @property
    def partitions(self) -> frozenset[TopicPartition]:
        return flatten(self.assigned)

    @property
    def standby_partitions(self) -> frozenset[TopicPartition]:
        return flatten(self.standby)

    @property
    def warmup_partitions(self) -> frozenset[TopicPartition]:
        return flatten(self.warmup)

    @property
    def revoked_partitions(self) -> frozenset[TopicPartition]:
        return flatten(self.revoked)


class EmbeddedSchemaError(HuddleError, ValueError):
    """Bytes that are not a Subscription or Assignment this member can read."""


_KAFKA_COUNT = struct.Struct(">i")
_KAFKA_LENGTH = struct.Struct(">h")
_encoder = msgspec.msgpack.Encoder()
_subscription = msgspec.msgpack.Decoder(Subscription)
_assignment = msgspec.msgpack.Decoder(Assignment)


def encode(value: Subscription | Assignment) -> bytes:
    return _encoder.encode(value)


def decode_subscription(data: bytes) -> Subscription:
    try:
        return _subscription.decode(data)
    except msgspec.MsgspecError as exc:
        raise EmbeddedSchemaError(f"not a subscription: {exc}") from exc


def subscribed_topics(data: bytes) -> list[str]:
    """The topics a ``consumer`` member subscribes to: from huddle's ``Subscription``
    (msgpack, a map), or from Kafka's ConsumerProtocolSubscription, which Kafka clients
    send (a big-endian int16 version, then an int32 count of int16-length UTF-8 topic
    names; what follows them is not read)."""
    if data[:1] != b"\x00":
        return list(decode_subscription(data).topics)
    try:
        (count,) = _KAFKA_COUNT.unpack_from(data, 2)
        if not 0 <= count <= len(data):
            raise EmbeddedSchemaError(f"not a subscription: {count} topics")
        topics, offset = [], 6
        for _ in range(count):
            (size,) = _KAFKA_LENGTH.unpack_from(data, offset)
            offset += 2
            if size < 0 or offset + size > len(data):
                raise EmbeddedSchemaError("not a subscription: a topic name runs past the end")
            topics.append(data[offset : offset + size].decode("utf-8"))
            offset += size
    except (struct.error, UnicodeDecodeError) as exc:
        raise EmbeddedSchemaError(f"not a subscription: {exc}") from exc
    return topics


def decode_assignment(data: bytes) -> Assignment:
    """Empty bytes are an empty assignment (what the coordinator gives members the
    leader left out)."""
    if not data:
        return Assignment()
    try:
        return _assignment.decode(data)
    except msgspec.MsgspecError as exc:
        raise EmbeddedSchemaError(f"not an assignment: {exc}") from exc


def grouped(partitions: Iterable[TopicPartition]) -> list[TopicPartitions]:
    """Partitions as they travel: per topic, sorted."""
    by_topic: defaultdict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    return [TopicPartitions(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items())]


def flatten(topics: Iterable[TopicPartitions]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t.topic, p) for t in topics for p in t.partitions)
