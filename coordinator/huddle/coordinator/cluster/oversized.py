"""Commits etcd refused for their size: the commit refused, the shard still served.

A group's offsets of a block of 64 partitions are one etcd key (``cluster.offsets``); with
much metadata per partition (``--offset-metadata-max-bytes`` over about 20 KiB) a block can
be larger than etcd takes in one request (``--max-request-bytes``). etcd refuses such a
write whole, and says so: nothing of it was written, so it is no unknown outcome and no
reason to stop serving the shard. The block's key is left unwritten (``FencedWriter``
names it), memory is set back to what etcd holds of it (the node's copy of the block, and
the core's committed offsets a later commit did not change since; an offset deleted in the
same batch, by retention or DeleteGroups, is held again: etcd still holds it, and retention
deletes it again), and the commits to its partitions are answered
OFFSET_METADATA_TOO_LARGE, as Kafka answers a commit whose metadata is over its limit. The
rest of the batch is kept and acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

from huddle.coordinator.cluster.offsets import Block, KeptOffsets
from huddle.coordinator.core import Coordinator
from huddle.coordinator.storage.group_commit import Held
from huddle.coordinator.storage.records import DELETED, OffsetRecord
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import OffsetCommitRequest, OffsetCommitResponse, Reply

Partition = tuple[str, str, int]  # group, topic, partition
Blocks = dict[bytes, Block | None]  # a block key -> what memory held of it (None: nothing)


@dataclass(frozen=True)
class PartlyKept:
    """A batch kept, but for the commits to these partitions: etcd refused their block for
    its size (answered OFFSET_METADATA_TOO_LARGE)."""

    too_large: frozenset[Partition]


def held_blocks(offsets: KeptOffsets, shard: int, records: Iterable[OffsetRecord]) -> Blocks:
    """What memory holds of the blocks ``records`` touch, before they are merged in: a
    block etcd refuses is put back as it was (None: there was none)."""
    found: Blocks = {}
    for record in records:
        key = offsets.key(shard, record)
        if key not in found:
            block = offsets.block(shard, key)
            found[key] = None if block is None else dict(block)
    return found


def take_back(
    core: Coordinator,
    offsets: KeptOffsets,
    shard: int,
    refused: set[bytes],
    before: Blocks,
    records: Iterable[OffsetRecord],
) -> set[Partition]:
    """Memory as etcd holds it again for the blocks etcd ``refused`` (of ``shard``, held
    ``before`` the batch): the node's copy of each block, and each commit's offset in the
    core unless a later commit changed it since (that one goes with its own batch, merged
    with the block put back). The partitions whose commits were refused."""
    mine = refused & before.keys()
    for key in mine:
        offsets.put_back(shard, key, before[key])
    out: set[Partition] = set()
    for record in records:
        key = offsets.key(shard, record)
        if key not in mine:
            continue
        at = record.group_id, record.topic, record.partition
        out.add(at)
        group = core.groups.get(record.group_id)
        now = group.offsets.get((record.topic, record.partition)) if group else None
        if record.offset == DELETED:  # a deletion (retention, DeleteGroups): etcd holds it
            if now is not None:
                continue  # committed again since
        elif now != (record.offset, record.metadata, record.committed_ms):
            continue  # changed since: not this commit's any more
        was = (before[key] or {}).get(record.partition)
        if was is None:
            core.offsets.restore(msgspec.structs.replace(record, offset=DELETED))
        else:
            core.offsets.restore(OffsetRecord(*at, was.offset, was.metadata, was.committed_ms))
    return out


def answer_too_large(held: list[Held], too_large: frozenset[Partition]) -> None:
    """Each held OffsetCommit's answer, OFFSET_METADATA_TOO_LARGE for its partitions in
    ``too_large`` (the others were kept)."""
    for _, call, out in held:
        if call is None or not isinstance(call.request, OffsetCommitRequest):
            continue
        group_id = call.request.group_id
        for i, (to, frame) in enumerate(out):
            if type(frame) is not Reply or type(frame.response) is not OffsetCommitResponse:
                continue
            answer = frame.response
            topics = [
                msgspec.structs.replace(
                    t,
                    partitions=[
                        msgspec.structs.replace(p, error_code=ErrorCode.OFFSET_METADATA_TOO_LARGE)
                        if (group_id, t.name, p.partition) in too_large
                        else p
                        for p in t.partitions
                    ],
                )
                for t in answer.topics
            ]
            response = msgspec.structs.replace(answer, topics=topics)
            out[i] = (to, msgspec.structs.replace(frame, response=response))
