"""A hypothesis state machine driving one consumer-protocol group through the sans-IO core.

Five client slots (three dynamic, two static) heartbeat, lose answers, leave (-1, or -2 for
a static member), crash and restart, change subscriptions (names or a regex) and the server
assignor they ask for (``uniform`` or ``range``), while topics grow, appear, are deleted and
are created again under their name (a new topic id) and the clock moves (sessions end,
revocations time out); a client is fenced by an epoch the coordinator never gave and rejoins
under its member id (and instance id), and the coordinator restarts, replaying the group's
records. Each client acts
only on the answers that reach it, as Kafka's consumer does: it revokes what an answer takes
away and owns what it gives; after a lost answer it sends a full request; fenced, it gives up
everything and rejoins with epoch 0.

After every step:
- no partition is owned by two clients, unless one of them has been fenced (a zombie that
  has not heard yet), and the coordinator counts every partition a client owns as that
  member's (assigned or pending revocation), so it can have given it to nobody else;
- the coordinator's table of owners is exactly its members' assignments, with no partition
  twice;
- member epochs, the group epoch and each client's epoch never go back.
``settle`` then lets every live client heartbeat with no faults: the group must become
Stable with every subscribed partition owned by a client, and no client still owning a
partition of a topic deleted (or created again) since it was given it; and a client
joining a settled group whose members all subscribe to the same topics takes from the
others only what balance requires (``uniform`` is sticky).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from huddle.coordinator.consumer import (
    ConsumerCoordinator,
    ConsumerGroup,
    ConsumerGroupConfig,
    GroupPhase,
    HeartbeatAnswer,
    HeartbeatRequest,
    TopicView,
)
from huddle.coordinator.consumer.member import count
from huddle.coordinator.storage.kept_consumer_groups import ConsumerKept, ConsumerRecord
from huddle.coordinator.storage.records import decode_frames, encode_frames
from huddle.protocol.errors import ErrorCode
from tests.consumer.helpers import GROUP, flat
from tests.consumer.test_assignors import required_moves

SESSION_MS = 3_000
REBALANCE_MS = 2_000
SLOTS = ("d0", "d1", "d2", "s0", "s1")
SUBSCRIPTIONS: tuple[tuple[tuple[str, ...] | None, str | None], ...] = (
    (("a", "b"), None),
    (("a",), None),
    (("b", "c"), None),
    (None, "r-.*"),
    (("a",), "r-.*"),
)


@dataclass
class Slot:
    name: str
    static: bool
    incarnation: int = 0
    member_id: str = ""
    epoch: int = 0
    owned: dict[str, frozenset[int]] = field(default_factory=dict)
    joined: bool = False
    alive: bool = True
    full_next: bool = False
    subscription: tuple[tuple[str, ...] | None, str | None] = (("a", "b"), None)
    stubborn: bool = False  # does not revoke (its revocation must time out)
    # partitions it owns of a topic deleted or created again since: it must give them up
    stale: set[tuple[str, int]] = field(default_factory=set)
    assignor: str | None = None  # the server assignor it asks for

    def __post_init__(self) -> None:
        self.member_id = f"{self.name}-0"

    @property
    def instance_id(self) -> str | None:
        return f"instance-{self.name}" if self.static else None

    def request(self) -> HeartbeatRequest:
        names, regex = self.subscription
        if not self.joined:
            return HeartbeatRequest(
                GROUP,
                self.member_id,
                0,
                instance_id=self.instance_id,
                rebalance_timeout_ms=REBALANCE_MS,
                subscribed_topic_names=names,
                subscribed_topic_regex=regex,
                server_assignor=self.assignor,
                owned={},
            )
        if self.full_next:
            return HeartbeatRequest(
                GROUP,
                self.member_id,
                self.epoch,
                instance_id=self.instance_id,
                rebalance_timeout_ms=REBALANCE_MS,
                subscribed_topic_names=names if names is not None else (),
                subscribed_topic_regex=regex if regex is not None else "",
                server_assignor=self.assignor,
                owned=dict(self.owned),
            )
        return HeartbeatRequest(
            GROUP, self.member_id, self.epoch, instance_id=self.instance_id, owned=dict(self.owned)
        )

    def apply(self, answer: HeartbeatAnswer) -> None:
        if answer.error in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            self.reset()
            return
        if answer.error is not ErrorCode.NONE:
            return
        self.full_next = False
        assert answer.member_epoch >= self.epoch or not self.joined, "client epoch went back"
        self.joined = True
        self.epoch = answer.member_epoch
        if answer.assignment is not None:
            if self.stubborn:  # takes what it is given, gives up nothing
                merged = dict(self.owned)
                for topic, ps in answer.assignment.items():
                    merged[topic] = ps | merged.get(topic, frozenset())
                self.owned = {t: ps for t, ps in merged.items() if ps}
            else:
                self.owned = {t: ps for t, ps in answer.assignment.items() if ps}
                self.stale &= flat(self.owned)  # a partition given up is no longer stale

    def reset(self) -> None:
        self.owned = {}
        self.stale = set()
        self.epoch = 0
        self.joined = False
        self.full_next = False
        self.stubborn = False

    def new_incarnation(self) -> None:
        self.reset()
        self.incarnation += 1
        self.member_id = f"{self.name}-{self.incarnation}"


class ConsumerGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = ConsumerCoordinator(ConsumerGroupConfig(session_timeout_ms=SESSION_MS))
        self.now = 0.0
        self.incarnations: dict[str, int] = {}  # a topic's: its id is "<name>#<incarnation>"
        self.topics = self.view({"a": 4, "b": 3, "c": 2, "r-0": 2})
        self.slots = {name: Slot(name, static=name.startswith("s")) for name in SLOTS}
        self.zombies: set[str] = set()  # member ids the coordinator fenced, not yet told
        self.member_epochs: dict[str, int] = {}
        self.group_epoch = 0

    def view(self, partitions: dict[str, int]) -> TopicView:
        """The topics, at the next version, each with the id of its incarnation."""
        for topic in partitions:
            self.incarnations.setdefault(topic, 0)
        ids = {t: f"{t}#{self.incarnations[t]}" for t in partitions}
        version = getattr(self, "topics", TopicView({}, version=-1)).version + 1
        return TopicView(partitions, version=version, ids=ids)

    def gone(self, topic: str) -> None:
        """``topic`` was deleted: what the clients own of it is stale."""
        self.incarnations[topic] = self.incarnations.get(topic, 0) + 1
        for slot in self.slots.values():
            slot.stale |= {(topic, p) for p in slot.owned.get(topic, ())}

    # -- acting

    def send(self, slot: Slot, lose: bool = False, omit_owned: bool = False) -> HeartbeatAnswer:
        request = slot.request()
        if omit_owned and slot.joined and not slot.full_next:
            request = HeartbeatRequest(
                request.group_id, request.member_id, request.member_epoch, request.instance_id
            )
        answer = self.core.heartbeat(request, self.now, self.topics)
        if lose:
            slot.full_next = True
        else:
            slot.apply(answer)
            if answer.error in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
                self.zombies.discard(slot.member_id)  # it knows now, and owns nothing
        return answer

    @rule(name=st.sampled_from(SLOTS), lose=st.booleans(), omit_owned=st.booleans())
    def heartbeat(self, name: str, lose: bool, omit_owned: bool) -> None:
        slot = self.slots[name]
        if slot.alive:
            self.send(slot, lose=lose and slot.joined, omit_owned=omit_owned)

    @rule(name=st.sampled_from(SLOTS))
    def leave(self, name: str) -> None:
        slot = self.slots[name]
        if not (slot.alive and slot.joined):
            return
        epoch = -2 if slot.static else -1
        self.core.heartbeat(
            HeartbeatRequest(GROUP, slot.member_id, epoch, instance_id=slot.instance_id),
            self.now,
            self.topics,
        )
        if slot.static:
            slot.new_incarnation()  # a static member leaves when its process stops
        else:
            slot.reset()

    @rule(name=st.sampled_from(SLOTS))
    def crash(self, name: str) -> None:
        slot = self.slots[name]
        slot.alive = False
        slot.owned = {}  # the process is gone, and what it owned with it
        slot.stale = set()

    @rule(name=st.sampled_from(SLOTS))
    def restart(self, name: str) -> None:
        slot = self.slots[name]
        if not slot.alive:
            slot.alive = True
            slot.new_incarnation()

    @rule(name=st.sampled_from(SLOTS))
    def fenced_by_epoch(self, name: str) -> None:
        """A heartbeat at an epoch the coordinator never gave (a bug, a reordered answer):
        FENCED_MEMBER_EPOCH while the coordinator still has the member; it gives up
        everything and rejoins with epoch 0 under the same member id (and instance id)."""
        slot = self.slots[name]
        if not (slot.alive and slot.joined):
            return
        request = HeartbeatRequest(
            GROUP, slot.member_id, slot.epoch + 7, instance_id=slot.instance_id, owned={}
        )
        answer = self.core.heartbeat(request, self.now, self.topics)
        # (UNKNOWN_MEMBER_ID: the coordinator fenced it already, and it hears of it now)
        assert answer.error in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID)
        slot.apply(answer)
        self.zombies.discard(slot.member_id)

    @rule()
    def coordinator_restarts(self) -> None:
        """The coordinator restarts and replays the group's records (``ConsumerKept``, as the
        data dir journal or etcd hands them back): every member at its kept epoch, with a
        fresh session; the clients go on as they were."""
        kept = ConsumerKept()
        kept.enabled = True
        frames = encode_frames([r for g in self.core.groups.values() for r in kept.changes(g)])
        replayed = ConsumerKept()
        for record in decode_frames(frames).records:
            assert isinstance(record, ConsumerRecord)
            replayed.apply(record)
        self.core = ConsumerCoordinator(self.core.config)
        for group in replayed.loaded_groups():
            self.core.load(group, self.now)

    @rule(name=st.sampled_from(SLOTS))
    def stop_revoking(self, name: str) -> None:
        self.slots[name].stubborn = True

    @rule(name=st.sampled_from(SLOTS), subscription=st.sampled_from(SUBSCRIPTIONS))
    def resubscribe(
        self, name: str, subscription: tuple[tuple[str, ...] | None, str | None]
    ) -> None:
        slot = self.slots[name]
        slot.subscription = subscription
        slot.full_next = slot.joined

    @rule(name=st.sampled_from(SLOTS), assignor=st.sampled_from(("uniform", "range")))
    def ask_for(self, name: str, assignor: str) -> None:
        slot = self.slots[name]
        slot.assignor = assignor
        slot.full_next = slot.joined

    @rule(topic=st.sampled_from(("a", "b", "c", "r-0", "r-1")))
    def grow(self, topic: str) -> None:
        partitions = dict(self.topics.partitions)
        partitions[topic] = partitions.get(topic, 0) + 1
        self.topics = self.view(partitions)

    @rule(topic=st.sampled_from(("a", "b", "c", "r-0", "r-1")))
    def delete(self, topic: str) -> None:
        partitions = dict(self.topics.partitions)
        if partitions.pop(topic, None) is not None:
            self.gone(topic)
            self.topics = self.view(partitions)

    @rule(topic=st.sampled_from(("a", "b", "c", "r-0")))
    def create_again(self, topic: str) -> None:
        """``topic`` deleted and created again with its partition count, between two
        heartbeats: a new topic id, nothing else changed."""
        if topic in self.topics.partitions:
            self.gone(topic)
            self.topics = self.view(dict(self.topics.partitions))

    @rule(ms=st.sampled_from((100, 700, 1_500, 2_500, 4_000)))
    def advance(self, ms: int) -> None:
        self.now += ms
        for fenced in self.core.expire(self.now):
            self.zombies.add(fenced.member_id)

    # -- settling

    def settle(self) -> None:
        """Every live client heartbeats, no faults, until the group is Stable (or Empty when
        no client is alive) with every live client in it and nobody else."""
        for slot in self.slots.values():
            slot.stubborn = False
        for _ in range(40):
            for slot in self.slots.values():
                if slot.alive:
                    self.send(slot)
                    self.check_safety()
            group = self.core.groups.get(GROUP)
            if group is None or (group.phase is not GroupPhase.RECONCILING and self.all_in(group)):
                break
            self.now += 200
            for fenced in self.core.expire(self.now):
                self.zombies.add(fenced.member_id)
        group = self.core.groups.get(GROUP)
        if group is None:
            assert not any(s.alive for s in self.slots.values())
            return
        assert self.all_in(group)
        assert group.phase is (GroupPhase.STABLE if group.members else GroupPhase.EMPTY)
        owned = {tp for s in self.slots.values() if s.alive for tp in flat(s.owned)}
        wanted = {(t, p) for t, n in group.subscribed_partitions.items() for p in range(n)}
        if group.members:
            assert owned == wanted, "a subscribed partition is not owned by anyone"
        for slot in self.slots.values():
            assert not slot.stale, f"{slot.member_id} kept {slot.stale} of a deleted topic"

    def all_in(self, group: ConsumerGroup) -> bool:
        """Every live client is in, and nobody else (crashed ones expired)."""
        live = {s.member_id for s in self.slots.values() if s.alive}
        return all(s.joined for s in self.slots.values() if s.alive) and set(group.members) == live

    @rule()
    def settles(self) -> None:
        self.settle()

    @precondition(lambda self: any(not s.joined and s.alive for s in self.slots.values()))
    @rule(data=st.data())
    def a_join_disturbs_only_what_balance_requires(self, data: st.DataObject) -> None:
        for slot in self.slots.values():
            slot.subscription = (("a", "b"), None)
            slot.assignor = "uniform"
            slot.full_next = slot.joined
        self.settle()
        outside = [s for s in self.slots.values() if s.alive and not s.joined]
        if not outside:
            return
        newcomer = data.draw(st.sampled_from(outside))
        newcomer.alive = False  # kept out while the others settle
        self.settle()
        newcomer.alive = True
        before = {s.member_id: flat(s.owned) for s in self.slots.values() if s.joined}
        self.settle()
        after = {s.member_id: flat(s.owned) for s in self.slots.values() if s.joined}
        moved = sum(len(before[m] - after.get(m, set())) for m in before)
        total = sum(self.topics.partitions[t] for t in ("a", "b"))
        counts = {m: len(ps) for m, ps in before.items()}
        assert moved == required_moves(counts, len(after), total)

    # -- invariants

    @invariant()
    def check_safety(self) -> None:
        group = self.core.groups.get(GROUP)
        claimed: dict[tuple[str, int], str] = {}
        for slot in self.slots.values():
            if not slot.alive or slot.member_id in self.zombies:
                continue
            for tp in flat(slot.owned):
                assert tp not in claimed, f"{tp} owned by {claimed[tp]} and {slot.member_id}"
                claimed[tp] = slot.member_id
                assert group is not None
                assert group.owner_of(*tp) == slot.member_id, (
                    f"{slot.member_id} owns {tp} but the coordinator counts it as "
                    f"{group.owner_of(*tp)}'s"
                )

    @invariant()
    def owners_table_is_the_members_assignments(self) -> None:
        group = self.core.groups.get(GROUP)
        if group is None:
            return
        table = {(t, p): m for t, ps in group.owners.items() for p, m in ps.items()}
        derived: dict[tuple[str, int], str] = {}
        for member in group.members.values():
            for assignment in (member.assigned, member.pending_revocation):
                for tp in flat(assignment):
                    assert tp not in derived
                    derived[tp] = member.member_id
            assert count(member.assigned) == len(flat(member.assigned))
        assert table == derived

    @invariant()
    def epochs_never_go_back(self) -> None:
        group = self.core.groups.get(GROUP)
        if group is None:
            return
        assert group.group_epoch >= self.group_epoch
        assert group.target_epoch <= group.group_epoch
        self.group_epoch = group.group_epoch
        for member_id in list(self.member_epochs):
            if member_id not in group.members:
                del self.member_epochs[member_id]  # gone: a rejoin starts again at 0
        for member_id, member in group.members.items():
            if member.member_epoch == -2:
                continue
            assert member.member_epoch >= self.member_epochs.get(member_id, 0)
            self.member_epochs[member_id] = member.member_epoch

    def teardown(self) -> None:
        if GROUP in self.core.groups:
            self.settle()


ConsumerGroupMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestConsumerGroup = ConsumerGroupMachine.TestCase
