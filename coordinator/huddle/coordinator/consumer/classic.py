"""Classic members (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) in a consumer-protocol
group: a mixed group, as Kafka 4.0 upgrades a classic group online. Sans-IO: plain values
and an explicit ``now`` (milliseconds).

**The upgrade** (``convert``). When a consumer-protocol member joins a classic group (and
the migration policy allows it), the classic group becomes a consumer group: each classic
member becomes a member of it at the classic generation as its epoch, owning what its last
SyncGroup gave it (the target is the same, so nothing moves yet). The joining member's
heartbeat then moves the group epoch and works out a new target with the server assignor.

**A classic member of a consumer group** is served by the consumer group's state machine:

- its JoinGroup is a heartbeat of its epoch (a new member: a join), with the topics of the
  ConsumerProtocol subscription in its metadata, and the partitions it says it owns there
  (none for a version 0 subscription: an eager member gives up everything before it
  rejoins). The answer names no leader and no members: the member is a follower, its
  generation is its member epoch.
- its SyncGroup gets the partitions the member is assigned, as a ConsumerProtocol
  assignment. A member that must give partitions up first gets what it keeps.
- its Heartbeat is REBALANCE_IN_PROGRESS when it must rejoin: its epoch is behind the group
  epoch, it has partitions to give up, or partitions it waits for were released. Its
  revocation is its rejoin: the owned partitions it reports there.
- its LeaveGroup takes it out at once; its session (its own session timeout) and its
  rebalance timeout fence it as any member's. Told to rejoin, it has its rebalance timeout
  to send its JoinGroup, and once that is answered, its SyncGroup (Kafka's classic join and
  sync timeouts, ``timeouts.ClassicRejoinDue``): its heartbeats alone do not keep it.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec.structs import replace

from huddle.coordinator.consumer.checks import check_request
from huddle.coordinator.consumer.downgrade import downgrade_replaced
from huddle.coordinator.consumer.group import ConsumerGroup, DoubleOwnerError
from huddle.coordinator.consumer.heartbeat import ConsumerCoordinator
from huddle.coordinator.consumer.member import ClassicMeta, ConsumerMember, MemberState
from huddle.coordinator.consumer.messages import (
    JOIN_EPOCH,
    STATIC_LEAVE_EPOCH,
    Assignment,
    ClassicSnapshot,
    HeartbeatRequest,
    RefusedError,
    TopicView,
)
from huddle.coordinator.consumer.target import refresh_subscriptions
from huddle.coordinator.consumer.timeouts import ClassicRejoinDue
from huddle.protocol.consumer_protocol import (
    EmbeddedSchemaError,
    KafkaAssignment,
    Partitions,
    read_assignment,
    read_subscription,
    write_assignment,
)
from huddle.protocol.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"
_ASSIGNMENT_VERSION = 3  # the ConsumerProtocolAssignment version answered, as Kafka 4.0's


class ClassicJoin(msgspec.Struct, frozen=True):
    """A JoinGroup to a consumer group."""

    group_id: str
    member_id: str  # "" for a new member
    instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = False  # JoinGroup v4+: MEMBER_ID_REQUIRED first


class ClassicAnswer(msgspec.Struct, frozen=True):
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    member_id: str = ""
    generation: int = -1
    protocol_name: str | None = None
    assignment: bytes = b""


def upgrade_refusal(
    core: ConsumerCoordinator, request: HeartbeatRequest, members: Sequence[ClassicSnapshot]
) -> RefusedError | None:
    """Why a consumer-protocol ``request`` cannot upgrade the classic group ``members`` are
    in (Kafka's ``validateOnlineUpgrade``), or None."""
    try:
        check_request(request, core.config)
    except RefusedError as refused:
        return refused
    if request.member_epoch != JOIN_EPOCH:
        return _not_found(request.group_id, "a classic group is joined with epoch 0")
    if len(members) >= core.config.max_size:
        return _not_found(request.group_id, "the group is at the consumer group maximum size")
    return None


def convert(
    core: ConsumerCoordinator,
    group_id: str,
    generation: int,
    members: Sequence[ClassicSnapshot],
    now: float,
    topics: TopicView,
) -> ConsumerGroup:
    """The classic group as a consumer group, served by ``core`` from now: each member at
    the generation as its epoch, with its assignment as what it owns and its target.
    RefusedError (GROUP_ID_NOT_FOUND) when a member's metadata or assignment is no
    ConsumerProtocol subscription or assignment, or two members own one partition."""
    group = ConsumerGroup(group_id)
    epoch = max(generation, 1)
    group.group_epoch = group.target_epoch = epoch
    try:
        for snapshot in members:
            subscription = read_subscription(snapshot.protocols[0][1])
            given = snapshot.assignment  # none: its leader gave it nothing
            assigned = _assignment(read_assignment(given).assigned_partitions) if given else {}
            group.put(
                ConsumerMember(
                    snapshot.member_id,
                    instance_id=snapshot.instance_id,
                    rebalance_timeout_ms=snapshot.rebalance_timeout_ms,
                    subscribed_topic_names=frozenset(subscription.topics),
                    member_epoch=epoch,
                    previous_member_epoch=epoch,
                    assigned=assigned,
                    classic=ClassicMeta(snapshot.session_timeout_ms, snapshot.protocols),
                )
            )
            group.target[snapshot.member_id] = assigned
    except (EmbeddedSchemaError, IndexError) as error:
        raise _not_found(group_id, f"a member's consumer protocol is malformed: {error}") from None
    except DoubleOwnerError as error:
        raise _not_found(group_id, str(error)) from None
    refresh_subscriptions(group, topics)
    core.load(group, now)
    return group


def join(
    core: ConsumerCoordinator, request: ClassicJoin, fresh_id: str, now: float, topics: TopicView
) -> ClassicAnswer:
    """A JoinGroup to the consumer group ``request.group_id`` (``fresh_id``: the member id a
    new member gets)."""
    try:
        return _join(core, request, fresh_id, now, topics)
    except RefusedError as refused:
        return ClassicAnswer(refused.code, refused.message, member_id=request.member_id)


def _join(
    core: ConsumerCoordinator, request: ClassicJoin, fresh_id: str, now: float, topics: TopicView
) -> ClassicAnswer:
    group = core.groups[request.group_id]
    if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not request.protocols:
        raise _inconsistent("the group uses the consumer protocol type with a subscription")
    try:
        subscription = read_subscription(request.protocols[0][1])
    except EmbeddedSchemaError as error:
        raise _inconsistent(f"the member's subscription is malformed: {error}") from None
    member_id = request.member_id
    if not _shares_a_protocol(group, member_id, request.instance_id, request.protocols):
        raise _inconsistent(
            f"member {member_id!r}'s protocols are not supported: none is every other classic "
            "member's"
        )
    if not member_id and request.instance_id is None and request.require_known_member_id:
        return ClassicAnswer(ErrorCode.MEMBER_ID_REQUIRED, member_id=fresh_id)
    member = group.members.get(member_id) if member_id else None
    if member is not None and member.classic is None:
        raise RefusedError(
            ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} uses the consumer protocol"
        )
    replaced_consumer = False  # a classic static member takes a consumer member's place
    if member is None and request.instance_id is not None:
        # A static member back under a new member id replaces its old self, keeping its
        # partitions (the classic protocol's static membership), a classic one or a
        # consumer-protocol one that did not leave with -2 (killed, and rolled back): as
        # Kafka, only two consumer-protocol members are refused UNRELEASED_INSTANCE_ID.
        old = group.static_member(request.instance_id)
        replaced_consumer = old is not None and old.classic is None
        if old is not None and not (replaced_consumer and old.has_left_for_now()):
            core.heartbeat(
                HeartbeatRequest(
                    group.group_id,
                    old.member_id,
                    STATIC_LEAVE_EPOCH,
                    instance_id=request.instance_id,
                ),
                now,
                topics,
            )
    if member is None:
        member_id = member_id or fresh_id
        owned: Assignment = {}
        epoch = JOIN_EPOCH
    else:
        owned = _assignment(subscription.owned_partitions)
        epoch = member.member_epoch
    answer = core.heartbeat(
        HeartbeatRequest(
            group.group_id,
            member_id,
            epoch,
            instance_id=request.instance_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=tuple(subscription.topics),
            owned=owned,
        ),
        now,
        topics,
    )
    if answer.error:
        raise RefusedError(answer.error, answer.message or "")
    group = core.groups[request.group_id]
    joined = replace(
        group.members[member_id],
        classic=ClassicMeta(request.session_timeout_ms, request.protocols),
    )
    group.put(joined)
    core.touch(group.group_id, joined, now)
    # its SyncGroup is due within its rebalance timeout (Kafka's classic sync timeout)
    core.timers.set(ClassicRejoinDue(group.group_id, member_id), now + _rebalance_ms(joined))
    if replaced_consumer:  # the last consumer-protocol member, maybe: a classic group again
        handed = downgrade_replaced(group, core.config)
        if handed is not None:
            core.hand_back(group.group_id, handed)
    return ClassicAnswer(
        member_id=member_id,
        generation=joined.member_epoch,
        protocol_name=request.protocols[0][0],
    )


def sync(
    core: ConsumerCoordinator,
    group_id: str,
    member_id: str,
    generation: int,
    protocol_type: str | None,
    protocol_name: str | None,
    now: float,
) -> ClassicAnswer:
    """A SyncGroup: the member's assigned partitions, as a ConsumerProtocol assignment."""
    try:
        member = _classic_member(core, group_id, member_id, generation)
    except RefusedError as refused:
        return ClassicAnswer(refused.code, refused.message)
    assert member.classic is not None
    name = member.classic.protocols[0][0]
    if protocol_type not in (None, CONSUMER_PROTOCOL_TYPE) or protocol_name not in (None, name):
        return ClassicAnswer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "not the group's protocol")
    core.touch(group_id, member, now)
    core.timers.cancel(ClassicRejoinDue(group_id, member_id))
    partitions: Partitions = [
        (topic, sorted(parts)) for topic, parts in sorted(member.assigned.items()) if parts
    ]
    assignment = write_assignment(KafkaAssignment(_ASSIGNMENT_VERSION, partitions))
    return ClassicAnswer(
        member_id=member_id, generation=generation, protocol_name=name, assignment=assignment
    )


def heartbeat(
    core: ConsumerCoordinator, group_id: str, member_id: str, generation: int, now: float
) -> ErrorCode:
    """A classic Heartbeat: REBALANCE_IN_PROGRESS when the member must rejoin (its epoch is
    behind the group's, it has partitions to give up, or every partition it waits for is
    free now), as Kafka's ``classicGroupHeartbeatToConsumerGroup``."""
    try:
        member = _classic_member(core, group_id, member_id, generation)
    except RefusedError as refused:
        return refused.code
    core.touch(group_id, member, now)
    group = core.groups[group_id]
    if member.member_epoch != group.group_epoch or must_rejoin(group, member):
        # its JoinGroup is due within its rebalance timeout (Kafka's classic join timeout)
        due = ClassicRejoinDue(group_id, member_id)
        if due not in core.timers:
            core.timers.set(due, now + _rebalance_ms(member))
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


def must_rejoin(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """A classic member reconciles only when it rejoins: when it has partitions to give up,
    or every partition its target gives it and it waits for is free now."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        return True
    if member.state is not MemberState.UNRELEASED_PARTITIONS:
        return False
    target = group.target.get(member.member_id, {})
    for topic, partitions in target.items():
        for partition in partitions - member.assigned.get(topic, frozenset()):
            if group.owner_of(topic, partition) not in (None, member.member_id):
                return False
    return True


def leave(core: ConsumerCoordinator, group_id: str, member_id: str, now: float) -> ErrorCode:
    """A LeaveGroup's member: taken out at once (its partitions are free)."""
    group = core.groups.get(group_id)
    member = None if group is None else group.members.get(member_id)
    if member is None or member.classic is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    core.fence(group_id, member_id, now)
    return ErrorCode.NONE


def _rebalance_ms(member: ConsumerMember) -> int:
    """A classic member's rebalance timeout (JoinGroup v0 has none: its session timeout)."""
    if member.rebalance_timeout_ms > 0 or member.classic is None:
        return max(member.rebalance_timeout_ms, 0)
    return member.classic.session_timeout_ms


def _classic_member(
    core: ConsumerCoordinator, group_id: str, member_id: str, generation: int
) -> ConsumerMember:
    group = core.groups.get(group_id)
    member = None if group is None else group.members.get(member_id)
    if member is None or member.classic is None:
        raise RefusedError(
            ErrorCode.UNKNOWN_MEMBER_ID,
            f"member {member_id!r} is no classic member of group {group_id!r}",
        )
    if generation != member.member_epoch:
        raise RefusedError(
            ErrorCode.ILLEGAL_GENERATION,
            f"generation {generation} is not the member's epoch {member.member_epoch}",
        )
    return member


def _shares_a_protocol(
    group: ConsumerGroup,
    member_id: str,
    instance_id: str | None,
    protocols: Sequence[tuple[str, bytes]],
) -> bool:
    """Whether one of ``protocols`` is supported by every other classic member of the group
    (Kafka's ``supportsClassicProtocols``; the member's own earlier self, by member id or
    instance id, is not another): a classic group must choose one, should the group be
    downgraded."""
    others = [
        m.classic
        for m in group.members.values()
        if m.member_id != member_id and (instance_id is None or m.instance_id != instance_id)
    ]
    names = {name for name, _ in protocols}
    for classic in others:
        if classic is not None:
            names &= {name for name, _ in classic.protocols}
    return bool(names)


def _assignment(partitions: Partitions) -> dict[str, frozenset[int]]:
    out: dict[str, frozenset[int]] = {}
    for topic, numbers in partitions:
        if numbers:
            out[topic] = out.get(topic, frozenset()) | frozenset(numbers)
    return out


def _not_found(group_id: str, why: str) -> RefusedError:
    return RefusedError(
        ErrorCode.GROUP_ID_NOT_FOUND,
        f"Group {group_id} is a classic group the consumer protocol cannot join: {why}",
    )


def _inconsistent(why: str) -> RefusedError:
    return RefusedError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, why)
