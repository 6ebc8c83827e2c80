"""A cluster's topics in etcd, and which incarnation of a topic each offset belongs to.

Keys under the cluster's prefix ``P``:

- ``P/topics/<name>``: the topic's partition count (decimal). Created, changed and deleted.
- ``P/topic-cuts/<name>``: what shrinks cut off (``"<first partition>@<marker> ..."``),
  written with each shrink and (emptied) with each deletion of the topic; never deleted.
- ``P/topic-ids/<name>``: the topic's id (``huddle.coordinator.topic_ids``, a UUID as
  text), written in the transaction that creates the topic (before its key: a watch sees
  it first) and deleted with it. It is the topic's id only while it was last written at the
  revision the topic key was created at; otherwise (a topic created by a version without
  ids, or by one that left a deleted topic's id behind) every node derives the same one from
  the topic's name and that revision (``derived_topic_id``). Every node, a restart and a
  failover so give a topic the same id; one created again gets a new one.

**Incarnations.** A topic deleted and created again, or shrunk and grown again, has
partitions of the same names that are not the old ones: offsets committed to the old ones
must not come back (Kafka deletes a deleted topic's offsets for good). A partition's
*incarnation* is the etcd revision the topic's key was created at, or, for a partition a
shrink cut off and a later growth brought back, the marker of that shrink (one more than the
topic key's revision before it: above every incarnation before, below the revision of any
later re-creation). Every offset this version commits is kept with the incarnation its
topic had when it was accepted (``OffsetRecord.incarnation``); a shard's load keeps an offset
only if its partition has that incarnation now (one kept by an older version: only if it
was written after the topic's creation), and deletes the others from etcd, fenced on the
loading epoch. A node that applies a deletion, a shrink or a re-creation forgets the
offsets concerned in memory and deletes them from etcd through its fenced writes.

**Every change is a compare-and-set** on the revisions of both keys as this node last saw
them, so a change etcd never answered (its deadline passed, its connection died) that
reaches etcd later, after any other change to the topic, changes nothing: the topic key's
revision moved, or (a creation after a deletion) the cuts key's did. A change refused
because the topic changed meanwhile is not kept: the node takes etcd's topics back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from urllib.parse import quote, unquote
from uuid import UUID

import msgspec
import structlog

from huddle.coordinator.cluster.store import Change, Entry, EtcdStore
from huddle.coordinator.core import Coordinator, Outgoing
from huddle.coordinator.storage.records import OffsetRecord, TopicRecord
from huddle.coordinator.topic_ids import derived_topic_id

log = structlog.get_logger("huddle.cluster")

Cuts = tuple[tuple[int, int], ...]  # (first partition cut, marker), both increasing


@dataclass(frozen=True, slots=True)
class TopicState:
    """A topic as etcd held it when this node last saw it."""

    partitions: int = 0  # 0: no such topic
    created: int = 0  # the revision its key was created at: its incarnation
    revision: int = 0  # the topic key's last change seen (a deletion included)
    cuts: Cuts = ()
    cuts_revision: int = 0  # the cuts key's last change seen (0: it does not exist)
    topic_id: UUID | None = None  # the id key's value (None: none, or unreadable)
    id_revision: int = 0  # the id key's last change seen

    def id_of(self, name: str) -> UUID | None:
        """The topic's id (None: no such topic); see the module's doc."""
        if not self.partitions:
            return None
        if self.topic_id is not None and self.id_revision == self.created:
            return self.topic_id
        return derived_topic_id(name, self.created)

    def incarnation(self, partition: int) -> int:
        found = self.created
        for first, marker in self.cuts:
            if first <= partition:
                found = max(found, marker)
        return found


@dataclass(frozen=True, slots=True)
class Plan:
    """One topic change as an etcd transaction."""

    partitions: int
    compare: dict[bytes, int]
    puts: dict[bytes, bytes]
    deletes: list[bytes]
    cuts: Cuts | None  # written too (None: left as it is)


def parse_cuts(value: bytes) -> Cuts:
    cuts = []
    for part in value.decode(errors="replace").split():
        first, _, marker = part.partition("@")
        if first.isdigit() and marker.isdigit():
            cuts.append((int(first), int(marker)))
    return tuple(sorted(cuts))


def format_cuts(cuts: Cuts) -> bytes:
    return " ".join(f"{first}@{marker}" for first, marker in cuts).encode()


def _name(text: str) -> str:
    return quote(text, safe="")


def parse_id(value: bytes | None) -> UUID | None:
    if value is None:
        return None
    try:
        return UUID(value.decode(errors="replace"))
    except ValueError:
        return None


class ClusterTopics:
    """The cluster's topics for one node: etcd's, as last seen (``states``), applied to the
    core, written with compare-and-set, and judged against offsets."""

    def __init__(
        self,
        core: Coordinator,
        store: EtcdStore,
        prefix: str,
        *,
        now: Callable[[], float],
        dispatch: Callable[[list[Outgoing]], None],
        keep: Callable[[], None],
    ) -> None:
        self.core = core
        self.store = store
        self._root = f"{prefix}/topic".encode()  # both prefixes: one read, one watch
        self._topics = f"{prefix}/topics/".encode()
        self._cuts = f"{prefix}/topic-cuts/".encode()
        self._ids = f"{prefix}/topic-ids/".encode()
        self._now = now
        self._dispatch = dispatch
        self._keep = keep  # writes the offset deletions a change made (the keeper's way)
        self.states: dict[str, TopicState] = {}
        self.pending: Counter[str] = Counter()  # local changes not written yet, by topic
        self.seen: Counter[str] = Counter()  # etcd's changes applied, by topic
        self.next_revision = 0  # where a watch goes on from: nothing before it is missed
        self._resyncing: asyncio.Task[None] | None = None
        core.offsets.keep_forgotten = True

    # --- reading ----------------------------------------------------------------------

    async def load(self, *, force: bool = False) -> int:
        """etcd's topics now, applied where newer than what was seen (``force``: the core
        set to them whatever it holds: a change of its own was not kept). The revision
        read at."""
        entries, revision = await self.store.read_prefix(self._root)
        self._snapshot(entries, revision, force=force)
        self.next_revision = max(self.next_revision, revision + 1)
        return revision

    async def watch(self, alive: Callable[[], None] | None = None) -> None:
        """Apply the changes etcd makes, from ``next_revision`` on, until cancelled;
        ``alive`` is told of each (and each time the watch is made again)."""
        changes = self.store.watch_prefix(self._root, self.next_revision, alive=alive)
        async for change in changes:
            if alive is not None:
                alive()
            self._changed(change)
            # the same revision again: a transaction's other key may not be delivered yet
            self.next_revision = max(self.next_revision, change.revision)

    def _changed(self, change: Change) -> None:
        found = self._parse_key(change.key)
        if found is None:
            return
        kind, name = found
        old = self.states.get(name, TopicState())
        if kind == "cuts":
            if change.revision <= old.cuts_revision:
                return
            cuts = parse_cuts(change.value or b"")
            new = replace(old, cuts=cuts, cuts_revision=change.revision)
        elif kind == "id":
            if change.revision <= old.id_revision:
                return
            new = replace(old, topic_id=parse_id(change.value), id_revision=change.revision)
        else:
            if change.revision <= old.revision:
                return  # a load read it already, or a watch made again delivers it again
            partitions = self._count(change.key, change.value)
            if partitions is None:
                return
            created = change.created if partitions else 0
            new = replace(old, partitions=partitions, created=created, revision=change.revision)
        self._apply(name, old, new)

    def _snapshot(self, entries: Mapping[bytes, Entry], revision: int, *, force: bool) -> None:
        found: dict[str, dict[str, Entry]] = {}
        for key, entry in entries.items():
            parsed = self._parse_key(key)
            if parsed is not None:
                found.setdefault(parsed[1], {})[parsed[0]] = entry
        names = set(found) | set(self.states)
        if force:
            names |= set(self.core.topics.partitions)
        for name in sorted(names):
            old = self.states.get(name, TopicState())
            new = old
            held = found.get(name, {})
            topic, cuts, id_ = held.get("topic"), held.get("cuts"), held.get("id")
            if topic is not None and topic.revision > old.revision:
                partitions = self._count(self._topics + _name(name).encode(), topic.value)
                if partitions is not None:
                    new = replace(
                        new, partitions=partitions, created=topic.created, revision=topic.revision
                    )
            elif topic is None and old.partitions and old.revision < revision:  # deleted
                new = replace(new, partitions=0, created=0, revision=revision)
            if cuts is not None and cuts.revision > old.cuts_revision:
                new = replace(new, cuts=parse_cuts(cuts.value), cuts_revision=cuts.revision)
            if id_ is not None and id_.revision > old.id_revision:
                new = replace(new, topic_id=parse_id(id_.value), id_revision=id_.revision)
            if new != old or force:
                self._apply(name, old, new)

    def _parse_key(self, key: bytes) -> tuple[str, str] | None:
        for kind, prefix in (("topic", self._topics), ("cuts", self._cuts), ("id", self._ids)):
            if key.startswith(prefix) and b"/" not in key[len(prefix) :]:
                return kind, unquote(key[len(prefix) :].decode(errors="replace"))
        return None

    @staticmethod
    def _count(key: bytes, value: bytes | None) -> int | None:
        if value is None:
            return 0
        try:
            return max(int(value), 0)
        except ValueError:
            log.warning("topic_unreadable", key=key.decode(errors="replace"))
            return None

    # --- applying ---------------------------------------------------------------------

    def _apply(self, name: str, old: TopicState, new: TopicState) -> None:
        """``new`` is etcd's state of ``name`` now, seen by a read or the watch: into the
        core (whatever a change of this node's still on its way made of it: that change is
        refused now), the offsets of every partition no longer of the incarnation they were
        committed to forgotten (and deleted from etcd)."""
        self.states[name] = new
        self.seen[name] += 1
        core, now = self.core, self._now()
        out: list[Outgoing] = []
        if old.partitions and new.partitions and old.created != new.created:
            out += core.topic_changed_elsewhere(name, 0, now)  # deleted, created again
        else:
            shared = min(old.partitions, new.partitions)
            changed = [p for p in range(shared) if old.incarnation(p) != new.incarnation(p)]
            if changed:
                core.offsets.forget_topic(name, changed[0])
        out += core.topic_changed_elsewhere(name, new.partitions, now, new.id_of(name))
        self._dispatch(out)
        self._keep()

    # --- writing ----------------------------------------------------------------------

    def held(self, record: TopicRecord) -> int:
        """A change of this node's is on its way to etcd: offsets committed meanwhile are
        judged once it is written. Returns what it is made against (a change of the topic
        seen since refuses it)."""
        self.pending[record.name] += 1
        return self.seen[record.name]

    def plan(self, name: str, partitions: int, topic_id: UUID | None = None) -> Plan | None:
        """The transaction of a change to ``partitions`` (0: deleted); a creation writes
        ``topic_id`` too."""
        state = self.states.get(name, TopicState())
        if partitions == state.partitions:
            return None
        key = self._topics + _name(name).encode()
        cuts_key = self._cuts + _name(name).encode()
        id_key = self._ids + _name(name).encode()
        exists = state.revision if state.partitions else 0
        compare = {key: exists, cuts_key: state.cuts_revision}
        if partitions <= 0:  # deleted: emptied cuts stand for it (a late creation fails)
            return Plan(0, compare, {cuts_key: b""}, [key, id_key], ())
        count = str(partitions).encode()
        if not state.partitions and topic_id is not None:  # the id first: watched first
            return Plan(partitions, compare, {id_key: str(topic_id).encode(), key: count}, [], None)
        if partitions > state.partitions:
            return Plan(partitions, compare, {key: count}, [], None)
        cuts = (*(c for c in state.cuts if c[0] < partitions), (partitions, exists + 1))
        return Plan(partitions, compare, {key: count, cuts_key: format_cuts(cuts)}, [], cuts)

    async def write(self, records: Iterable[tuple[TopicRecord, int | None]]) -> set[str]:
        """This node's topic changes (each with what ``held`` returned), in order, each a
        compare-and-set; the topics whose change etcd does not hold (refused, or its
        outcome unknown: then the core takes etcd's topics back)."""
        records = list(records)
        failed: set[str] = set()
        try:
            for record, seen in records:
                if record.name not in failed and not await self._write(record, seen):
                    failed.add(record.name)
        except BaseException:
            self._resync_soon()  # cancelled mid-way (the keeper gave the batch up)
            raise
        finally:
            for record, _ in records:
                self.pending[record.name] -= 1
            self.pending = +self.pending  # without the zeros
        if failed:
            with contextlib.suppress(Exception):  # else the watch's next resync does it
                await self.load(force=True)
        return failed

    async def _write(self, record: TopicRecord, seen: int | None) -> bool:
        name = record.name
        if seen is not None and seen != self.seen[name]:
            log.warning("topic_write_refused", topic=name, why="it changed meanwhile")
            return False
        plan = self.plan(name, record.partitions, record.topic_id)
        if plan is None:
            return True
        try:
            revision = await self.store.write_if(plan.compare, plan.puts, plan.deletes)
        except Exception as exc:  # its outcome is unknown: it may land, or not
            log.error("topic_write_failed", topic=name, error=type(exc).__name__)
            return False
        if revision is None:
            log.warning("topic_write_refused", topic=name, why="it changed in etcd")
            return False
        old = self.states.get(name, TopicState())
        if revision > old.revision:  # the core made this change already: etcd's now
            created = old.partitions == 0 < plan.partitions
            id_written = created or not plan.partitions
            self.states[name] = TopicState(
                partitions=plan.partitions,
                created=(old.created if old.partitions else revision) if plan.partitions else 0,
                revision=revision,
                cuts=old.cuts if plan.cuts is None else plan.cuts,
                cuts_revision=old.cuts_revision if plan.cuts is None else revision,
                topic_id=(record.topic_id if created else None) if id_written else old.topic_id,
                id_revision=revision if id_written else old.id_revision,
            )
        return True

    def _resync_soon(self) -> None:
        if self._resyncing is None or self._resyncing.done():
            self._resyncing = asyncio.get_running_loop().create_task(self._resync())

    async def _resync(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.load(force=True), self.store.longest_call_s)

    # --- offsets ----------------------------------------------------------------------

    def stamp(self, record: OffsetRecord) -> OffsetRecord:
        """A commit with the incarnation its partition has now (none while a change of
        this node's to its topic is on its way: it is judged when written)."""
        if record.incarnation or self.pending.get(record.topic):
            return record
        state = self.states.get(record.topic)
        if state is None or record.partition >= state.partitions:
            return record
        return msgspec.structs.replace(record, incarnation=state.incarnation(record.partition))

    def resolve(self, record: OffsetRecord) -> OffsetRecord | None:
        """A commit about to be written, with its incarnation; None if its partition is
        no longer the one it was committed to (the topic deleted, cut, or made again)."""
        state = self.states.get(record.topic)
        if state is None or record.partition >= state.partitions:
            return None
        now = state.incarnation(record.partition)
        if not record.incarnation:
            return msgspec.structs.replace(record, incarnation=now)
        return record if record.incarnation == now else None

    def current(self, record: OffsetRecord, written_at: int) -> bool:
        """Whether an offset etcd holds (last written at revision ``written_at``) belongs
        to its partition as it is now."""
        state = self.states.get(record.topic)
        if state is None or record.partition >= state.partitions:
            return False
        if record.incarnation:
            return record.incarnation == state.incarnation(record.partition)
        return written_at > state.created  # kept by an older version: after the creation
