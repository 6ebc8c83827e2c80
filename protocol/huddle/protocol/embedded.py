"""The embedded protocol: what members tell the leader and what the leader tells them.

The coordinator carries these as opaque bytes (JoinGroup protocol metadata, SyncGroup
assignments); it reads only the subscribed topics of a ``consumer`` group, for offset
retention, as Kafka's coordinator does (``subscribed_topics``, which reads Kafka clients'
subscriptions too). huddle's own are msgpack maps with a ``version``: a newer
member may add fields, an older one ignores fields it does not know and gets defaults for
fields it does not send, so mixed versions interoperate.

Two formats travel in one ``consumer`` group: huddle's (``HUDDLE``) and Kafka's
ConsumerProtocolSubscription and ConsumerProtocolAssignment (``KAFKA``, versions 0-3, in
``huddle.protocol.consumer_protocol``), which Kafka clients speak. ``decode_subscription``
and ``decode_assignment`` read either (a Kafka one starts with the high byte of its int16
version, 0; a msgpack map never does); ``spoken`` says which a member sent, so a leader
answers each member in its own (``encode_assignment``); ``encode_subscription`` writes a
member's in the format it is configured to speak. Kafka's format has no room for huddle's
extras: a subscription's task lags and an assignment's revoked partitions, scheduled
rebalance delay, standbys and warm-ups are left out of it; a member reading a Kafka
assignment takes as revoked what it claimed and was not assigned (KIP-429).
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable
from typing import Literal, NamedTuple

import msgspec

from huddle.protocol import consumer_protocol as kafka
from huddle.protocol.consumer_protocol import EmbeddedSchemaError

__all__ = ["EmbeddedSchemaError"]  # re-exported: defined with the reader of Kafka's format

SUBSCRIPTION_VERSION = 2
ASSIGNMENT_VERSION = 2
# The protocol type of groups whose members send a ``Subscription`` (as Kafka's consumer
# protocol type): the coordinator reads their subscribed topics, for offset retention.
CONSUMER_PROTOCOL_TYPE = "consumer"

EmbeddedFormat = Literal["huddle", "kafka"]
HUDDLE: EmbeddedFormat = "huddle"
KAFKA: EmbeddedFormat = "kafka"
FORMATS: tuple[EmbeddedFormat, ...] = (HUDDLE, KAFKA)


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


class Speaks(NamedTuple):
    """The format a member's subscription came in, and its version: its assignment goes
    back in the same (a Kafka member gets the version it sent, at most 3)."""

    format: EmbeddedFormat
    version: int


HUDDLE_SPEAKS = Speaks(HUDDLE, ASSIGNMENT_VERSION)
_encoder = msgspec.msgpack.Encoder()
_subscription = msgspec.msgpack.Decoder(Subscription)
_assignment = msgspec.msgpack.Decoder(Assignment)


def encode(value: Subscription | Assignment) -> bytes:
    return _encoder.encode(value)


def format_of(data: bytes) -> EmbeddedFormat:
    """Which format ``data`` is in (empty bytes, an empty assignment, are huddle's)."""
    return KAFKA if data[:1] == b"\x00" else HUDDLE


def spoken(metadata: bytes) -> Speaks:
    """The format and version of a member's subscription, read from its first bytes only
    (one that cannot be read whole subscribes to nothing, so its answer is empty anyway)."""
    if format_of(metadata) == HUDDLE:
        return HUDDLE_SPEAKS
    (version,) = struct.unpack_from(">h", metadata.ljust(2, b"\x00"))
    return Speaks(KAFKA, min(max(version, 0), kafka.HIGHEST_VERSION))


def encode_subscription(sub: Subscription, fmt: EmbeddedFormat = HUDDLE) -> bytes:
    """``sub`` in ``fmt``; Kafka's is version 3, without task lags and with no rack."""
    if fmt == HUDDLE:
        return encode(sub)
    owned = [(t.topic, t.partitions) for t in sub.owned_partitions]
    return kafka.write_subscription(
        kafka.KafkaSubscription(
            kafka.HIGHEST_VERSION, list(sub.topics), sub.user_data, owned, sub.generation
        )
    )


def encode_assignment(assignment: Assignment, speaks: Speaks = HUDDLE_SPEAKS) -> bytes:
    """``assignment`` in the format (and, Kafka's, the version) its member speaks; Kafka's
    keeps the assigned partitions and the user data only."""
    if speaks.format == HUDDLE:
        return encode(assignment)
    assigned = [(t.topic, t.partitions) for t in assignment.assigned]
    return kafka.write_assignment(
        kafka.KafkaAssignment(speaks.version, assigned, assignment.user_data)
    )


def _grouped(partitions: kafka.Partitions) -> list[TopicPartitions]:
    return grouped(TopicPartition(t, p) for t, ps in partitions for p in ps)


def decode_subscription(data: bytes) -> Subscription:
    """huddle's Subscription, or Kafka's in any version (as one of huddle's)."""
    if format_of(data) == KAFKA:
        k = kafka.read_subscription(data)
        return Subscription(
            topics=k.topics,
            owned_partitions=_grouped(k.owned_partitions),
            generation=k.generation_id,
            user_data=k.user_data or b"",
        )
    try:
        return _subscription.decode(data)
    except msgspec.MsgspecError as exc:
        raise EmbeddedSchemaError(f"not a subscription: {exc}") from exc


def subscribed_topics(data: bytes) -> list[str]:
    """The topics a ``consumer`` member subscribes to: from huddle's ``Subscription``
    (msgpack, a map), or from Kafka's ConsumerProtocolSubscription, which Kafka clients
    send (a big-endian int16 version, then an int32 count of int16-length UTF-8 topic
    names; what follows them is not read)."""
    if format_of(data) == HUDDLE:
        return list(decode_subscription(data).topics)
    return kafka.read_topics(data)


def decode_assignment(data: bytes, claimed: frozenset[TopicPartition] = frozenset()) -> Assignment:
    """Empty bytes are an empty assignment (what the coordinator gives members the
    leader left out). Kafka's names nothing revoked: its revoked partitions are those of
    ``claimed`` (what the member's join said it owned) not assigned, as KIP-429's members
    work them out."""
    if not data:
        return Assignment()
    if format_of(data) == KAFKA:
        k = kafka.read_assignment(data)
        assigned = _grouped(k.assigned_partitions)
        revoked = grouped(claimed - flatten(assigned))
        return Assignment(assigned=assigned, revoked=revoked, user_data=k.user_data or b"")
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
