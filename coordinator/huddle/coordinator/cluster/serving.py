"""A cluster node serving its shards through the coordinator server.

Keys under the cluster's prefix ``P``, besides the node's own (``huddle.coordinator.cluster.node``)
and the topics' (``huddle.coordinator.cluster.topics``):

- ``P/groups/<shard>/<group>``: the group as its last rebalance left it (``GroupRecord``).
- ``P/offsets/<shard>/<group>/<topic>/p<first>-<last>``: a group's committed offsets of a
  block of a topic's partitions, each with the incarnation of its partition it was committed
  to (``huddle.coordinator.cluster.offsets``: the layout, and the migration from one key per
  partition).
- ``P/consumer-groups/<shard>/<group>`` and ``.../<group>/m<member>``: a consumer-protocol
  group's record and its members' (``ConsumerGroupRecord``, ``ConsumerMemberRecord``); a
  shard taken over hands them to the server's consumer service
  (``ConsumerKept.take``), a shard lost drops them (``ConsumerKept.drop``).

Group and offset writes are fenced on the shard's epoch (an etcd transaction comparing the
owner key's revision); a pass's changes for many shards go in as few transactions as etcd
takes (``huddle.coordinator.cluster.fenced``). Names are percent-encoded in keys.

Requests for a group go through ``refusal``: NOT_COORDINATOR when this node does not serve
the group's shard, COORDINATOR_LOAD_IN_PROGRESS while it loads it. A node that takes a shard
loads its groups (Stable, in their kept generation) and offsets before it serves it; a node
that loses one forgets its groups at once.

A shard's load reads the topics from etcd after its offsets (the topics watch may lag: what
it has not delivered yet is applied then, and it skips it later), keeps the offsets whose
partition is still the one they were committed to, and writes their blocks again without
the others (and blocks kept one key per partition as one key), fenced on the loading epoch.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from urllib.parse import quote

import msgspec
import structlog

from huddle.coordinator.cluster.fenced import MAX_TXN_BYTES, MAX_TXN_OPS, FencedWriter, size
from huddle.coordinator.cluster.keeper import Stamped
from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.offsets import Changes, KeptOffsets
from huddle.coordinator.cluster.oversized import (
    Blocks,
    Partition,
    PartlyKept,
    held_blocks,
    take_back,
)
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.cluster.store import EtcdStore
from huddle.coordinator.cluster.topics import ClusterTopics
from huddle.coordinator.core import Coordinator, Outgoing
from huddle.coordinator.storage.records import (
    DELETED,
    ConsumerGroupRecord,
    ConsumerMemberRecord,
    GroupRecord,
    OffsetRecord,
    Record,
    TopicRecord,
)
from huddle.protocol.addresses import parse_address
from huddle.protocol.errors import ErrorCode, HuddleError
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

# a batch's writes (its transactions at once, a large shard's in turn: ``FencedWriter``)
# end within this many etcd deadlines, or are given up (the keeper's last resort)
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


def _deletes(
    record: OffsetRecord | GroupRecord | ConsumerGroupRecord | ConsumerMemberRecord,
) -> bool:
    """A deletion (DeleteGroups, a consumer group emptied, a member gone): its key goes."""
    if isinstance(record, OffsetRecord):
        return record.offset == DELETED
    if isinstance(record, ConsumerGroupRecord):
        return record.group_epoch == DELETED
    if isinstance(record, ConsumerMemberRecord):
        return record.member_epoch == DELETED
    return record.generation == DELETED


_consumer_decoder = msgspec.msgpack.Decoder(ConsumerGroupRecord | ConsumerMemberRecord)
_SHARDED = (OffsetRecord, GroupRecord, ConsumerGroupRecord, ConsumerMemberRecord)


@functools.lru_cache(maxsize=1 << 14)
def _name(text: str) -> str:
    """A name as it is in keys (percent-encoded): the same few names over and over."""
    return quote(text, safe="")


class FencedWriteError(HuddleError, RuntimeError):
    """etcd refused a write fenced on a shard's epoch: another node owns the shard now."""


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
        keep: Callable[[], None] = lambda: None,
    ) -> None:
        self.core = core
        self.store = store
        self.node = node
        self.prefix = node.prefix
        self._now = now
        self._dispatch = dispatch
        self._drain = drain
        self._shards: dict[str, int] = {}
        core.keep_groups()
        core.locate = self.locate
        core.describe_cluster = self.describe
        node.listener = self
        self.loads = 0  # shards loaded, for tests and status
        self.writer = FencedWriter(store, node, lambda shard, why: self.shards_lost([shard], why))
        self.offsets = KeptOffsets(self.prefix)  # what etcd holds of the served shards' offsets
        # ``keep``: the core's changes made outside a request (offsets a topic's change
        # dropped) are written now, the keeper's way
        self.topics = ClusterTopics(core, store, self.prefix, now=now, dispatch=dispatch, keep=keep)

    # --- keys ---------------------------------------------------------------------

    def _key(self, *parts: str) -> bytes:
        return "/".join((self.prefix, *parts)).encode()

    def _consumer_key(
        self, shard: int, record: ConsumerGroupRecord | ConsumerMemberRecord
    ) -> bytes:
        """``P/consumer-groups/<shard>/<group>/<member>``, or ``.../<group>`` (its epochs:
        no member id is empty, so the two never meet)."""
        parts = ["consumer-groups", str(shard), _name(record.group_id)]
        if isinstance(record, ConsumerMemberRecord):
            parts.append("m" + _name(record.member_id))
        return self._key(*parts)

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
        for group_id in group_ids:
            refusal = self.refuses_group(group_id)
            if refusal is not None:
                return refusal
        return None

    def refuses_group(self, group_id: str) -> ErrorResponse | None:
        """Why this node will not serve ``group_id`` now (None: it serves it)."""
        node = self.node
        shard = self.shard(group_id)
        if node.serves(shard):
            return None
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
            kafka = node.kafka_addresses.get(node_id, "")
            nodes.append(
                ClusterNodeInfo(node_id=node_id, host=host, port=port, kafka_address=kafka)
            )
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
            served=sorted(node.owned()),
        )

    # --- shards coming and going -----------------------------------------------------

    async def shard_taken(self, shard: int, epoch: int) -> None:
        groups = await self.store.get_prefix(self._key("groups", str(shard)) + b"/")
        offsets = await self.store.get_prefix(self._key("offsets", str(shard)) + b"/")
        consumer = await self.store.get_prefix(self._key("consumer-groups", str(shard)) + b"/")
        self.shards_lost([shard], "loading it again")  # nothing stale stays in memory
        await self.topics.load()  # after the offsets: the topics each was committed under
        records: list[Record] = [_group_decoder.decode(e.value) for e in groups.values()]
        # offsets of a topic deleted, cut or made again since are gone for good; blocks kept
        # one key per partition (an older version's) are written as one key
        found = self.offsets.load(shard, offsets, self._judge)
        if found.writes:
            await self._rewrite(shard, epoch, found.writes)
        self.offsets.hold(shard, found.blocks)
        records += found.records
        self.core.load(records, self._now())
        self.core.consumer_kept.take(_consumer_decoder.decode(e.value) for e in consumer.values())
        self._dispatch([])  # the loaded members' sessions end even if nobody asks anything
        self.loads += 1
        log.info(
            "shard_loaded",
            node=self.node.node_id,
            shard=shard,
            epoch=epoch,
            groups=len(groups),
            consumer_records=len(consumer),
            offsets=len(found.records),
            stale_offsets=found.stale,
            migrated_offsets=found.migrated,
        )

    def _judge(self, record: OffsetRecord, written_at: int) -> OffsetRecord | None:
        """An offset etcd holds, with its partition's incarnation; None if the partition is
        no longer the one it was committed to."""
        if not self.topics.current(record, written_at):
            return None
        return record if record.incarnation else self.topics.resolve(record)

    async def _rewrite(self, shard: int, epoch: int, writes: Sequence[Changes]) -> None:
        """Writes of a shard being loaded under ``epoch`` (fenced on it): each one in a
        single transaction (a block and the old keys it replaces), several together."""
        owner_key = self._key("shards", str(shard))
        together: list[Changes] = []
        for write in writes:
            last = together[-1] if together else None
            if (
                last is not None
                and len(last) + len(write) <= MAX_TXN_OPS
                and size(last) + size(write) <= MAX_TXN_BYTES
            ):
                last.update(write)
            else:
                together.append(dict(write))
        for chunk in together:
            puts = {k: v for k, v in chunk.items() if v is not None}
            deletes = [k for k, v in chunk.items() if v is None]
            if not await self.store.write_fenced(owner_key, epoch, puts, deletes=deletes):
                raise FencedWriteError(f"etcd refused a write fenced on epoch {epoch}")

    def shards_lost(self, shards: list[int], why: str) -> None:
        lost = set(shards)
        self.offsets.drop(lost)
        doomed = [g for g in self.core.groups if self.shard(g) in lost]
        self.core.consumer_kept.drop(lambda group_id: self.shard(group_id) in lost)
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
        is unknown, so their shards are no longer served (taken up again from etcd, under
        a renewed epoch: that write is refused wherever it lands)."""
        shards = {
            self.shard(r.group_id) for r, _ in records if isinstance(r, _SHARDED) and r.group_id
        }
        for shard in sorted(shards):
            self.node.depose(shard, "a write did not end in time")

    # --- writes -------------------------------------------------------------------

    def stamp(self, record: Record) -> Stamped:
        """What a record is made under (see ``EtcdKeeper``): the serving of its shard, and
        for a commit the incarnation of its partition; for a topic's change, the topic as
        the node had seen it."""
        if isinstance(record, TopicRecord):
            return record, self.topics.held(record)
        if isinstance(record, OffsetRecord):
            serving = self.node.serving(self.shard(record.group_id))
            if record.offset != DELETED:
                record = self.topics.stamp(record)
            return record, serving
        if isinstance(record, _SHARDED):
            return record, self.node.serving(self.shard(record.group_id))
        return record, None

    async def write(self, records: list[Stamped]) -> bool | PartlyKept:
        """Keep ``records`` in etcd: topics first (each a compare-and-set), then groups and
        offsets fenced on their shard's epoch. False if anything could not be kept. A
        record made while its shard was served before (the node gave it up, or was
        deposed, and took it up again since) is not written: a later serving loaded what
        etcd held without it; nor a commit whose partition is no longer the one it was
        committed to (the node forgot it with its topic's change). A shard whose write
        failed, or whose records concern a topic whose change was not kept, is no longer
        served (what memory holds of it is ahead of etcd, or behind)."""
        topics = [(r, seen) for r, seen in records if isinstance(r, TopicRecord)]
        failed = await self.topics.write(topics) if topics else set()
        by_shard: dict[int, dict[bytes, bytes | None]] = defaultdict(dict)  # None: delete
        offsets: dict[int, list[OffsetRecord]] = defaultdict(list)  # merged into blocks below
        stale: set[int] = set()
        gone: set[int] = set()  # commits to a partition of another incarnation
        undone: set[int] = set()  # records of a topic whose change etcd did not keep
        servings: dict[int, int | None] = {}  # each shard's, read once: nothing awaits below
        for record, serving in records:
            if isinstance(record, OffsetRecord):
                shard = self.shard(record.group_id)
                key = b""  # its block's: below
            elif isinstance(record, GroupRecord):
                shard = self.shard(record.group_id)
                key = self._key("groups", str(shard), _name(record.group_id))
            elif isinstance(record, ConsumerGroupRecord | ConsumerMemberRecord):
                shard = self.shard(record.group_id)
                key = self._consumer_key(shard, record)
            else:
                continue
            now_serving = servings.get(shard, -1)
            if now_serving == -1:
                now_serving = servings[shard] = self.node.serving(shard)
            if serving is None or serving != now_serving:
                stale.add(shard)
                continue
            if isinstance(record, OffsetRecord) and record.topic in failed:
                undone.add(shard)
                continue
            if isinstance(record, OffsetRecord) and record.offset != DELETED:
                resolved = self.topics.resolve(record)
                if resolved is None:
                    gone.add(shard)
                    continue
                record = resolved
            if isinstance(record, OffsetRecord):
                offsets[shard].append(record)
            else:
                by_shard[shard][key] = None if _deletes(record) else _encode(record)
        if stale:
            log.warning("stale_changes_dropped", node=self.node.node_id, shards=sorted(stale))
        if gone:
            log.warning("commits_to_gone_partitions", node=self.node.node_id, shards=sorted(gone))
        for shard in sorted(undone):
            self.node.depose(shard, "a topic change it depends on was not kept in etcd")
        before: dict[int, Blocks] = {}  # for blocks etcd refuses for their size
        for shard, changed in offsets.items():
            if shard not in undone:  # each block merged with what etcd holds of it
                before[shard] = held_blocks(self.offsets, shard, changed)
                by_shard[shard].update(self.offsets.changes(shard, changed))
        kept = await self.writer.write(by_shard) if by_shard else True
        kept = kept and not (stale or gone or undone or failed)
        if not by_shard or not self.writer.refused:
            return kept
        return self._too_large(self.writer.refused, by_shard, before, offsets, kept)

    def _too_large(
        self,
        refused: set[bytes],
        by_shard: dict[int, dict[bytes, bytes | None]],
        before: dict[int, Blocks],
        offsets: dict[int, list[OffsetRecord]],
        kept: bool,
    ) -> bool | PartlyKept:
        """Keys etcd refused for their size: a block's commits are refused (memory put
        back, the shard still served); anything else (a group's record) was changed in
        memory and not kept, so its shard is no longer served."""
        too_large: set[Partition] = set()
        blocks: set[bytes] = set()
        for shard, held in before.items():
            blocks |= held.keys()
            too_large |= take_back(self.core, self.offsets, shard, refused, held, offsets[shard])
        others = refused - blocks
        for shard in sorted(s for s, changes in by_shard.items() if others & changes.keys()):
            self.node.depose(shard, "etcd refused a change of it as too large")
        if others or not kept:
            return False
        return PartlyKept(frozenset(too_large))
