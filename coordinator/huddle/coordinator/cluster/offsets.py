"""A cluster's committed offsets in etcd: one key per group, topic and block of partitions.

``P/offsets/<shard>/<group>/<topic>/p<first>-<last>`` holds the offsets a group committed
to the partitions ``first`` to ``last`` of a topic (a block of ``BLOCK`` partitions:
``p0-63``, ``p64-127``, ...), as one ``OffsetBlock`` (msgpack), each with the incarnation of
its partition it was committed to. A commit of a topic's partitions is so one put for a
topic of up to ``BLOCK`` partitions (a put per block it touches for a larger one), and
``BLOCK`` partitions with the most metadata a commit may carry (4 KiB each) stay within
what etcd takes in one request (1.5 MiB by default).

**Writes merge with memory, not with a read.** The node serving a shard is its keys' only
writer (every write is fenced on the shard's epoch), so ``KeptOffsets`` holds what etcd
holds of each served shard's blocks, and a block a batch changes is written as that, merged
with the batch's changes: a commit to one partition never loses another partition's offset
committed by a member before it. Memory is changed when a write is made, before its answer:
a write not kept stops the node serving the shard (``FencedWriter``), which drops what memory
holds of it (``drop``); it is read again from etcd when the shard is taken up again.

**Older layout.** Versions before this one kept one key per partition,
``P/offsets/<shard>/<group>/<topic>/<partition>`` (an ``OffsetRecord``). A shard's load
(``load``) reads both: a block key, where there is one, holds its block alone (per-partition
keys of that block are leftovers of a migration cut short, and are deleted); otherwise the
block's per-partition keys are its offsets, and the load writes them as the block's key,
deleting the old keys in the same transaction, fenced on the loading epoch. So an upgraded
cluster keeps every offset, and a shard loaded once holds only the new layout. (A node of
an older version cannot read a block key: every node of a cluster is upgraded before it
serves again; see docs/cluster.md.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote

import msgspec
import structlog

from huddle.coordinator.cluster.store import Entry, EtcdStore
from huddle.coordinator.storage.records import DELETED, OffsetRecord

log = structlog.get_logger("huddle.cluster")

BLOCK = 64  # partitions a key holds


class KeptOffset(msgspec.Struct, array_like=True, frozen=True):
    """One partition's committed offset in a block (``OffsetRecord`` without the names)."""

    partition: int
    offset: int
    metadata: str | None = None
    committed_ms: int = 0
    incarnation: int = 0


class OffsetBlock(msgspec.Struct, tag="b", array_like=True, frozen=True):
    """A block key's value: a group's offsets of some partitions of a topic."""

    group_id: str
    topic: str
    offsets: list[KeptOffset]

    def records(self) -> list[OffsetRecord]:
        group_id, topic = self.group_id, self.topic
        return [OffsetRecord(group_id, topic, *msgspec.structs.astuple(o)) for o in self.offsets]


Block = dict[int, KeptOffset]  # partition -> its offset
Changes = dict[bytes, bytes | None]  # key -> value; None: delete

_encode = msgspec.msgpack.Encoder().encode
_block_decoder = msgspec.msgpack.Decoder(OffsetBlock)
_record_decoder = msgspec.msgpack.Decoder(OffsetRecord)


def kept(record: OffsetRecord) -> KeptOffset:
    return KeptOffset(
        record.partition, record.offset, record.metadata, record.committed_ms, record.incarnation
    )


@functools.lru_cache(maxsize=1 << 14)
def _name(text: str) -> str:
    """A name as it is in keys (percent-encoded): the same few names over and over."""
    return quote(text, safe="")


def block_suffix(partition: int) -> str:
    first = partition - partition % BLOCK
    return f"p{first}-{first + BLOCK - 1}"


def block_key(prefix: str, shard: int, group_id: str, topic: str, partition: int) -> bytes:
    """The key holding ``partition``'s offset of ``group_id`` on ``topic``."""
    block = block_suffix(partition)
    return f"{prefix}/offsets/{shard}/{_name(group_id)}/{_name(topic)}/{block}".encode()


@dataclass
class Loaded:
    """A shard's offsets as its load found them in etcd."""

    records: list[OffsetRecord] = field(default_factory=list)  # those still current
    blocks: dict[bytes, Block] = field(default_factory=dict)  # what etcd holds once written
    writes: list[Changes] = field(default_factory=list)  # each block's rewrite, at once
    stale: int = 0  # offsets of a partition that is no longer theirs (dropped)
    migrated: int = 0  # offsets read from per-partition keys (written as blocks)
    unreadable: int = 0  # values neither layout reads (left alone)


# an offset etcd holds (last written at that revision) -> itself, with its partition's
# incarnation now if it had none; None: its partition is no longer the one it was for
Judge = Callable[[OffsetRecord, int], OffsetRecord | None]


class KeptOffsets:
    """What etcd holds of the offsets of each shard this node serves, by block key."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._shards: dict[int, dict[bytes, Block]] = {}

    def drop(self, shards: Iterable[int]) -> None:
        for shard in shards:
            self._shards.pop(shard, None)

    def hold(self, shard: int, blocks: dict[bytes, Block]) -> None:
        """A shard loaded: its blocks as etcd holds them now."""
        self._shards[shard] = blocks

    def block(self, shard: int, key: bytes) -> Block | None:
        """What etcd holds of a block, as this node knows it (for tests and status)."""
        return self._shards.get(shard, {}).get(key)

    def put_back(self, shard: int, key: bytes, block: Block | None) -> None:
        """A block as etcd holds it again (a write of it refused, nothing written)."""
        blocks = self._shards.get(shard)
        if blocks is None:
            return  # the shard is no longer served: nothing held of it
        if block:
            blocks[key] = block
        else:
            blocks.pop(key, None)

    def changes(self, shard: int, records: Iterable[OffsetRecord]) -> Changes:
        """The writes that keep ``records`` (commits resolved to their incarnation, and
        deletions) of a served shard: each block they touch, merged with what etcd holds of
        it (an emptied block deleted). Memory holds the result from now on."""
        blocks = self._shards.setdefault(shard, {})
        touched: dict[bytes, tuple[str, str]] = {}
        keys: dict[tuple[str, str, int], bytes] = {}
        for record in records:
            at = (record.group_id, record.topic, record.partition // BLOCK)
            key = keys.get(at)
            if key is None:
                key = keys[at] = self.key(shard, record)
            block = blocks.get(key)
            if block is None:
                block = blocks[key] = {}
            if record.offset == DELETED:
                block.pop(record.partition, None)
            else:
                block[record.partition] = kept(record)
            touched[key] = (record.group_id, record.topic)
        out: Changes = {}
        for key, (group_id, topic) in touched.items():
            block = blocks[key]
            if block:
                out[key] = _encode(OffsetBlock(group_id, topic, list(block.values())))
            else:
                del blocks[key]
                out[key] = None
        return out

    def load(self, shard: int, entries: Mapping[bytes, Entry], judge: Judge) -> Loaded:
        """A shard's offsets as read from etcd (``P/offsets/<shard>/``, both layouts): the
        current ones, and the writes that leave etcd holding them as blocks (a block with
        an offset no longer current written without it; one read from per-partition keys
        written as a block, its old keys deleted with it). Nothing is held yet: ``hold``
        the blocks once the writes are made."""
        found = Loaded()
        read: dict[bytes, tuple[Entry, OffsetBlock]] = {}
        old: dict[bytes, list[tuple[bytes, Entry, OffsetRecord]]] = {}
        for key, entry in entries.items():
            try:
                if key.rsplit(b"/", 1)[-1].startswith(b"p"):
                    read[key] = (entry, _block_decoder.decode(entry.value))
                else:
                    record = _record_decoder.decode(entry.value)
                    at = self.key(shard, record)
                    old.setdefault(at, []).append((key, entry, record))
            except msgspec.DecodeError:
                found.unreadable += 1
                log.error("offset_unreadable", shard=shard, key=key.decode(errors="replace"))
        for key, (entry, value) in read.items():
            # a block key holds its block alone: per-partition keys of it are leftovers
            leftovers = [k for k, _, _ in old.pop(key, ())]
            offsets = [(entry.revision, record) for record in value.records()]
            self._judged(found, key, offsets, judge, leftovers)
        for key, olds in old.items():
            offsets = [(entry.revision, record) for _, entry, record in olds]
            found.migrated += self._judged(found, key, offsets, judge, [k for k, _, _ in olds])
        return found

    def key(self, shard: int, record: OffsetRecord) -> bytes:
        return block_key(self.prefix, shard, record.group_id, record.topic, record.partition)

    @staticmethod
    def _judged(
        found: Loaded,
        key: bytes,
        offsets: list[tuple[int, OffsetRecord]],
        judge: Judge,
        replaced: list[bytes],
    ) -> int:
        """A block read (each offset with the revision it was written at): its current
        offsets kept, and its key written again, with the ``replaced`` keys deleted, if one
        was not; how many were kept."""
        block: Block = {}
        for written_at, record in offsets:
            now = judge(record, written_at)
            if now is None:
                found.stale += 1
            else:
                block[record.partition] = kept(now)
                found.records.append(now)
        if len(block) < len(offsets) or replaced or not offsets:
            write: Changes = dict.fromkeys(replaced)
            write[key] = None
            if block:
                group_id, topic = offsets[0][1].group_id, offsets[0][1].topic
                write[key] = _encode(OffsetBlock(group_id, topic, list(block.values())))
            found.writes.append(write)
        if block:
            found.blocks[key] = block
        return len(block)


async def kept_offsets(store: EtcdStore, prefix: str) -> dict[tuple[str, str, int], OffsetRecord]:
    """Every offset etcd holds under the cluster prefix ``prefix``, by group, topic and
    partition, read as a shard's load reads them (either layout; a block key before the
    per-partition keys of its block), whatever its topic now: for tests and tools."""
    entries = await store.get_prefix(f"{prefix}/offsets/".encode())
    by_shard: dict[int, dict[bytes, Entry]] = {}
    head = len(prefix) + len("/offsets/")
    for key, entry in entries.items():
        number = key[head:].split(b"/", 1)[0]
        if number.isdigit():
            by_shard.setdefault(int(number), {})[key] = entry
    found = {}
    for shard, held in sorted(by_shard.items()):
        for record in KeptOffsets(prefix).load(shard, held, lambda r, _: r).records:
            found[record.group_id, record.topic, record.partition] = record
    return found
