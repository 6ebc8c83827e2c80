"""What the coordinator keeps across restarts, as records: pure encoding, no files.

Kafka keeps committed offsets in ``__consumer_offsets`` so that a coordinator restart or
fail-over loses none of them. huddle keeps them, and the topics, in a journal (see
``huddle.coordinator.storage.journal``) of these records:

- ``TopicRecord(name, partitions, topic_id)``: a topic created or altered, with the id it
  was given at its creation (``huddle.coordinator.topic_ids``; None: written before topics
  had ids, the topic is given one when the data dir is loaded, and that is recorded);
  ``partitions`` 0: deleted;
- ``OffsetRecord(group_id, topic, partition, offset, metadata, committed_ms,
  incarnation)``: an accepted commit, with when it was committed (for retention) and, in a
  cluster, which incarnation of its partition it was committed to;
  ``offset`` -1 (``DELETED``): the offset was deleted with its group;
- ``GroupRecord(group_id, generation, ..., current_state_ms, topics_digest,
  members_removed)``: a group as a rebalance left it (Stable, with its members, their
  subscriptions and assignments) or as it emptied (no members), and since when it has been
  so (Kafka's GroupMetadata record and its ``currentStateTimestamp``), what the topics
  were when its generation formed, and whether members were removed since (then whoever
  loads it rebalances it); ``generation`` -1 (``DELETED``): the group was deleted;
- ``SessionRecord(longest_ms)``: written by versions that kept no groups: the longest
  session timeout any member was granted. Such a journal's groups are not in it, and a
  member of them may count its session alive for that long after a restart: no generation
  forms before then (the restart fence). ``SessionRecord(0)``: that fence has been served,
  nothing is left to wait for. This version writes one asking for a fence only at the head
  of a snapshot, before any group record: one after group records (an older version served
  the data dir after them, or ``huddle data repair`` skipped damage) makes a start load
  those groups forgotten (``huddle.coordinator.loading``).

- ``ConsumerGroupRecord(group_id, group_epoch, target_epoch, subscribed_partitions, ...)`` and
  ``ConsumerMemberRecord(group_id, member_id, member_epoch, ...)``: a consumer-protocol
  group (KIP-848) and each of its members, with its epochs, subscription, assigned and
  pending-revocation partitions and target assignment, written whenever they change
  (``huddle.coordinator.storage.kept_consumer_groups``); a group record with
  ``group_epoch`` -1 deletes the group and its members, a member record with
  ``member_epoch`` -1 the member.

Replaying them in order rebuilds the state (``Coordinator.restore``, then
``Coordinator.start``): topics, offsets, and every group Stable in its kept generation with
a fresh session for each member (``huddle.coordinator.storage.kept_groups``), as a cluster node
taking a shard over loads them. Records only ever gain trailing fields with defaults: an
older reader ignores what it does not know, a newer one gets the defaults for what an older
writer did not write.

On disk every record is a frame: a 4-byte big-endian length of the body, a 4-byte CRC-32
of the body, then the body (msgpack, array-like). ``decode_frames`` stops at the first
frame that is cut short, fails its checksum or cannot be read, and says whether that is
only the torn tail a crash in the middle of a write leaves, or damage with intact frames
after it. A frame whose length claims more than the file holds is a torn tail only when no
whole, checksummed record starts anywhere after its header (nor is its own body whole): a
damaged length must not pass for a tear and drop the records after it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from uuid import UUID

import msgspec

HEADER = struct.Struct(">II")  # body length, CRC-32 of the body


class TopicRecord(msgspec.Struct, tag="t", array_like=True, frozen=True):
    name: str
    partitions: int  # 0: deleted
    topic_id: UUID | None = None  # None: not known (an older record, or a deletion)


class OffsetRecord(msgspec.Struct, tag="o", array_like=True, frozen=True):
    group_id: str
    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    # when the offset was committed, wall clock ms since the epoch (Kafka's commitTimestamp;
    # 0: not known, a record from before retention, which counts from when it is first
    # looked at): retention counts from it (huddle.coordinator.retention)
    committed_ms: int = 0
    # a cluster's: the incarnation of its topic's partition it was committed to (an etcd
    # revision, huddle.coordinator.cluster.topics); 0: not known (a data dir's, or older)
    incarnation: int = 0


class SessionRecord(msgspec.Struct, tag="s", array_like=True, frozen=True):
    longest_ms: int


class KeptMember(msgspec.Struct, array_like=True, frozen=True):
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]  # (name, metadata): the member's subscriptions
    assignment: bytes
    # who its client authenticated as: only that client moves the member to a new
    # connection (None: a record kept before principals were)
    principal: str | None = None
    # the digest of the incarnation token its client presented (``effects.incarnation_digest``,
    # never the token): only a connection of its principal presenting the same token moves
    # the member (None:
    # it presented none, or a record kept before tokens were: by principal and client id)
    incarnation: bytes | None = None


class GroupRecord(msgspec.Struct, tag="g", array_like=True, frozen=True):
    """A group at the end of a rebalance (Kafka's GroupMetadata record); no members: it
    emptied. A restarted coordinator, or a cluster node taking the shard over, loads it."""

    group_id: str
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str | None
    members: list[KeptMember]
    # when the group entered the state the record shows (Stable, or Empty: when it emptied),
    # wall clock ms since the epoch (Kafka's currentStateTimestamp); 0: not known, a record
    # written before it was kept. Offsets of an Empty group expire from it.
    current_state_ms: int = 0
    # what the topics were when this generation formed (``topics_digest``: every topic's
    # partition count, hashed); None: not known (topics changed before its assignment was
    # kept, or an older record). A static member back as a new process keeps the generation
    # only while it is the same (its leader may have missed a notice while it was away).
    topics_digest: int | None = None
    # members of this generation were removed after its assignment was kept (a static
    # member's session ended, or it left): whoever loads the group rebalances it, or their
    # partitions would belong to nobody
    members_removed: bool = False


class ConsumerGroupRecord(msgspec.Struct, tag="cg", array_like=True, frozen=True):
    """A consumer-protocol group's epochs (Kafka's ConsumerGroupMetadata and
    TargetAssignmentMetadata records) and the partition counts of the topics it subscribes
    to (ConsumerGroupPartitionMetadata); one with no member record is an empty group, kept
    until it is deleted; ``group_epoch`` -1 (``DELETED``): the group was deleted (by
    DeleteGroups, by offset retention, or a classic group took its id), with every member
    record of it."""

    group_id: str
    group_epoch: int
    target_epoch: int = 0
    subscribed_partitions: dict[str, int] = {}
    subscribed_ids: dict[str, str] = {}  # and their topic ids (a topic created again: new)


class ConsumerMemberRecord(msgspec.Struct, tag="cm", array_like=True, frozen=True):
    """A consumer-protocol member (Kafka's ConsumerGroupMemberMetadata, its
    CurrentMemberAssignment and its TargetAssignmentMember records in one): partitions as
    topic name -> partition numbers. ``member_epoch`` -1 (``DELETED``): the member left or
    was fenced. A classic member of a mixed group also keeps its ClassicMemberMetadata."""

    group_id: str
    member_id: str
    member_epoch: int
    previous_member_epoch: int = 0
    state: str = "stable"  # huddle.coordinator.consumer.MemberState's value
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] = []
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assigned: dict[str, list[int]] = {}
    pending_revocation: dict[str, list[int]] = {}
    target: dict[str, list[int]] | None = None  # None: it has no target assignment yet
    # a classic member's (JoinGroup's; consumer.ClassicMeta): its session timeout and the
    # protocols it joined with, (name, metadata); None: a consumer-protocol member
    classic_session_timeout_ms: int | None = None
    classic_protocols: list[tuple[str, bytes]] | None = None
    # the topic id of each topic it has partitions of (ConsumerMember.topic_ids)
    topic_ids: dict[str, str] = {}


Record = (
    TopicRecord
    | OffsetRecord
    | SessionRecord
    | GroupRecord
    | ConsumerGroupRecord
    | ConsumerMemberRecord
)

DELETED = -1  # an OffsetRecord's offset, or a GroupRecord's generation: it was deleted


def offset_deleted(group_id: str, topic: str, partition: int) -> OffsetRecord:
    return OffsetRecord(group_id, topic, partition, DELETED)


def group_deleted(group_id: str) -> GroupRecord:
    return GroupRecord(group_id, DELETED, None, None, None, [])


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)


def encode_frames(records: Iterable[Record]) -> bytearray:
    """The frames of ``records``. Each record may be dropped as soon as it is encoded, so a
    generator keeps a million-record snapshot from ever being a list of a million objects
    (freeing such a list holds the interpreter for tens of milliseconds); the buffer is
    returned as it is, not copied."""
    out = bytearray()
    for record in records:
        body = _encoder.encode(record)
        out += HEADER.pack(len(body), zlib.crc32(body))
        out += body
    return out


MAX_BODY = 64 << 20  # no record is larger: a longer length field is damage
_ARRAY = range(0x90, 0xA0)  # a record body opens with a short msgpack array (array_like)


def next_intact_frame(data: bytes | bytearray, begin: int) -> int | None:
    """Where the first whole frame with a matching checksum and a readable record starts,
    at or after ``begin`` (None: nowhere; a crash during the last write leaves none)."""
    end = len(data)
    view = memoryview(data)
    for pos in range(begin, end - HEADER.size):
        if data[pos + HEADER.size] not in _ARRAY:
            continue
        length, crc = HEADER.unpack_from(data, pos)
        if not 0 < length <= MAX_BODY or pos + HEADER.size + length > end:
            continue
        body = view[pos + HEADER.size : pos + HEADER.size + length]
        if zlib.crc32(body) != crc:
            continue
        try:
            _decoder.decode(body)
        except msgspec.DecodeError:
            continue
        return pos
    return None


@dataclass(frozen=True, slots=True)
class Decoded:
    records: list[Record]
    valid_bytes: int  # the frames up to here are whole and intact
    problem: str | None  # why decoding stopped before the end, if it did
    # the damage is only what an interrupted write leaves: a last frame cut short or
    # unreadable, or a zero-filled tail (a crash after the file grew, before its data landed)
    torn_tail: bool = False


def decode_frames(data: bytes | bytearray) -> Decoded:
    records: list[Record] = []
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < HEADER.size:
            return Decoded(records, pos, f"a frame header cut short at byte {pos}", True)
        length, crc = HEADER.unpack_from(data, pos)
        start = pos + HEADER.size
        if start + length > end:  # a frame the write did not finish, or a damaged length
            if zlib.crc32(data[start:end]) == crc or next_intact_frame(data, pos + 1) is not None:
                return Decoded(
                    records,
                    pos,
                    f"the frame at byte {pos} claims {length} bytes, more than the file holds, "
                    "yet what follows it is intact: its length is damaged (not a torn write)",
                    False,
                )
            return Decoded(records, pos, f"a frame cut short at byte {pos}", True)
        body = data[start : start + length]
        problem = None
        if zlib.crc32(body) != crc:
            problem = f"a checksum mismatch at byte {pos}"
        else:
            try:
                records.append(_decoder.decode(body))
            except msgspec.DecodeError as exc:
                problem = f"an unreadable record at byte {pos}: {exc}"
        if problem is not None:
            last = start + length == end or not any(data[pos:])
            return Decoded(records, pos, problem, last)
        pos = start + length
    return Decoded(records, pos, None)
