"""The properties of the consumer group protocol (KIP-848), checked after every step
(docs/simulation.md lists them), in the simulator's invariant framework (``Checker``).

A member is *held* while the coordinator's group (or, while the coordinator is down, what
its data dir keeps of it) has its member id. The coordinator gives a member a partition only
once its previous owner released it or was fenced, so:

- ``exclusive-ownership``: no partition is processed by two held members at once (a member
  the coordinator fenced may go on processing until it hears of it: its commits are what
  the epochs fence);
- ``ownership``: a held member processes nothing its coordinator's record does not give it
  (assigned, or pending revocation), and is at no epoch beyond the record's;
- ``fenced-owns-nothing``: a member answered FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID owns
  nothing once its ``on_partitions_lost`` returned, until it is given partitions again;
- ``epochs``: a member process's epoch never goes back but to rejoin (0) after a fence; the
  group epoch and each member's epoch in the coordinator never go back (across its
  restarts too: an emptied group is kept with its epochs), no member is past the target's
  epoch, nor the target past the group's; and the coordinator's owner table names current
  members only;
- ``callbacks``: revoked and lost partitions were assigned, assigned ones were not owned
  already, and between reconciliations the application owns what the member library does.

Liveness and availability are the world's, as for the other protocols.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from huddle.coordinator.consumer import STATIC_LEAVE_EPOCH, ConsumerCoordinator, ConsumerGroup
from huddle.protocol.embedded import TopicPartition
from huddle.sim.application import GROUP_ID
from huddle.sim.invariants import Checker, _names
from huddle.sim.process import MemberProcess

if TYPE_CHECKING:
    from huddle.sim.consumer_process import ConsumerProcess
    from huddle.sim.consumer_world import ConsumerWorld


class ConsumerChecker(Checker):
    def __init__(self, world: ConsumerWorld) -> None:
        super().__init__(world)
        self.consumer_world = world
        self.group_epoch = 0
        self.member_epochs: dict[str, int] = {}  # member id -> its epoch in the coordinator
        self.process_epochs: dict[tuple[int, int], int] = {}  # (member, start) -> its epoch

    def _group(self) -> ConsumerGroup | None:
        return self.consumer_world.consumer.kept.get(GROUP_ID)

    # --- after each step ----------------------------------------------------------------

    def check_members(self, members: list[MemberProcess], changed: set[MemberProcess]) -> None:
        self._exclusive(members, changed)
        processes = self.consumer_world.processes
        group = self._group()
        for m in changed:
            process = processes[m.index]
            if process.alive:
                self._check_process(process, group)

    def _counted(self, a: MemberProcess, b: MemberProcess) -> bool:
        """Two members may process one partition at once if the coordinator fenced one."""
        group = self._group()
        processes = self.consumer_world.processes
        return self._held(processes[a.index], group) and self._held(processes[b.index], group)

    def _held(self, m: ConsumerProcess, group: ConsumerGroup | None) -> bool:
        return group is not None and m.consumer.member_id in group.members

    def _check_process(self, m: ConsumerProcess, group: ConsumerGroup | None) -> None:
        core = m.consumer
        idle = m.idle()
        if m.beats.fenced and idle and (core.owned or m.processing()):
            self.fail(
                "fenced-owns-nothing",
                f"member {m.index} was fenced and still owns {_names(core.owned | m.processing())}",
            )
        if idle and m.owned != core.owned:
            self.fail(
                "callbacks",
                f"member {m.index}: its callbacks told it owns {_names(m.owned)}, the library "
                f"says {_names(core.owned)}",
            )
        key = (m.index, m.restarts)
        last = self.process_epochs.get(key, 0)
        if 0 < core.epoch < last:
            self.fail("epochs", f"member {m.index} went from epoch {last} back to {core.epoch}")
        self.process_epochs[key] = core.epoch
        if group is None:
            return
        record = group.members.get(core.member_id)
        if record is None:
            return
        if core.epoch > record.member_epoch and record.member_epoch != STATIC_LEAVE_EPOCH:
            self.fail(
                "ownership",
                f"member {m.index} is at epoch {core.epoch}, the coordinator has it at "
                f"{record.member_epoch}",
            )
        given = {
            TopicPartition(topic, p)
            for assignment in (record.assigned, record.pending_revocation)
            for topic, partitions in assignment.items()
            for p in partitions
        }
        extra = m.processing() - given
        if extra:
            self.fail(
                "ownership",
                f"member {m.index} processes {_names(extra)}, which the coordinator does not "
                f"give it (epoch {record.member_epoch}, {record.state.value})",
            )

    # --- the coordinator ----------------------------------------------------------------

    def consumer_changed(self, core: ConsumerCoordinator) -> None:
        group = core.groups.get(GROUP_ID)
        if group is None:
            return
        if group.group_epoch < self.group_epoch:
            self.fail(
                "epochs",
                f"the group epoch went from {self.group_epoch} back to {group.group_epoch}",
            )
        if group.group_epoch > self.group_epoch:
            self.rebalances += group.group_epoch - self.group_epoch
            self.group_epoch = group.group_epoch
        if group.target_epoch > group.group_epoch:
            self.fail(
                "epochs",
                f"the target epoch {group.target_epoch} is past the group's {group.group_epoch}",
            )
        for member_id, member in group.members.items():
            epoch = member.member_epoch
            if epoch == STATIC_LEAVE_EPOCH:
                continue
            if epoch > group.target_epoch:
                self.fail(
                    "epochs",
                    f"{member_id} is at epoch {epoch}, past the target's {group.target_epoch}",
                )
            if epoch < self.member_epochs.get(member_id, 0) and epoch != 0:
                self.fail(
                    "epochs",
                    f"{member_id} went from epoch {self.member_epochs[member_id]} back to {epoch}",
                )
            self.member_epochs[member_id] = epoch
        for topic, owners in group.owners.items():
            for partition, owner in owners.items():
                if owner not in group.members:
                    self.fail(
                        "epochs",
                        f"{topic}-{partition} is owned by {owner}, no member of the group",
                    )

    # --- callbacks ----------------------------------------------------------------------

    def callback(self, m: MemberProcess, name: str, partitions: frozenset[TopicPartition]) -> None:
        owned = self.consumer_world.processes[m.index].owned
        if not self._released(m, name, partitions, owned) and partitions & owned:
            self.fail(
                "callbacks",
                f"member {m.index}: on_partitions_assigned for {_names(partitions & owned)}, "
                "which it already owns",
            )

    def lost(self, m: MemberProcess) -> None:
        """Losses are checked by availability (the world) and ``fenced-owns-nothing``."""

    def joining(self, m: MemberProcess, member_id: str) -> None:
        """No JoinGroup on this protocol."""
