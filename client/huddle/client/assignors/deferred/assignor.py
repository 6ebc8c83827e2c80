"""``cooperative-deferred``: incremental cooperative rebalancing, Designs II and III.

Cooperative-sticky, plus a memory. Partitions a departed member had are *lost*: they are
held for nobody while ``scheduled_rebalance_max_delay_ms`` counts down across rounds
(every member is told the remaining time, so the group comes back when it runs out), in
case the member returns: a static member by its instance id, a dynamic one as a member
new to the group that owns nothing. Once the delay has run out they go to such members,
or to everyone. New members are put to work at once with the two-step revoke, then hand
over move; ``max_moves_per_round`` paces those moves (Design III) and consecutive
revoking rounds caused by membership changes back off exponentially.

The leader's memory lives in its own instance; every member's instance learns the
running delay in ``on_assignment``, so a member that becomes leader keeps it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from huddle.client.assignors._claims import Ownership, resolve
from huddle.client.assignors._layout import Layout
from huddle.client.assignors._order import member_order
from huddle.client.assignors.base import (
    ASSIGNORS,
    Assignor,
    GroupAssignment,
    MemberAssignment,
    MemberSubscription,
    RebalanceProtocol,
)
from huddle.client.assignors.deferred.lost import Origin, Record, Routing, find_lost, route
from huddle.client.assignors.deferred.pace import Pacer, pick
from huddle.client.assignors.deferred.plan import Targets, plan_round
from huddle.client.assignors.deferred.wire import (
    decode_last_assigned,
    decode_state,
    encode_last_assigned,
    encode_state,
)
from huddle.client.checks import MAX_INT32, require_number
from huddle.protocol.embedded import TopicPartition


@ASSIGNORS.register
class DeferredAssignor(Assignor):
    """Kafka Connect's incremental cooperative assignor, for partitions."""

    name = "cooperative-deferred"
    supported_protocols = (RebalanceProtocol.COOPERATIVE,)
    needs_huddle_format = True  # revoked partitions and a scheduled rebalance delay

    def __init__(
        self,
        *,
        scheduled_rebalance_max_delay_ms: int = 300_000,
        max_moves_per_round: int | None = None,
        move_pause_ms: int = 0,
        revoke_backoff_initial_ms: int = 1_000,
        revoke_backoff_max_ms: int | None = None,
    ) -> None:
        if max_moves_per_round is not None:  # None: no limit
            require_number("max_moves_per_round", max_moves_per_round, positive=True, whole=True)
        delays = {
            "scheduled_rebalance_max_delay_ms": scheduled_rebalance_max_delay_ms,
            "move_pause_ms": move_pause_ms,
            "revoke_backoff_initial_ms": revoke_backoff_initial_ms,
            "revoke_backoff_max_ms": revoke_backoff_max_ms or 0,
        }
        for setting, value in delays.items():  # sent to members: whole ms of 32 bits
            require_number(setting, value, positive=False, whole=True, most=MAX_INT32)
        self.max_delay_ms = scheduled_rebalance_max_delay_ms
        self.pacer = Pacer(
            max_moves=max_moves_per_round,
            pause_ms=move_pause_ms,
            backoff_initial_ms=revoke_backoff_initial_ms,
            backoff_max_ms=(
                scheduled_rebalance_max_delay_ms
                if revoke_backoff_max_ms is None
                else revoke_backoff_max_ms
            ),
        )
        self.record: Record | None = None
        self.deadline: float | None = None
        """when lost partitions stop being held (None: no delay running)."""
        self.known: dict[str, int] | None = None
        """partition counts the last leader assigned (learned as a follower)."""
        self.moving: frozenset[TopicPartition] = frozenset()
        self.last_assigned: frozenset[TopicPartition] = frozenset()
        """this member's partitions in its last assignment (told in its subscription)."""
        """what the last leader's round revoked to hand over (learned as a follower)."""
        self._issued: set[tuple[frozenset[TopicPartition], int, bytes]] = set()
        """what our last round handed out, until ``on_assignment`` brings one of them."""

    # --- members ----------------------------------------------------------------------

    def subscription_user_data(
        self, topics: frozenset[str], owned: frozenset[TopicPartition]
    ) -> bytes:
        return encode_last_assigned(sorted((tp.topic, tp.partition) for tp in self.last_assigned))

    def on_assignment(self, assignment: MemberAssignment, generation: int) -> None:
        self.last_assigned = frozenset(assignment.partitions)
        issued, self._issued = self._issued, set()
        if _key(assignment) in issued:  # our own round: the record is now the group's
            if self.record is not None:
                self.record.generation = generation
            return
        state = decode_state(assignment.user_data)
        if state is None:
            remaining = assignment.scheduled_rebalance_delay_ms
        else:
            remaining = state.lost_delay_ms
            self.known = dict(state.partitions)
            self.moving = frozenset(TopicPartition(t, p) for t, p in state.moving)
        self.deadline = self.now_ms() + remaining if remaining > 0 else None

    # --- the leader -------------------------------------------------------------------

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> GroupAssignment:
        if not subscriptions:
            return {}
        now = self.now_ms()
        order = member_order(subscriptions)
        members = [subscriptions[member] for member in order]
        layout = Layout(partitions_per_topic, frozenset().union(*(s.topics for s in members)))
        ownership = resolve(layout, members, self.claim_rules)
        record = self._current_record(members)
        routing = self._route_lost(layout, ownership, members, record, now)
        targets = plan_round(layout, ownership, members, routing.held, routing.gifts)
        changed = record is None or record.members != frozenset(order)
        revoking, come_back_at = self._pace(targets, now, membership_changed=changed)
        result = self._build(order, members, layout, ownership, targets, revoking, routing, now)
        if come_back_at is not None:
            self._delay_all(result, math.ceil(come_back_at - now))
        return result

    def _current_record(self, members: Sequence[MemberSubscription]) -> Record | None:
        """Our record, unless another leader has assigned since it was delivered."""
        record = self.record
        if record is not None and record.generation is not None:
            latest = max(sub.generation for sub in members)
            if latest > record.generation:
                self.record = record = None
        return record

    def _route_lost(
        self,
        layout: Layout,
        ownership: Ownership,
        members: Sequence[MemberSubscription],
        record: Record | None,
        now: float,
    ) -> Routing:
        running = self.deadline is not None and now < self.deadline
        lost = find_lost(
            layout,
            ownership.owner,
            members,
            record,
            deadline_running=running,
            known=self.known,
            moving=self.moving | _given_up(members),
        )
        if lost and self.deadline is None:
            self.deadline = now + self.max_delay_ms
        expired = self.deadline is not None and now >= self.deadline
        if record is None:
            candidates = [n for n, sub in enumerate(members) if not sub.owned]
        else:
            candidates = [
                n
                for n, sub in enumerate(members)
                if not sub.owned and sub.member_id not in record.members
            ]
        # A member that owns nothing is taken for a returning one only where enough
        # partitions exist that it would have had some; otherwise it is a spare member.
        candidates = [n for n in candidates if _would_have_work(layout, members, n)]
        routing = route(lost, layout, members, candidates, expired=expired)
        if not routing.held:
            self.deadline = None
        return routing

    def _pace(
        self, targets: Targets, now: float, *, membership_changed: bool
    ) -> tuple[set[int], float | None]:
        wanted = sum(map(len, targets.moves))
        decision = self.pacer.decide(wanted, now, membership_changed=membership_changed)
        if decision.moves == wanted:
            return {pid for pids in targets.moves for pid in pids}, decision.come_back_at
        loads = [len(a) + len(m) for a, m in zip(targets.assigned, targets.moves, strict=True)]
        return pick(targets.moves, loads, decision.moves), decision.come_back_at

    def _build(
        self,
        order: Sequence[str],
        members: Sequence[MemberSubscription],
        layout: Layout,
        ownership: Ownership,
        targets: Targets,
        revoking: set[int],
        routing: Routing,
        now: float,
    ) -> GroupAssignment:
        objects = layout.complete(list(ownership.objects))
        held_ms = math.ceil(self.deadline - now) if self.deadline is not None else 0
        result: GroupAssignment = {}
        holders: dict[TopicPartition, Origin] = {}
        rounds: list[tuple[frozenset[TopicPartition], frozenset[TopicPartition]]] = []
        for number in range(len(members)):
            moves = targets.moves[number]
            keep = [pid for pid in moves if pid not in revoking]
            partitions = frozenset(objects[pid] for pid in (*targets.assigned[number], *keep))
            revoked = frozenset(
                objects[pid] for pid in (*targets.stray[number], *moves) if pid not in keep
            )
            rounds.append((partitions, revoked))
        # In flight: everything this round leaves to nobody that is not held as lost (moves
        # revoked now, claims tied in one generation, partitions given up before the join).
        given = {tp for partitions, _ in rounds for tp in partitions}
        held = {objects[pid] for pid in routing.held}
        moving = sorted(tp for tp in objects if tp is not None and tp not in given | held)
        user_data = encode_state(held_ms, dict(layout.count), [(t, p) for t, p in moving])
        for (member_id, sub), (partitions, revoked) in zip(
            zip(order, members, strict=True), rounds, strict=True
        ):
            result[member_id] = MemberAssignment(
                partitions=partitions,
                revoked=revoked,
                # a member that revokes rejoins at once: a delay goes only with no revocation
                scheduled_rebalance_delay_ms=0 if revoked else held_ms,
                user_data=user_data,
            )
            origin = Origin(member_id, sub.group_instance_id)
            holders.update(dict.fromkeys(partitions, origin))
        self.record = Record(
            members=frozenset(order),
            holders=holders,
            held={objects[pid]: origin for pid, origin in routing.held.items()},
        )
        self._issued = {_key(a) for a in result.values()}
        self.known = None  # our own record says more
        self.moving = frozenset()
        return result

    def _delay_all(self, result: GroupAssignment, delay_ms: int) -> None:
        """The group comes back after ``delay_ms`` at the latest."""
        for member_id, a in result.items():
            current = a.scheduled_rebalance_delay_ms
            if a.revoked:
                continue  # it rejoins at once anyway (the seed: no delay with a revocation)
            if current <= 0 or delay_ms < current:
                result[member_id] = MemberAssignment(
                    partitions=a.partitions,
                    revoked=a.revoked,
                    scheduled_rebalance_delay_ms=delay_ms,
                    user_data=a.user_data,
                )
        self._issued = {_key(a) for a in result.values()}


def _given_up(members: Sequence[MemberSubscription]) -> frozenset[TopicPartition]:
    """Partitions present members were last assigned and no longer claim: they gave
    them up (a topic dropped before the join), so those are in flight, not lost."""
    gone: set[TopicPartition] = set()
    for sub in members:
        for topic, partition in decode_last_assigned(sub.user_data):
            tp = TopicPartition(topic, partition)
            if tp not in sub.owned:
                gone.add(tp)
    return frozenset(gone)


def _would_have_work(layout: Layout, members: Sequence[MemberSubscription], number: int) -> bool:
    """Whether member ``number`` would get a partition if its topics were shared evenly by
    every member that subscribes to any of them."""
    topics = members[number].topics & frozenset(layout.topics)
    partitions = sum(layout.count[topic] for topic in topics)
    sharers = sum(1 for sub in members if sub.topics & topics)
    return sharers <= partitions


def _key(assignment: MemberAssignment) -> tuple[frozenset[TopicPartition], int, bytes]:
    """What identifies an assignment of ours when it comes back through the wire."""
    return (
        frozenset(assignment.partitions),
        assignment.scheduled_rebalance_delay_ms,
        assignment.user_data,
    )
