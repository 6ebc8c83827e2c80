"""ConsumerGroupHeartbeat handled, sans-IO (Kafka's GroupMetadataManager.consumerGroupHeartbeat).

``ConsumerCoordinator.heartbeat(request, now, topics)`` answers one heartbeat:

1. The request is checked (``checks``) and the member found, created (epoch 0), or fenced:
   FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID,
   GROUP_MAX_SIZE_REACHED, GROUP_ID_NOT_FOUND.
2. The member's subscription is updated; the group epoch moves if the group's subscriptions
   changed (or the group is new), or a subscribed topic's partition count or id did.
3. If the group epoch is past the target assignment's, a new target is worked out.
4. The member is reconciled toward its target (``reconcile``). Entering
   ``UNREVOKED_PARTITIONS`` starts its rebalance timeout.
5. Its session deadline moves out; the answer carries its epoch, the heartbeat interval,
   and its assignment when that changed (or the request was a full one).

A member leaves with epoch -1 (it is taken out at once) or, if static, -2 (it stays, keeps
its partitions, and its instance id may come back under a new member id within its
session). ``expire(now)`` fences the members whose session or rebalance timeout passed.
"""

from __future__ import annotations

from collections.abc import Mapping

from msgspec.structs import replace

from huddle.coordinator.consumer.assignors import ASSIGNORS, AssignorError, ServerAssignor
from huddle.coordinator.consumer.checks import check_epoch, check_request
from huddle.coordinator.consumer.downgrade import downgrade
from huddle.coordinator.consumer.group import ConsumerGroup
from huddle.coordinator.consumer.member import ConsumerMember, MemberState
from huddle.coordinator.consumer.messages import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ClassicGroupSnapshot,
    ConsumerGroupConfig,
    HeartbeatAnswer,
    HeartbeatRequest,
    RefusedError,
    TopicView,
)
from huddle.coordinator.consumer.reconcile import reconcile
from huddle.coordinator.consumer.target import compute_target, refresh_subscriptions
from huddle.coordinator.consumer.timeouts import (
    AssignorRecheck,
    ClassicRejoinDue,
    Deadline,
    Fenced,
    RevocationDue,
    SessionEnds,
)
from huddle.coordinator.timers import TimerQueue
from huddle.protocol.errors import ErrorCode, InvalidArgumentError


class ConsumerCoordinator:
    """Every consumer-protocol group of one coordinator, and their deadlines."""

    def __init__(
        self,
        config: ConsumerGroupConfig | None = None,
        assignors: Mapping[str, ServerAssignor] | None = None,
    ) -> None:
        """``assignors``: the server assignors by name (by default the registry,
        ``assignors.ASSIGNORS``); groups may ask for those ``config.assignors`` names."""
        self.config = config or ConsumerGroupConfig()
        self.assignors = dict(ASSIGNORS if assignors is None else assignors)
        for name in self.config.assignors:
            if name not in self.assignors:
                raise InvalidArgumentError(f"no server assignor is named {name!r}")
        self.groups: dict[str, ConsumerGroup] = {}
        self.timers: TimerQueue[Deadline] = TimerQueue()
        self._revoking: dict[tuple[str, str], RevocationDue] = {}
        # groups downgraded to classic groups, for the caller (``take_downgraded``)
        self.downgraded: list[tuple[str, ClassicGroupSnapshot]] = []

    # -- the heartbeat

    def heartbeat(
        self, request: HeartbeatRequest, now: float, topics: TopicView
    ) -> HeartbeatAnswer:
        try:
            check_request(request, self.config)
            if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(request, now)
            return self._heartbeat(request, now, topics)
        except RefusedError as refused:
            return HeartbeatAnswer(error=refused.code, message=refused.message)

    def _heartbeat(
        self, request: HeartbeatRequest, now: float, topics: TopicView
    ) -> HeartbeatAnswer:
        joining = request.member_epoch == JOIN_EPOCH
        group = self.groups.get(request.group_id)
        if group is None:
            if not joining:
                raise RefusedError(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"group {request.group_id!r} does not exist"
                )
            group = ConsumerGroup(request.group_id)
        if len(group.members) >= self.config.max_size and request.member_id not in group.members:
            raise RefusedError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"the consumer group has reached its maximum size of {self.config.max_size}",
            )
        member = self._member(group, request, joining, now)

        updated = _with_subscription(member, request)
        moved = group.group_epoch == 0 or not updated.same_subscription(member)
        group.put(updated)
        self.groups[group.group_id] = group
        if (
            moved
            or group.group_epoch > group.target_epoch
            or topics.version != group.topics_version
        ):
            moved = refresh_subscriptions(group, topics) or moved
            # A group epoch already past the target's (a leave, a fence) needs no second move.
            if moved and group.group_epoch == group.target_epoch:
                group.group_epoch += 1
        if group.group_epoch > group.target_epoch:
            try:
                compute_target(
                    group,
                    self.assignors,
                    self.config.assignors[0],
                    now,
                    self.config.departure_memory_ms,
                )
            except AssignorError as error:
                raise RefusedError(ErrorCode.UNKNOWN_SERVER_ERROR, str(error)) from None
            self._arm_recheck(group)

        before = group.members[updated.member_id]
        reconciled = before
        if not before.is_reconciled_to(group.target_epoch):
            reconciled = reconcile(
                before,
                group.target_epoch,
                group.target.get(before.member_id, {}),
                request.owned,
                group.owner_of,
                group.subscribed_ids,
            )
            if reconciled is not before:
                group.put(reconciled)
                self._arm_revocation(group, reconciled, now)
        self.timers.extend(
            SessionEnds(group.group_id, reconciled.member_id), now + self._session(reconciled)
        )
        # a topic created again keeps its name: its new id must reach a Kafka client too
        full = (
            request.is_full()
            or reconciled.assigned != member.assigned
            or reconciled.topic_ids != member.topic_ids
        )
        return HeartbeatAnswer(
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=dict(reconciled.assigned) if full else None,
        )

    def _member(
        self, group: ConsumerGroup, request: HeartbeatRequest, joining: bool, now: float
    ) -> ConsumerMember:
        """The member the request is from: found, new, or a static member's replacement."""
        member_id = request.member_id
        instance_id = request.instance_id
        if instance_id is None:
            found = group.members.get(member_id)
            if found is None:
                if not joining:
                    raise RefusedError(
                        ErrorCode.UNKNOWN_MEMBER_ID,
                        f"member {member_id!r} is not a member of group {group.group_id!r}",
                    )
                return ConsumerMember(member_id)
            check_epoch(found, request)
            return found
        existing = group.static_member(instance_id)
        if joining:
            if existing is None:
                found = group.members.get(member_id)
                if found is not None:
                    check_epoch(found, request)
                    return found
                return ConsumerMember(member_id, instance_id=instance_id)
            if (
                existing.member_id == member_id
                and existing.classic is None
                and not existing.has_left_for_now()
            ):
                # itself, back (its join's answer lost, or fenced): as a dynamic member
                return existing
            if not existing.has_left_for_now():
                raise RefusedError(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"static member {member_id!r} with instance id {instance_id!r} cannot join: "
                    f"the instance id is owned by member {existing.member_id!r}",
                )
            self._forget_deadlines(group.group_id, existing.member_id)
            return group.replace_static(existing, member_id)
        if existing is None:
            raise RefusedError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"instance id {instance_id!r} is unknown"
            )
        if existing.member_id != member_id:
            raise RefusedError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"static member {member_id!r} with instance id {instance_id!r} was fenced by "
                f"member {existing.member_id!r}",
            )
        check_epoch(existing, request)
        return existing

    # -- leaving and fencing

    def _leave(self, request: HeartbeatRequest, now: float) -> HeartbeatAnswer:
        group = self.groups.get(request.group_id)
        if group is None:
            raise RefusedError(
                ErrorCode.GROUP_ID_NOT_FOUND, f"group {request.group_id!r} does not exist"
            )
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise RefusedError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"member {request.member_id!r} is not a member of group {group.group_id!r}",
                )
        else:
            static = group.static_member(request.instance_id)
            if static is None:
                raise RefusedError(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"instance id {request.instance_id!r} is unknown"
                )
            if static.member_id != request.member_id:
                raise RefusedError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"static member {request.member_id!r} with instance id "
                    f"{request.instance_id!r} was fenced by member {static.member_id!r}",
                )
            member = static
            if request.member_epoch == STATIC_LEAVE_EPOCH:
                # Gone for now: it keeps its partitions and its target until it comes back
                # or its session (which keeps running) ends.
                group.put(
                    replace(
                        member,
                        member_epoch=STATIC_LEAVE_EPOCH,
                        previous_member_epoch=member.member_epoch,
                        pending_revocation={},
                        state=MemberState.STABLE,
                    )
                )
                self._cancel_revocation(group.group_id, member.member_id)
                return HeartbeatAnswer(member_id=member.member_id, member_epoch=STATIC_LEAVE_EPOCH)
        self._fence(group, member.member_id, now)
        return HeartbeatAnswer(member_id=request.member_id, member_epoch=request.member_epoch)

    def fence(self, group_id: str, member_id: str, now: float) -> bool:
        """Take a member out at once (a classic member's LeaveGroup): False if unknown."""
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return False
        self._fence(group, member_id, now)
        return True

    def touch(self, group_id: str, member: ConsumerMember, now: float) -> None:
        """Move a member's session deadline out (by its classic session timeout, if it is a
        classic member)."""
        self.timers.extend(SessionEnds(group_id, member.member_id), now + self._session(member))

    def _session(self, member: ConsumerMember) -> int:
        classic = member.classic
        return self.config.session_timeout_ms if classic is None else classic.session_timeout_ms

    def _fence(self, group: ConsumerGroup, member_id: str, now: float) -> None:
        classic = downgrade(group, member_id, self.config)
        if classic is not None:  # the last consumer-protocol member: a classic group again
            self.hand_back(group.group_id, classic)
            return
        group.remove(member_id, now)
        self._forget_deadlines(group.group_id, member_id)

    def hand_back(self, group_id: str, classic: ClassicGroupSnapshot) -> None:
        """Stop serving ``group_id``: it is the classic group ``classic`` from now
        (``take_downgraded``)."""
        self.unload(group_id)
        self.downgraded.append((group_id, classic))

    def take_downgraded(self) -> list[tuple[str, ClassicGroupSnapshot]]:
        """The groups downgraded since the last call (``consumer.downgrade``), each as the
        classic group it becomes; the caller's classic coordinator serves them from now."""
        taken, self.downgraded = self.downgraded, []
        return taken

    def expire(self, now: float) -> list[Fenced]:
        """Fence every member whose session or rebalance timeout has passed by ``now``."""
        fenced: list[Fenced] = []
        while (key := self.timers.pop_next(now)) is not None:
            group = self.groups.get(key.group_id)
            if group is None:
                continue
            match key:
                case SessionEnds(group_id, member_id):
                    member = group.members.get(member_id)
                    if member is not None:
                        self._fence(group, member_id, now)
                        fenced.append(Fenced(group_id, member_id, member.member_epoch, "session"))
                case RevocationDue(group_id, member_id, epoch):
                    self._revoking.pop((group_id, member_id), None)
                    member = group.members.get(member_id)
                    if member is not None and member.member_epoch == epoch:
                        self._fence(group, member_id, now)
                        fenced.append(Fenced(group_id, member_id, epoch, "revocation"))
                case ClassicRejoinDue(group_id, member_id):
                    member = group.members.get(member_id)
                    if member is not None and member.classic is not None:
                        self._fence(group, member_id, now)
                        fenced.append(
                            Fenced(group_id, member_id, member.member_epoch, "revocation")
                        )
                case AssignorRecheck():
                    group.recheck_at = None
                    group.group_epoch += 1
        return fenced

    def next_deadline(self) -> float | None:
        return self.timers.next_deadline()

    def unload(self, group_id: str) -> ConsumerGroup | None:
        """Stop serving a group (its cluster shard left this node), deadlines and all."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            for member_id in group.members:
                self._forget_deadlines(group_id, member_id)
            self.timers.cancel(AssignorRecheck(group_id))
        return group

    def load(self, group: ConsumerGroup, now: float) -> None:
        """Serve a kept group (a restart): every member keeps its epoch and partitions and
        has a fresh session from ``now`` (as Kafka schedules one for each member of a group
        it loads); one still revoking has its rebalance timeout again from ``now``."""
        self.groups[group.group_id] = group
        for member in group.members.values():
            self.timers.set(
                SessionEnds(group.group_id, member.member_id), now + self._session(member)
            )
            self._arm_revocation(group, member, now)

    # -- deadlines

    def _arm_revocation(self, group: ConsumerGroup, member: ConsumerMember, now: float) -> None:
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            self._cancel_revocation(group.group_id, member.member_id)
            key = RevocationDue(group.group_id, member.member_id, member.member_epoch)
            self._revoking[(group.group_id, member.member_id)] = key
            self.timers.set(key, now + max(member.rebalance_timeout_ms, 0))
        else:
            self._cancel_revocation(group.group_id, member.member_id)

    def _arm_recheck(self, group: ConsumerGroup) -> None:
        key = AssignorRecheck(group.group_id)
        if group.recheck_at is None:
            self.timers.cancel(key)
        else:
            self.timers.set(key, group.recheck_at)

    def _cancel_revocation(self, group_id: str, member_id: str) -> None:
        key = self._revoking.pop((group_id, member_id), None)
        if key is not None:
            self.timers.cancel(key)

    def _forget_deadlines(self, group_id: str, member_id: str) -> None:
        self.timers.cancel(SessionEnds(group_id, member_id))
        self.timers.cancel(ClassicRejoinDue(group_id, member_id))
        self._cancel_revocation(group_id, member_id)


def _with_subscription(member: ConsumerMember, request: HeartbeatRequest) -> ConsumerMember:
    """The member with what the request changes (a field not sent changes nothing)."""
    changes: dict[str, object] = {}
    if request.instance_id is not None:
        changes["instance_id"] = request.instance_id
    if request.rack_id is not None:
        changes["rack_id"] = request.rack_id
    if request.rebalance_timeout_ms != -1:
        changes["rebalance_timeout_ms"] = request.rebalance_timeout_ms
    if request.server_assignor is not None:
        changes["server_assignor"] = request.server_assignor
    if request.subscribed_topic_names is not None:
        changes["subscribed_topic_names"] = frozenset(request.subscribed_topic_names)
    if request.subscribed_topic_regex is not None:
        changes["subscribed_topic_regex"] = request.subscribed_topic_regex or None
    return replace(member, **changes) if changes else member
