"""Design II's "lost" partitions: found from the leader's record, then routed.

A partition is lost when the previous round (this instance's own record, as leader) gave
it to a member that is not here now, or held it for one, and no present member owns it.
Partitions the record does not know (new topics, grown partition counts, partitions in
flight between two members) are never lost. Without a record, a follower that learned the
previous leader's partition counts takes the unowned partitions among them as lost, except
those that leader's round revoked to hand over (in flight); one that only learned of a
running delay holds the unowned partitions of topics that present members own, origin
unknown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from huddle.client.assignors._claims import NOBODY
from huddle.client.assignors._layout import Layout
from huddle.client.assignors.base import MemberSubscription
from huddle.protocol.embedded import TopicPartition


@dataclass(frozen=True, slots=True)
class Origin:
    """Who had a partition: a member id and its static instance id (None: unknown)."""

    member_id: str | None = None
    instance_id: str | None = None


@dataclass(slots=True)
class Record:
    """What this instance, as leader, handed out in its last round."""

    members: frozenset[str]
    holders: dict[TopicPartition, Origin]
    """partition -> the member whose assignment listed it."""
    held: dict[TopicPartition, Origin]
    """lost partitions held for nobody -> who had them before they were lost."""
    generation: int | None = None
    """the generation the round was delivered in (``on_assignment``); None: not known."""


@dataclass(slots=True)
class Routing:
    """Where the lost partitions (pids) go this round."""

    gifts: dict[int, int] = field(default_factory=dict)
    """pid -> number of the member that gets it back (or takes it over) at once."""
    held: dict[int, Origin] = field(default_factory=dict)
    """pid -> origin: assigned to nobody while the delay runs."""
    freed: list[int] = field(default_factory=list)
    """pids no longer lost: dealt like any unowned partition."""


def pid_of(layout: Layout, tp: TopicPartition) -> int | None:
    count = layout.count.get(tp.topic)
    if count is None or not 0 <= tp.partition < count:
        return None
    return layout.start[tp.topic] + tp.partition


def find_lost(
    layout: Layout,
    owner: Sequence[int],
    members: Sequence[MemberSubscription],
    record: Record | None,
    *,
    deadline_running: bool,
    known: Mapping[str, int] | None = None,
    moving: frozenset[TopicPartition] = frozenset(),
) -> dict[int, Origin]:
    """pid -> origin of every lost partition. ``known``: the partition counts the previous
    leader assigned, as a follower learned them (None: this instance never had them);
    ``moving``: what that leader's round revoked to hand over: in flight, not lost."""
    if record is None:
        if known is not None:
            unowned = _previously_assigned_unowned(layout, owner, known)
            for tp in moving:
                pid = pid_of(layout, tp)
                if pid is not None:
                    unowned.pop(pid, None)
            return unowned
        return _assumed_lost(layout, owner) if deadline_running else {}
    lost: dict[int, Origin] = {}
    present = {sub.member_id for sub in members}
    for tp, origin in record.holders.items():
        if origin.member_id not in present:
            _note(lost, layout, owner, tp, origin)
    for tp, origin in record.held.items():
        _note(lost, layout, owner, tp, origin)
    return lost


def _note(
    lost: dict[int, Origin],
    layout: Layout,
    owner: Sequence[int],
    tp: TopicPartition,
    origin: Origin,
) -> None:
    pid = pid_of(layout, tp)
    if pid is not None and owner[pid] == NOBODY:
        lost[pid] = origin


def _previously_assigned_unowned(
    layout: Layout, owner: Sequence[int], known: Mapping[str, int]
) -> dict[int, Origin]:
    """Partitions the previous leader assigned that nobody owns now: their owner is gone
    (it may have been that leader). Partitions beyond the counts it knew are new."""
    lost: dict[int, Origin] = {}
    for topic in layout.topics:
        start = layout.start[topic]
        limit = min(layout.count[topic], known.get(topic, 0))
        lost.update((pid, Origin()) for pid in range(start, start + limit) if owner[pid] == NOBODY)
    return lost


def _assumed_lost(layout: Layout, owner: Sequence[int]) -> dict[int, Origin]:
    lost: dict[int, Origin] = {}
    for topic in layout.topics:
        start = layout.start[topic]
        span = range(start, start + layout.count[topic])
        if any(owner[pid] != NOBODY for pid in span):
            lost.update((pid, Origin()) for pid in span if owner[pid] == NOBODY)
    return lost


def route(
    lost: Mapping[int, Origin],
    layout: Layout,
    members: Sequence[MemberSubscription],
    candidates: Sequence[int],
    *,
    expired: bool,
) -> Routing:
    """Back to its owner if that member is here (same member id, or same static instance
    id); otherwise to a candidate (a member new to the group that owns nothing), spread
    evenly, unless it was a static member's and the delay still runs; otherwise held,
    or freed once the delay has expired."""
    topic_of = layout.topic_of()
    by_member = {sub.member_id: number for number, sub in enumerate(members)}
    by_instance = {
        sub.group_instance_id: number
        for number, sub in enumerate(members)
        if sub.group_instance_id is not None
    }
    routing = Routing()
    given = dict.fromkeys(candidates, 0)
    for pid in sorted(lost):
        origin = lost[pid]
        topic = layout.topics[topic_of[pid]]
        back = by_member.get(origin.member_id) if origin.member_id is not None else None
        if back is None and origin.instance_id is not None:
            back = by_instance.get(origin.instance_id)
        if back is not None:
            if topic in members[back].topics:
                routing.gifts[pid] = back
            else:
                routing.freed.append(pid)
            continue
        # A static member's partitions wait for its instance id until the delay runs out.
        reserved = origin.instance_id is not None and not expired
        takers = [] if reserved else [c for c in candidates if topic in members[c].topics]
        if takers:
            taker = min(takers, key=lambda c: (given[c], c))
            given[taker] += 1
            routing.gifts[pid] = taker
        elif expired:
            routing.freed.append(pid)
        else:
            routing.held[pid] = origin
    return routing
