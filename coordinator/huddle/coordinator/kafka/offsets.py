"""Committed offsets on the Kafka wire: OffsetCommit and OffsetFetch as the core's.

- OffsetCommit: a group-level error (an unknown member, a stale generation) is Kafka's
  answer for every partition of the request, as Kafka's coordinator gives it; the core
  answers it once, for the group. A commit naming a generation to a group the coordinator
  does not hold is ILLEGAL_GENERATION before v9 and GROUP_ID_NOT_FOUND from v9, as Kafka's
  ``OffsetMetadataManager.validateOffsetCommit``. Leader epochs, commit timestamps and
  retention times are read and not kept (Kafka 2.1+ ignores the last two as well).
- OffsetCommit's answer is written by hand (``offset_commit_encoding``), kio's bytes.
- OffsetFetch v8+ asks for several groups in one request: one core request per group,
  answered together. A null topic list asks for every committed offset of the group.
  A group-level error is the group's error code with no topics from v2 (v8+: per group),
  and each partition asked with that error in v1, which has no group error code, as
  Kafka's ``OffsetFetchRequest.getErrorResponse`` answers.
- OffsetCommit v10 and OffsetFetch v10 (Kafka 4.1, KIP-848) name each topic by its id
  (the one huddle gave it at its creation, which Metadata answers with) instead of its
  name, in the request and the answer. An id no topic has is answered UNKNOWN_TOPIC_ID for
  each partition asked, before the group is checked, as Kafka answers it; an OffsetFetch
  of every offset answers each topic by its id.
- A consumer-protocol group's (KIP-848) OffsetCommit v9+ carries the member epoch in
  ``generation_id_or_member_epoch`` and OffsetFetch v9+ the member id and epoch: they are
  checked against the member's (``consumer_groups``; UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH,
  and a member's commit older than v9 UNSUPPORTED_VERSION, as Kafka's
  ``ConsumerGroup.validateOffsetCommit``), and a commit that passes is made as one from
  outside any classic group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final
from uuid import UUID

from huddle.coordinator.kafka import offset_commit_encoding
from huddle.coordinator.kafka.schemas import ZERO_UUID
from huddle.coordinator.kafka.translate import (
    UNKNOWN_TOPIC_ID,
    Context,
    Encoded,
    Plan,
    Values,
    get,
)
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    NO_GENERATION,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    Response,
)

_NO_EPOCH = -1
_BY_ID_FROM: Final = 10  # OffsetCommit's and OffsetFetch's version that names topics by id
_GROUP_ERROR_FROM = 2  # OffsetFetch's version that brought the group-level error code
_GROUP_ID_NOT_FOUND_FROM = 9  # OffsetCommit's: a commit to no group is GROUP_ID_NOT_FOUND


def _named(topics: Any, version: int, ctx: Context) -> list[str | None]:
    """Each topic's name (None: an id no topic has)."""
    if version < _BY_ID_FROM:
        return [t.name for t in topics]
    return [ctx.topic_names.get(t.topic_id) for t in topics]


def offset_commit(req: Any, version: int, ctx: Context) -> Plan:
    names = _named(req.topics, version, ctx)
    generation = get(req, "generation_id_or_member_epoch", NO_GENERATION)
    member_id, instance_id = get(req, "member_id", ""), get(req, "group_instance_id")
    # a consumer-protocol group: its member epoch is checked here (the version's rules) and
    # again by the core as it commits (an epoch moved meanwhile is stale there)
    consumer = ctx.consumer_offsets(req.group_id, member_id, generation, version, commit=True)
    call = OffsetCommitRequest(
        group_id=req.group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        topics=[
            OffsetCommitTopic(
                name=name,
                partitions=[
                    OffsetCommitPartition(
                        partition=p.partition_index,
                        offset=p.committed_offset,
                        metadata=p.committed_metadata,
                    )
                    for p in t.partitions
                ],
            )
            for t, name in zip(req.topics, names, strict=True)
            if name is not None
        ],
    )

    def answer(parts: Sequence[Response]) -> Encoded:
        r = parts[0] if parts else None  # none: the consumer group refused it (``consumer``)
        group_code = consumer or (ErrorCode.NONE if r is None else r.error_code)
        found: dict[tuple[str, int], int] = {}
        if type(r) is OffsetCommitResponse:
            if r.no_group and version >= _GROUP_ID_NOT_FOUND_FROM:
                group_code = ErrorCode.GROUP_ID_NOT_FOUND
            for topic in r.topics:
                for p in topic.partitions:
                    found[topic.name, p.partition] = p.error_code
        topics = [
            (
                t.name if version < _BY_ID_FROM else t.topic_id or ZERO_UUID,  # kio: None
                [
                    (
                        p.partition_index,
                        UNKNOWN_TOPIC_ID
                        if name is None
                        else group_code or found.get((name, p.partition_index), 0),
                    )
                    for p in t.partitions
                ],
            )
            for t, name in zip(req.topics, names, strict=True)
        ]
        return Encoded(offset_commit_encoding.encode(version, topics))

    return Plan([] if consumer else [call], answer)


def offset_fetch(req: Any, version: int, ctx: Context) -> Plan:
    groups = get(req, "groups")
    if groups is None:  # v0-7: one group
        asked = [_fetch_call(req.group_id, req.topics, version, ctx)]
    else:
        asked = [_fetch_call(g.group_id, g.topics, version, ctx) for g in groups]
    refusals = [_member_refused(g, version, ctx) for g in groups or ()]
    calls = [call for call, _ in asked]
    ids = ctx.topic_ids if version >= _BY_ID_FROM else None

    per_partition = version < _GROUP_ERROR_FROM

    def answer(parts: Sequence[Response]) -> Values:
        if groups is None:
            (r,) = parts
            return {"error_code": r.error_code, "topics": _fetched(r, calls[0], per_partition)}
        return {
            "groups": [
                {"group_id": c.group_id, "error_code": refused, "topics": []}
                if refused
                else {
                    "group_id": c.group_id,
                    "error_code": r.error_code,
                    "topics": [*_fetched(r, c, per_partition, ids), *_unknown(unknown)],
                }
                for (c, unknown), r, refused in zip(asked, parts, refusals, strict=True)
            ]
        }

    return Plan(calls, answer)


def _member_refused(group: Any, version: int, ctx: Context) -> int:
    """A group's member id and epoch (v9+) checked against a consumer-protocol group: 0,
    or the error code the group is answered with."""
    member_id, epoch = get(group, "member_id"), get(group, "member_epoch", -1)
    return ctx.consumer_offsets(group.group_id, member_id, epoch, version, commit=False) or 0


Unknown = list[tuple[UUID, list[int]]]  # ids asked that no topic has, with their partitions


def _fetch_call(
    group_id: str, topics: Any, version: int, ctx: Context
) -> tuple[OffsetFetchRequest, Unknown]:
    if topics is None:
        return OffsetFetchRequest(group_id=group_id, topics=None), []
    known, unknown = [], []
    for t, name in zip(topics, _named(topics, version, ctx), strict=True):
        if name is None:
            unknown.append((t.topic_id, list(t.partition_indexes)))
        else:
            known.append(OffsetFetchTopic(name=name, partitions=list(t.partition_indexes)))
    return OffsetFetchRequest(group_id=group_id, topics=known), unknown


def _unknown(unknown: Unknown) -> list[Values]:
    return [
        {"topic_id": topic_id, "partitions": [_no_offset(p, UNKNOWN_TOPIC_ID) for p in parts]}
        for topic_id, parts in unknown
    ]


def _no_offset(partition: int, code: int) -> Values:
    return {
        "partition_index": partition,
        "committed_offset": -1,
        "committed_leader_epoch": _NO_EPOCH,
        "metadata": "",
        "error_code": code,
    }


def _fetched(
    r: Response,
    call: OffsetFetchRequest,
    per_partition: bool,
    ids: Mapping[str, UUID] | None = None,
) -> list[Values]:
    """The offsets answered, or (a group-level error) none, or, ``per_partition`` (a
    version without a group error code), each partition asked with no offset and that
    error. With ``ids`` (a version that names topics by id), each topic by its id (one
    that has none is left out)."""
    if type(r) is OffsetFetchResponse and not r.error_code:
        return [
            {
                "name": t.name,
                "topic_id": None if ids is None else ids.get(t.name),
                "partitions": [
                    {
                        "partition_index": p.partition,
                        "committed_offset": p.offset,
                        "committed_leader_epoch": _NO_EPOCH,
                        "metadata": p.metadata,
                        "error_code": p.error_code,
                    }
                    for p in t.partitions
                ],
            }
            for t in r.topics
            if ids is None or t.name in ids
        ]
    if not per_partition:
        return []
    return [
        {"name": t.name, "partitions": [_no_offset(p, r.error_code) for p in t.partitions]}
        for t in call.topics or ()
    ]
