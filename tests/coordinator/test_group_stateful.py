"""A hypothesis state machine that drives one group with a handful of members.

Five member "slots" (three dynamic, two static; two of them share a connection) act at
random against one group through the harness ``Driver``: KIP-394 joins, static joins and
restarts, rejoins with the same or changed metadata, SyncGroup (the leader assigns
``b"<who>@<generation>"`` to every member its JoinGroup answer listed), heartbeats, leaves,
offset commits, dropped connections, topic changes and time passing. Each slot acts on what
it believes (member id, generation, whether it leads), learnt only from the answers that
reached it; ``behave`` steps make a slot act as a well-behaved client would.

After every step the group must make sense: generations never go back, a settled group has
one leader and it was told so, every assignment handed out belongs to its member and its
generation, heartbeats and commits are fenced by member and generation exactly as
REFERENCE sections 1, 3 and 4 say, no member appears that nobody was told of, and every
phase and every member has a deadline that will move it on. When a run ends, a minute of
good behaviour must make the group Stable with every slot in it, and ten quiet minutes
after that must answer every request still open on a live connection and empty the group.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from huddle.coordinator.config import GroupConfig
from huddle.coordinator.group import Group
from huddle.coordinator.state import GroupState
from huddle.coordinator.values import DisconnectGraceEnds
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    AlterTopicsRequest,
    AlterTopicsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    Protocol,
    RebalanceStarted,
    Reply,
    Response,
    ServerFrame,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicMetadataChanged,
    TopicSpec,
)
from tests.harness import Driver

E = ErrorCode
S = GroupState

GROUP = "g"
TOPIC = "t"
PARTITIONS = 4  # commits go to these; the topic grows to 5 and back
ADMIN_CONN = 1_000  # creates and alters the topic; never holds a member
INSTANCES: tuple[str | None, ...] = (None, None, None, "static-a", "static-b")
DYNAMIC = [i for i, inst in enumerate(INSTANCES) if inst is None]
STATIC = [i for i, inst in enumerate(INSTANCES) if inst is not None]
SLOTS = st.integers(0, len(INSTANCES) - 1)
SHARED_CONN = (0, 1)  # these slots start on one connection (one process, two members)
SESSION_MS = (10_000, 10_000, 6_000, 10_000, 20_000)
REBALANCE_MS = (15_000, 15_000, -1, 15_000, 25_000)  # -1: the session timeout
# Protocol lists a member may send. All share "range", so the group always has a protocol;
# the third prefers "roundrobin", so restarts and rejoins may change the group's choice.
VARIANTS: tuple[tuple[Protocol, ...], ...] = (
    (Protocol(name="range", metadata=b"v0"),),
    (Protocol(name="range", metadata=b"v1"),),
    (Protocol(name="roundrobin", metadata=b"v0"), Protocol(name="range", metadata=b"v0")),
)
HEARTBEAT_MS = 1_000  # how often well-behaved clients act while converging
CONVERGE_ROUNDS = 60  # a minute: beyond a rebalance timeout plus a session timeout
QUIET_MS = 600_000  # ten minutes: far beyond every deadline in play

JOIN_ERRORS = {
    E.NONE,
    E.MEMBER_ID_REQUIRED,
    E.UNKNOWN_MEMBER_ID,
    E.FENCED_INSTANCE_ID,
    E.REBALANCE_IN_PROGRESS,
}
SYNC_ERRORS = {
    E.NONE,
    E.UNKNOWN_MEMBER_ID,
    E.FENCED_INSTANCE_ID,
    E.ILLEGAL_GENERATION,
    E.REBALANCE_IN_PROGRESS,
}


def assignment_for(who: str, generation: int) -> bytes:
    return f"{who}@{generation}".encode()


def identity_problem(group: Group, member_id: str, instance: str | None) -> ErrorCode:
    """How the coordinator must answer a request speaking for this member (fencing first)."""
    if instance is not None:
        owner = group.static.get(instance)
        if owner is None:
            return E.UNKNOWN_MEMBER_ID
        if owner != member_id:
            return E.FENCED_INSTANCE_ID
    return E.NONE if member_id in group.members else E.UNKNOWN_MEMBER_ID


@dataclass
class Slot:
    """One client, and what it believes from the answers that reached it."""

    index: int
    instance: str | None
    conn: int
    member_id: str = ""
    generation: int = -1
    variant: int = 0
    leads: list[JoinGroupMember] | None = None  # the member list, when told it leads
    synced: tuple[int, bytes] | None = None  # generation and assignment of its last sync
    must_rejoin: bool = False  # told a rebalance began, or its generation is gone

    @property
    def who(self) -> str:
        """Whom its assignment names: a static member's instance outlives its member id."""
        return self.instance or self.member_id

    def forget(self) -> None:
        self.member_id = ""
        self.generation = -1
        self.leads = None
        self.synced = None
        self.must_rejoin = False


@dataclass(frozen=True)
class Sent:
    """A request a slot sent, as it was when sent."""

    slot: int
    conn: int
    kind: str
    member_id: str
    generation: int


class SpyDriver(Driver):
    """The harness driver, also keeping every frame the core emits, delivered or not."""

    def __init__(self, config: GroupConfig) -> None:
        super().__init__(config)
        self.frames: list[tuple[int, ServerFrame, bool]] = []

    def _collect(self, out: list[tuple[int, Any]]) -> None:
        for conn_id, frame in out:
            self.frames.append((conn_id, frame, conn_id not in self.closed))
        super()._collect(out)


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.driver = SpyDriver(GroupConfig())
        self.conns = itertools.count(1)
        self.slots = [Slot(i, inst, next(self.conns)) for i, inst in enumerate(INSTANCES)]
        for index in SHARED_CONN:
            self.slots[index].conn = self.slots[SHARED_CONN[0]].conn
        self.sent: dict[int, Sent] = {}
        self.held: set[int] = set()  # JoinGroup/SyncGroup requests maybe not answered yet
        self.seen_frames = 0
        self.told: set[str] = set()  # every member id a JoinGroup answer carried
        self.told_leader: set[tuple[int, str]] = set()  # (generation, member id) told it leads
        # whom the leader's member list named, by group object and generation
        self.listed: dict[tuple[Group, int], frozenset[str]] = {}
        self.incarnation: Group | None = None  # the group object whose generations we track
        self.max_generation = 0
        self.offsets = itertools.count(1)
        self.partitions = PARTITIONS
        self.healthy = False  # set up, and no step or check has failed

    # --- plumbing ----------------------------------------------------------------------

    @contextmanager
    def _checked(self) -> Iterator[None]:
        """Mark the machine unhealthy while a step or check runs, so that ``teardown``
        stays out of the way of a failure."""
        self.healthy = False
        yield
        self._absorb()
        self.healthy = True

    @property
    def group(self) -> Group:
        """The group; while the coordinator has forgotten it, a new empty one stands in
        (an absent group answers as a new, empty one would)."""
        return self.driver.core.groups.get(GROUP) or Group(GROUP)

    def _send(self, slot: Slot, kind: str, request: Any, generation: int = -1) -> Response | None:
        """Send for a slot: the answer, or None while the coordinator holds the request."""
        cid = self.driver.send(slot.conn, request)
        self.sent[cid] = Sent(slot.index, slot.conn, kind, request.member_id, generation)
        if not self.driver.answered(cid):
            self.held.add(cid)
            return None
        return self.driver.response(cid)

    def _absorb(self) -> None:
        """Read the frames produced since last time: check them, update beliefs."""
        frames = self.driver.frames[self.seen_frames :]
        self.seen_frames = len(self.driver.frames)
        for conn, frame, delivered in frames:
            if isinstance(frame, RebalanceStarted) and delivered:
                for slot in self.slots:
                    if slot.conn == conn:
                        slot.must_rejoin = True
            if not isinstance(frame, Reply) or frame.correlation_id not in self.sent:
                continue  # notices, and the admin's answers
            sent = self.sent[frame.correlation_id]
            response = frame.response
            if isinstance(response, JoinGroupResponse):
                self._check_join_answer(response)
            elif isinstance(response, SyncGroupResponse):
                self._check_sync_answer(sent, response)
            if delivered:
                self._learn(self.slots[sent.slot], sent, response)

    def _check_join_answer(self, response: JoinGroupResponse) -> None:
        assert response.error_code in JOIN_ERRORS, response
        if response.member_id:
            self.told.add(response.member_id)
        if response.error_code != E.NONE:
            return
        assert response.generation_id >= 1
        assert response.leader
        assert response.protocol_name in ("range", "roundrobin")
        if response.leader == response.member_id:
            self.told_leader.add((response.generation_id, response.member_id))
            listed = [m.member_id for m in response.members]
            assert response.member_id in listed, response
            assert len(set(listed)) == len(listed), response
            group = self.driver.core.groups.get(GROUP)
            if group is not None:
                # a later list for the same generation (a static leader restarting) names
                # the same members, under their instance ids
                who = frozenset(m.group_instance_id or m.member_id for m in response.members)
                key = (group, response.generation_id)
                assert self.listed.setdefault(key, who) == who, (self.listed[key], who)
        else:
            assert response.members == [], "only the leader gets the member list"
            assert not response.skip_assignment

    def _check_sync_answer(self, sent: Sent, response: SyncGroupResponse) -> None:
        assert response.error_code in SYNC_ERRORS, response
        if response.error_code == E.NONE:
            who = INSTANCES[sent.slot] or sent.member_id
            # an assignment handed out in generation G was made for this member in G
            assert response.assignment == assignment_for(who, sent.generation), (sent, response)

    @staticmethod
    def _learn(slot: Slot, sent: Sent, response: Response) -> None:
        if sent.member_id != slot.member_id:
            return  # about an identity the slot has let go of since
        code = response.error_code
        if isinstance(response, JoinGroupResponse):
            if code == E.NONE:
                slot.member_id = response.member_id
                slot.generation = response.generation_id
                leads = response.leader == response.member_id
                slot.leads = list(response.members) if leads else None
                slot.must_rejoin = False
            elif code == E.MEMBER_ID_REQUIRED:
                slot.member_id = response.member_id
                slot.generation = -1
        elif isinstance(response, SyncGroupResponse) and code == E.NONE:
            slot.synced = (sent.generation, response.assignment)
        elif isinstance(response, LeaveGroupResponse) and any(
            r.error_code == E.NONE for r in response.members
        ):
            slot.forget()
        if code in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            slot.forget()  # what a client does: start over with no member id
        elif code in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION) and sent.kind != "join":
            slot.must_rejoin = True

    # --- what a slot can send -----------------------------------------------------------

    def _join(self, slot: Slot, member_id: str) -> None:
        request = JoinGroupRequest(
            group_id=GROUP,
            member_id=member_id,
            group_instance_id=slot.instance,
            protocol_type="consumer",
            protocols=list(VARIANTS[slot.variant]),
            session_timeout_ms=SESSION_MS[slot.index],
            rebalance_timeout_ms=REBALANCE_MS[slot.index],
        )
        self._send(slot, "join", request)

    def _sync(self, slot: Slot) -> None:
        assignments = [
            SyncGroupAssignment(
                member_id=m.member_id,
                assignment=assignment_for(m.group_instance_id or m.member_id, slot.generation),
            )
            for m in slot.leads or []
        ]
        request = SyncGroupRequest(
            group_id=GROUP,
            generation_id=slot.generation,
            member_id=slot.member_id,
            group_instance_id=slot.instance,
            assignments=assignments,
        )
        self._send(slot, "sync", request, slot.generation)

    def _heartbeat(self, slot: Slot) -> None:
        """Heartbeat with what it knows; the answer follows REFERENCE section 1."""
        group = self.group
        problem = identity_problem(group, slot.member_id, slot.instance)
        state, generation = group.state, group.generation
        request = HeartbeatRequest(
            group_id=GROUP,
            generation_id=slot.generation,
            member_id=slot.member_id,
            group_instance_id=slot.instance,
        )
        response = self._send(slot, "heartbeat", request, slot.generation)
        assert isinstance(response, HeartbeatResponse)
        expected: ErrorCode
        if problem != E.NONE:
            expected = problem
        elif slot.generation != generation:
            expected = E.ILLEGAL_GENERATION
        elif state is S.PREPARING_REBALANCE:
            expected = E.REBALANCE_IN_PROGRESS
        else:
            expected = E.NONE
        assert response.error_code == expected, (state, generation, slot, response)

    def _waiting(self, slot: Slot) -> bool:
        """Has it a JoinGroup or SyncGroup still unanswered on its connection?"""
        self.held -= self.driver.replies.keys()
        mine = (self.sent[cid] for cid in self.held)
        return any(sent.slot == slot.index and sent.conn == slot.conn for sent in mine)

    def _behave(self, slot: Slot) -> None:
        """What a well-behaved client does next, given what it knows."""
        if self._waiting(slot):
            if slot.member_id and slot.generation >= 0:
                self._heartbeat(slot)
        elif not slot.member_id or slot.generation < 0 or slot.must_rejoin:
            self._join(slot, slot.member_id)
        elif slot.synced is None or slot.synced[0] != slot.generation:
            self._sync(slot)
        else:
            self._heartbeat(slot)
        self._absorb()

    def _converge(self) -> None:
        """Every client behaves, once a second, for up to a minute: the group must become
        Stable with exactly the clients' members, each holding this generation's assignment."""
        for _ in range(CONVERGE_ROUNDS):
            for slot in self.slots:
                self._behave(slot)
            if self._converged():
                return
            self.driver.advance(HEARTBEAT_MS)
            self._absorb()
        group = self.group
        assert group.is_(S.STABLE), group.state
        assert set(group.members) == {slot.member_id for slot in self.slots}, group.members
        for slot in self.slots:
            assert slot.synced == (group.generation, assignment_for(slot.who, group.generation))

    def _converged(self) -> bool:
        group = self.group
        return (
            group.is_(S.STABLE)
            and set(group.members) == {slot.member_id for slot in self.slots}
            and all(
                slot.synced == (group.generation, assignment_for(slot.who, group.generation))
                for slot in self.slots
            )
        )

    # --- setup -------------------------------------------------------------------------

    @initialize(
        delay=st.sampled_from([0, 100]), grace=st.sampled_from([-1, 500]), keep=st.booleans()
    )
    def configure(self, delay: int, grace: int, keep: bool) -> None:
        """``keep``: an admin commits an offset while the group is Empty, so the group (and
        its generation) lives for the whole run instead of being forgotten when it empties."""
        with self._checked():
            config = GroupConfig(
                initial_rebalance_delay_ms=delay, disconnect_grace_ms=grace, rebalance_notices=True
            )
            self.driver = SpyDriver(config)
            spec = TopicSpec(name=TOPIC, partitions=PARTITIONS)
            created = self.driver.response(
                self.driver.send(ADMIN_CONN, CreateTopicsRequest(topics=[spec]))
            )
            assert isinstance(created, CreateTopicsResponse)
            assert created.topics[0].error_code == E.NONE
            if keep:
                assert self.driver.commit(ADMIN_CONN, {(TOPIC, 0): 0}).error_code == E.NONE

    # --- rules -------------------------------------------------------------------------

    @rule(
        index=st.sampled_from(DYNAMIC),
        variant=st.integers(0, len(VARIANTS) - 1),
        second_step=st.booleans(),
    )
    def join_new(self, index: int, variant: int, second_step: bool) -> None:
        """A dynamic member (new, or restarted and so forgetting its id) joins with no id;
        with ``second_step`` it comes straight back with the id it was handed (KIP-394)."""
        with self._checked():
            slot = self.slots[index]
            slot.forget()
            slot.variant = variant
            self._join(slot, "")
            self._absorb()
            if second_step and slot.member_id:
                self._join(slot, slot.member_id)

    @rule(index=st.sampled_from(STATIC), variant=st.integers(0, len(VARIANTS) - 1))
    def join_static(self, index: int, variant: int) -> None:
        """A static member joins with an empty member id: its first join, or a restart
        that fences the member id it had (KIP-345)."""
        with self._checked():
            slot = self.slots[index]
            slot.forget()
            slot.variant = variant
            self._join(slot, "")

    @rule(index=SLOTS, change=st.booleans())
    def rejoin(self, index: int, change: bool) -> None:
        """JoinGroup again with the member id it knows, same or changed metadata."""
        with self._checked():
            slot = self.slots[index]
            if change:
                slot.variant = (slot.variant + 1) % len(VARIANTS)
            self._join(slot, slot.member_id)

    @rule(index=SLOTS)
    def sync(self, index: int) -> None:
        """SyncGroup in the generation it last learnt; a leader assigns every listed member."""
        with self._checked():
            self._sync(self.slots[index])

    @rule(index=SLOTS)
    def heartbeat(self, index: int) -> None:
        with self._checked():
            self._heartbeat(self.slots[index])

    @rule(index=SLOTS)
    def leave(self, index: int) -> None:
        """LeaveGroup by member id; a static slot names its instance too."""
        with self._checked():
            slot = self.slots[index]
            group = self.group
            if slot.instance is None:
                known = slot.member_id in group.members or slot.member_id in group.pending
                expected = E.NONE if slot.member_id and known else E.UNKNOWN_MEMBER_ID
            else:
                owner = group.static.get(slot.instance)
                if owner is None:
                    expected = E.UNKNOWN_MEMBER_ID
                elif slot.member_id and slot.member_id != owner:
                    expected = E.FENCED_INSTANCE_ID
                else:
                    expected = E.NONE
            ident = MemberIdentity(member_id=slot.member_id, group_instance_id=slot.instance)
            response = self.driver.response(
                self.driver.send(slot.conn, LeaveGroupRequest(group_id=GROUP, members=[ident]))
            )
            assert isinstance(response, LeaveGroupResponse)
            assert response.error_code == E.NONE
            assert [r.error_code for r in response.members] == [expected], (slot, response)
            if expected == E.NONE:
                gone = response.members[0].member_id
                assert gone not in self.group.members
                assert gone not in self.group.pending
                slot.forget()

    @rule(index=SLOTS, partition=st.integers(0, PARTITIONS - 1))
    def commit(self, index: int, partition: int) -> None:
        """OffsetCommit with the member id and generation it knows (REFERENCE section 4):
        a stale generation never commits, a gone or fenced member never commits."""
        with self._checked():
            slot = self.slots[index]
            group = self.group
            state, generation = group.state, group.generation
            simple = slot.generation < 0 and not slot.member_id
            if GROUP not in self.driver.core.groups and slot.generation >= 0:
                expected = E.ILLEGAL_GENERATION  # no group is running (Kafka's answer too)
            elif slot.generation < 0 and state is S.EMPTY:
                expected = E.NONE  # an Empty group only stores offsets: any member id
            elif simple:
                expected = E.UNKNOWN_MEMBER_ID
            elif (problem := identity_problem(group, slot.member_id, slot.instance)) != E.NONE:
                expected = problem
            elif slot.generation != generation:
                expected = E.ILLEGAL_GENERATION
            elif state is S.COMPLETING_REBALANCE:
                expected = E.REBALANCE_IN_PROGRESS
            else:
                expected = E.NONE
            offset = next(self.offsets)
            committed = OffsetCommitPartition(partition=partition, offset=offset)
            request = OffsetCommitRequest(
                group_id=GROUP,
                generation_id=slot.generation,
                member_id=slot.member_id,
                group_instance_id=slot.instance,
                topics=[OffsetCommitTopic(name=TOPIC, partitions=[committed])],
            )
            response = self._send(slot, "commit", request, slot.generation)
            assert isinstance(response, OffsetCommitResponse)
            assert response.error_code == expected, (state, generation, slot, response)
            wanted = OffsetFetchTopic(name=TOPIC, partitions=[partition])
            fetched = self.driver.response(
                self.driver.send(ADMIN_CONN, OffsetFetchRequest(group_id=GROUP, topics=[wanted]))
            )
            assert isinstance(fetched, OffsetFetchResponse)
            stored = fetched.topics[0].partitions[0].offset
            if expected == E.NONE:
                assert [p.error_code for t in response.topics for p in t.partitions] == [E.NONE]
                assert stored == offset
            else:
                assert stored != offset  # a refused commit stores nothing

    @rule(index=SLOTS)
    def disconnect(self, index: int) -> None:
        """Its connection drops; the clients on it reconnect on one new connection and
        keep their beliefs."""
        with self._checked():
            closed = self.slots[index].conn
            self.driver.close(closed)
            fresh = next(self.conns)
            for slot in self.slots:
                if slot.conn == closed:
                    slot.conn = fresh

    @rule()
    def topic_changes(self) -> None:
        """An admin grows or shrinks the topic: every connection holding a member or a
        pending member id hears of it, and no other connection does."""
        with self._checked():
            group = self.group
            expected = {m.conn_id for m in group.members.values()} | set(group.pending.values())
            expected -= self.driver.closed
            self.partitions = PARTITIONS + 1 if self.partitions == PARTITIONS else PARTITIONS
            spec = TopicSpec(name=TOPIC, partitions=self.partitions)
            before = len(self.driver.frames)
            altered = self.driver.response(
                self.driver.send(ADMIN_CONN, AlterTopicsRequest(topics=[spec]))
            )
            assert isinstance(altered, AlterTopicsResponse)
            assert [t.error_code for t in altered.topics] == [E.NONE]
            notified = {
                conn
                for conn, frame, _ in self.driver.frames[before:]
                if isinstance(frame, TopicMetadataChanged)
            }
            assert notified == expected

    @rule(ms=st.one_of(st.sampled_from([0, 1, 100, 500, 3_000]), st.integers(0, 15_000)))
    def advance(self, ms: int) -> None:
        with self._checked():
            self.driver.advance(ms)

    @rule(index=SLOTS)
    def behave(self, index: int) -> None:
        """One client takes the step a well-behaved client would: join, sync or heartbeat."""
        with self._checked():
            self._behave(self.slots[index])

    @rule(rounds=st.integers(1, 3))
    def all_behave(self, rounds: int) -> None:
        """Every client takes its next well-behaved steps, in turn, with no time passing."""
        with self._checked():
            for _ in range(rounds):
                for slot in self.slots:
                    self._behave(slot)

    @rule()
    def converge(self) -> None:
        with self._checked():
            self._converge()

    # --- invariants ---------------------------------------------------------------------

    @invariant()
    def group_makes_sense(self) -> None:
        with self._checked():
            group = self.group
            self._generation_never_goes_back()
            self._a_settled_group_has_one_leader_that_knows_it(group)
            self._stable_members_hold_this_generations_assignment(group)
            self._held_joins_are_counted(group)
            self._no_phantom_members(group)
            self._every_phase_and_member_has_a_way_out(group)

    def _generation_never_goes_back(self) -> None:
        """...while the group lives: a group forgotten when it emptied starts again at 0."""
        group = self.driver.core.groups.get(GROUP)
        if group is None:
            return
        if group is not self.incarnation:
            self.incarnation = group
            self.max_generation = 0
        assert group.generation >= self.max_generation
        self.max_generation = group.generation

    def _a_settled_group_has_one_leader_that_knows_it(self, group: Group) -> None:
        if not group.is_(S.STABLE, S.COMPLETING_REBALANCE):
            return
        assert group.leader is not None
        assert group.leader in group.members
        # its members are those the leader was given to assign: any change means a rebalance
        who = frozenset(m.instance_id or m.member_id for m in group.members.values())
        assert self.listed.get((group, group.generation)) == who, (self.listed, who)
        # the leader was told it leads this generation, and no other member was
        told = {m for g, m in self.told_leader if g == group.generation and m in group.members}
        assert told == {group.leader}, (group.leader, told)

    def _stable_members_hold_this_generations_assignment(self, group: Group) -> None:
        if not group.is_(S.STABLE):
            return
        for member in group.members.values():
            who = member.instance_id or member.member_id
            assert member.assignment == assignment_for(who, group.generation), member.member_id
        for slot in self.slots:
            if slot.member_id in group.members and slot.synced is not None:
                generation, assignment = slot.synced
                if generation == group.generation:
                    assert assignment == assignment_for(slot.who, generation), slot

    @staticmethod
    def _held_joins_are_counted(group: Group) -> None:
        held = sum(1 for m in group.members.values() if m.join_waiter is not None)
        assert group.awaiting_join == held

    def _no_phantom_members(self, group: Group) -> None:
        for member_id, member in group.members.items():
            # a new static member learns its id from the answer to its held join
            unseen_static = member.instance_id is not None and member.join_waiter is not None
            assert member_id in self.told or unseen_static, member_id
            assert member.instance_id in INSTANCES
            if member.instance_id is not None:
                assert group.static[member.instance_id] == member_id
        for instance, member_id in group.static.items():
            assert group.members[member_id].instance_id == instance
        assert set(group.pending) <= self.told
        assert not set(group.pending) & set(group.members)

    def _every_phase_and_member_has_a_way_out(self, group: Group) -> None:
        timers = self.driver.core.timers
        closed = self.driver.closed
        if group.is_(S.EMPTY):
            assert not group.members
        if group.is_(S.PREPARING_REBALANCE):
            assert group.join_key in timers, "a join phase with no deadline never ends"
            if not group.initial_delay_active:
                assert not group.all_joined(), "everyone rejoined, yet the join phase goes on"
        if group.is_(S.COMPLETING_REBALANCE):
            assert group.sync_key in timers, "a sync phase with no deadline never ends"
        grace = self.driver.config.disconnect_grace_ms >= 0
        for member in group.members.values():
            assert member.session_key in timers, f"{member.member_id} can never expire"
            if member.grace_key in timers:  # back on a live connection: it stays
                assert member.conn_id in closed, member.member_id
            elif grace and member.instance_id is None:  # gone: it goes after the grace
                assert member.conn_id not in closed, member.member_id
        for member_id, conn in group.pending.items():
            if grace and conn in closed:
                assert DisconnectGraceEnds(GROUP, member_id) in timers, member_id

    # --- end of a run -------------------------------------------------------------------

    def teardown(self) -> None:
        if not self.healthy:
            return  # a step failed: let that failure speak
        self._converge()
        self.driver.advance(QUIET_MS)
        self._absorb()
        open_unanswered = [
            (cid, sent)
            for cid, sent in self.sent.items()
            if sent.conn not in self.driver.closed and not self.driver.answered(cid)
        ]
        assert open_unanswered == [], open_unanswered
        group = self.group
        assert group.is_(S.EMPTY), group.state
        assert not group.members
        assert not group.pending
        if not group.offsets:
            assert GROUP not in self.driver.core.groups, "an empty group with nothing is kept"


GroupMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGroupStateMachine = GroupMachine.TestCase


# --- found while writing the machine ---------------------------------------------------


def test_a_member_answered_at_the_end_of_the_join_phase_is_not_expired_at_that_instant() -> None:
    d = Driver()  # session 10 s, rebalance timeout 30 s
    a, b = d.form(1, 2)  # generation 2, at t = 0
    for _ in range(7):
        d.advance(5_000)
        assert d.heartbeat(1, a, 2) == E.NONE
        assert d.heartbeat(2, b, 2) == E.NONE
    held = d.join(2, b, metadata=b"new")  # t = 35 s: the join phase runs until t = 65 s
    for _ in range(6):  # a stays alive but never rejoins; b waits on its held join
        d.advance(5_000)
        d.heartbeat(1, a, 2)
    answer = d.join_response(held)
    assert (answer.error_code, answer.generation_id, answer.leader) == (E.NONE, 3, b)
    # b was told it leads generation 3 at t = 65 s; it must still be there to sync
    assert GROUP in d.core.groups
    assert b in d.group().members
    assert d.sync_response(d.sync(2, b, 3, {b: b"B"})).error_code == E.NONE
