"""A cluster node serving its shards through the coordinator server.

Keys under the cluster's prefix ``P``, besides the node's own (``huddle.coordinator.cluster.node``):

- ``P/topics/<name>``: a topic's partition count. Any node changes it; every node watches the
  prefix and pushes ``TopicMetadataChanged`` to its members.
- ``P/groups/<shard>/<group>``: the group as its last rebalance left it (``GroupRecord``).
- ``P/offsets/<shard>/<group>/<topic>/<partition>``: a committed offset (``OffsetRecord``).

Group and offset writes are fenced on the shard's epoch (one etcd transaction comparing the
owner key's revision). Names are percent-encoded in keys.

Requests for a group go through ``refusal``: NOT_COORDINATOR when this node does not serve
the group's shard, COORDINATOR_LOAD_IN_PROGRESS while it loads it. A node that takes a shard
loads its groups (Stable, in their kept generation) and offsets before it serves it; a node
that loses one forgets its groups at once.

A shard's offsets are loaded against the topics etcd holds once they are read (read again
at each load) as well as the topics the node knows: the topics watch may lag, and the
offsets of a topic it has not delivered yet are kept. The watch then skips a topic's changes
older than the one that load read, so an older partition count never cuts offsets loaded
under a newer one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import quote, unquote

import msgspec
import structlog

from huddle.coordinator.cluster.keeper import Stamped
from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.cluster.store import EtcdStore
from huddle.coordinator.core import Coordinator, Outgoing
from huddle.coordinator.records import (
    DELETED,
    GroupRecord,
    OffsetRecord,
    Record,
    TopicRecord,
)
from huddle.protocol.addresses import parse_address
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    ClusterNodeInfo,
    DeleteGroupsRequest,
    DescribeClusterResponse,
    DescribeGroupsRequest,
    ErrorResponse,
    FindCoordinatorResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    Request,
    ShardInfo,
    SyncGroupRequest,
)

log = structlog.get_logger("huddle.cluster")

MAX_TXN_OPS = 100  # below etcd's default --max-txn-ops (128)
# a batch's writes (per shard at once, each shard's transactions in turn) end within this
# many etcd deadlines, or are given up (the keeper's last resort)
WRITE_DEADLINES = 5
_GROUP_REQUESTS = (
    HeartbeatRequest,
    JoinGroupRequest,
    SyncGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
Clock = Callable[[], float]
Dispatch = Callable[[list[Outgoing]], None]
Drain = Callable[[], Awaitable[None]]
_encode = msgspec.msgpack.Encoder().encode
_group_decoder = msgspec.msgpack.Decoder(GroupRecord)


def _deletes(record: OffsetRecord | GroupRecord) -> bool:
    """A deletion (DeleteGroups): its key goes from etcd."""
    if isinstance(record, OffsetRecord):
        return record.offset == DELETED
    return record.generation == DELETED


_offset_decoder = msgspec.msgpack.Decoder(OffsetRecord)


def _name(text: str) -> str:
    return quote(text, safe="")


class ClusterServing:
    """The glue between a ``ClusterNode`` (which shards) and a core (the groups)."""

    def __init__(
        self,
        core: Coordinator,
        store: EtcdStore,
        node: ClusterNode,
        *,
        now: Clock,
        dispatch: Dispatch,
        drain: Drain,
    ) -> None:
        self.core = core
        self.store = store
        self.node = node
        self.prefix = node.prefix
        self._now = now
        self._dispatch = dispatch
        self._drain = drain
        self._shards: dict[str, int] = {}
        core.membership.keep_groups = True
        core.locate = self.locate
        core.describe_cluster = self.describe
        node.listener = self
        self.loads = 0  # shards loaded, for tests and status
        self._topic_revisions: dict[str, int] = {}  # a topic's revision, as a load read it

    # --- keys ---------------------------------------------------------------------

    def _key(self, *parts: str) -> bytes:
        return "/".join((self.prefix, *parts)).encode()

    def shard(self, group_id: str) -> int:
        shard = self._shards.get(group_id)
        if shard is None:
            if len(self._shards) > 100_000:
                self._shards.clear()
            shard = self._shards[group_id] = shard_of(group_id, self.node.shards)
        return shard

    # --- requests -----------------------------------------------------------------

    def refusal(self, request: Request) -> ErrorResponse | None:
        """Why this node will not handle ``request`` now, if it will not."""
        if isinstance(request, _GROUP_REQUESTS):
            group_ids: Iterable[str] = (request.group_id,)
        elif isinstance(request, DescribeGroupsRequest | DeleteGroupsRequest):
            group_ids = request.groups
        else:
            return None
        node = self.node
        for group_id in group_ids:
            shard = self.shard(group_id)
            if node.serves(shard):
                continue
            if shard in node.loading:
                return ErrorResponse(
                    error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    error_message=f"node {node.node_id} is loading shard {shard}",
                )
            return ErrorResponse(
                error_code=ErrorCode.NOT_COORDINATOR,
                error_message=f"node {node.node_id} does not coordinate group {group_id!r} "
                f"(shard {shard})",
            )
        return None

    def locate(self, group_id: str) -> FindCoordinatorResponse:
        node = self.node
        shard = self.shard(group_id)
        if node.serves(shard):
            owner: str | None = node.node_id
        else:  # as last read; not this node, which does not serve it now
            owner = node.owners.get(shard)
            if owner == node.node_id:
                owner = None
        address = node.advertise if owner == node.node_id else node.addresses.get(owner or "")
        if owner is None or address is None:
            return FindCoordinatorResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message=f"no live node owns shard {shard} of group {group_id!r} yet",
            )
        host, port = parse_address(address)
        return FindCoordinatorResponse(node_id=owner, host=host, port=port)

    def describe(self) -> DescribeClusterResponse:
        node = self.node
        nodes = []
        for node_id, address in sorted(node.addresses.items()):
            try:
                host, port = parse_address(address)
            except ValueError:
                continue
            nodes.append(ClusterNodeInfo(node_id=node_id, host=host, port=port))
        shards = [
            ShardInfo(
                shard=shard,
                owner=node.owners.get(shard, ""),
                epoch=node.epochs.get(shard, 0) if shard in node.owners else 0,
            )
            for shard in range(node.shards)
        ]
        return DescribeClusterResponse(
            node_id=node.node_id,
            shard_count=node.shards,
            nodes=nodes,
            shards=shards,
            liveness=node.liveness(),
        )

    # --- shards coming and going -----------------------------------------------------

    async def shard_taken(self, shard: int, epoch: int) -> None:
        groups = await self.store.get_prefix(self._key("groups", str(shard)) + b"/")
        offsets = await self.store.get_prefix(self._key("offsets", str(shard)) + b"/")
        counts = await self._topics_for_load()
        records: list[Record] = [_group_decoder.decode(e.value) for e in groups.values()]
        for entry in offsets.values():
            offset = _offset_decoder.decode(entry.value)
            if offset.partition < counts.get(offset.topic, 0):  # not of a deleted topic
                records.append(offset)
        self.shards_lost([shard], "loading it again")  # nothing stale stays in memory
        self.core.load(records, self._now())
        self._dispatch([])  # the loaded members' sessions end even if nobody asks anything
        self.loads += 1
        log.info(
            "shard_loaded",
            node=self.node.node_id,
            shard=shard,
            epoch=epoch,
            groups=len(groups),
            offsets=len(offsets),
        )

    async def _topics_for_load(self) -> dict[str, int]:
        """Each topic's partition count to load offsets against: the larger of what this
        node knows and what etcd holds now (read after the offsets: a topic deleted since
        drops its offsets, a topic the topics watch has not delivered yet keeps them)."""
        counts = dict(self.core.topics.partitions)
        entries, _ = await self.store.read_prefix(self._key("topics") + b"/")
        for key, entry in entries.items():
            name = unquote(key.decode().rsplit("/", 1)[-1])
            if entry.value.isdigit():
                counts[name] = max(counts.get(name, 0), int(entry.value))
                seen = self._topic_revisions.get(name, 0)
                self._topic_revisions[name] = max(seen, entry.revision)
        return counts

    def shards_lost(self, shards: list[int], why: str) -> None:
        lost = set(shards)
        doomed = [g for g in self.core.groups if self.shard(g) in lost]
        if doomed:
            self._dispatch(self.core.unload(doomed, self._now()))
            log.info("groups_unloaded", node=self.node.node_id, groups=len(doomed), why=why)

    async def shard_releasing(self, shard: int) -> None:
        await self._drain()

    @property
    def write_deadline_s(self) -> float:
        return self.store.timeout_s * WRITE_DEADLINES

    def give_up(self, records: list[Stamped]) -> None:
        """A write of ``records`` neither failed nor ended in time: whether it reached etcd
        is unknown, so their shards are no longer served (taken up again from etcd)."""
        shards = {
            self.shard(r.group_id) for r, _ in records if isinstance(r, OffsetRecord | GroupRecord)
        }
        for shard in sorted(shards):
            self.node.depose(shard, "a write did not end in time")

    # --- writes -------------------------------------------------------------------

    def stamp(self, record: Record) -> int | None:
        """The serving of the record's shard it is made in (see ``EtcdKeeper``)."""
        if isinstance(record, (OffsetRecord, GroupRecord)):
            return self.node.serving(self.shard(record.group_id))
        return None

    async def write(self, records: list[Stamped]) -> bool:
        """Keep ``records`` in etcd: groups and offsets fenced on their shard's epoch,
        topics as they are. False if anything could not be kept (its shard is then no
        longer served: what memory holds of it is ahead of etcd). A record made while its
        shard was served before (the node gave it up, or was deposed, and took it up again
        since) is not written: a later serving loaded what etcd held without it."""
        by_shard: dict[int, dict[bytes, bytes | None]] = defaultdict(dict)  # None: delete
        topics: list[TopicRecord] = []
        stale: set[int] = set()
        for record, serving in records:
            if isinstance(record, OffsetRecord):
                shard = self.shard(record.group_id)
                key = self._key(
                    "offsets",
                    str(shard),
                    _name(record.group_id),
                    _name(record.topic),
                    str(record.partition),
                )
            elif isinstance(record, GroupRecord):
                shard = self.shard(record.group_id)
                key = self._key("groups", str(shard), _name(record.group_id))
            else:
                if isinstance(record, TopicRecord):
                    topics.append(record)
                continue
            if serving is None or serving != self.node.serving(shard):
                stale.add(shard)
                continue
            by_shard[shard][key] = None if _deletes(record) else _encode(record)
        if stale:
            log.warning("stale_changes_dropped", node=self.node.node_id, shards=sorted(stale))
        results = await asyncio.gather(
            *(self._write_shard(shard, puts) for shard, puts in by_shard.items()),
            self._write_topics(topics),
        )
        return all(results) and not stale

    async def _write_shard(self, shard: int, changes: dict[bytes, bytes | None]) -> bool:
        """Puts, and deletes (None), fenced on the shard's epoch; one op per key."""
        epoch = self.node.epoch(shard)
        if epoch is None:
            self.shards_lost([shard], "a write for a shard no longer served")
            return False
        owner_key = self._key("shards", str(shard))
        items = list(changes.items())
        try:
            for i in range(0, len(items), MAX_TXN_OPS):
                chunk = items[i : i + MAX_TXN_OPS]
                puts = {k: v for k, v in chunk if v is not None}
                deletes = [k for k, v in chunk if v is None]
                if not await self.store.write_fenced(owner_key, epoch, puts, deletes):
                    self.node.depose(shard, f"etcd refused a write fenced on epoch {epoch}")
                    return False
        except Exception as exc:
            log.error("shard_write_failed", shard=shard, error=type(exc).__name__)
            self.node.depose(shard, f"a write failed: {type(exc).__name__}")
            return False
        return True

    async def _write_topics(self, topics: list[TopicRecord]) -> bool:
        try:
            for record in topics:
                key = self._key("topics", _name(record.name))
                if record.partitions > 0:
                    await self.store.put(key, str(record.partitions).encode())
                else:
                    await self.store.delete(key)
        except Exception as exc:
            log.error("topic_write_failed", error=type(exc).__name__)
            # memory already holds the change etcd refused: take etcd's topics back (if
            # etcd is away, the topics watch does it once it returns)
            with contextlib.suppress(Exception):
                await self.load_topics()
            return False
        return True

    # --- topics -------------------------------------------------------------------

    async def load_topics(self) -> int:
        """The cluster's topics, as etcd holds them, into the core (one it does not hold
        is deleted here); the revision read at."""
        prefix = self._key("topics") + b"/"
        entries, revision = await self.store.read_prefix(prefix)
        kept = set()
        for key, entry in entries.items():
            kept.add(self._topic_changed(key, entry.value))
        for name in [n for n in self.core.topics.partitions if n not in kept]:
            self._topic_changed(prefix + _name(name).encode(), None)
        return revision

    async def watch_topics(
        self, from_revision: int, alive: Callable[[], None] | None = None
    ) -> None:
        """Apply topic changes other nodes make, as they happen (until cancelled); a
        topic's change older than what a shard's load read of it is skipped."""
        prefix = self._key("topics") + b"/"
        async for change in self.store.watch_prefix(prefix, from_revision, alive=alive):
            name = unquote(change.key.decode().rsplit("/", 1)[-1])
            if change.revision < self._topic_revisions.get(name, 0):
                continue
            self._topic_changed(change.key, change.value)

    def _topic_changed(self, key: bytes, value: bytes | None) -> str:
        name = unquote(key.decode().rsplit("/", 1)[-1])
        try:
            partitions = int(value) if value is not None else 0
        except ValueError:
            log.warning("topic_unreadable", key=key.decode(errors="replace"))
            return name
        self._dispatch(self.core.topic_changed_elsewhere(name, partitions, self._now()))
        return name
