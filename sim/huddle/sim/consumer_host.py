"""The consumer group protocol (KIP-848) on the simulated coordinator: the server's real
``ConsumerService`` and sans-IO ``ConsumerCoordinator``, served on huddle's wire as
``huddle.coordinator.consumer_wire`` serves them, with the expiry timer on simulated time.

The consumer groups' records go to the simulated data dir with the core's own
(``CoordinatorHost.kept``); a restart replays them and the service serves every kept group
again (``ConsumerService.load_kept``): each member at its epoch with a fresh session, one
still revoking with its rebalance timeout again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from huddle.coordinator.consumer import (
    ConsumerCoordinator,
    ConsumerGroup,
    ConsumerGroupConfig,
)
from huddle.coordinator.consumer.messages import ClassicGroupSnapshot
from huddle.coordinator.consumer_service import ConsumerService
from huddle.coordinator.consumer_wire import CoreConsumerView, core_request, wire_answer
from huddle.coordinator.core import Coordinator
from huddle.coordinator.effects import Peer
from huddle.coordinator.storage.records import Record
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import ConsumerAssignmentChanged, ConsumerHeartbeatRequest, Reply
from huddle.sim.network import Link
from huddle.sim.scheduler import Scheduler, Timer

GroupMaker = Callable[[str], ConsumerGroup]


class ConsumerObserver(Protocol):
    """Sees the consumer groups after each heartbeat and expiry, for the invariants."""

    def consumer_changed(self, core: ConsumerCoordinator) -> None: ...


class SimConsumerHost(CoreConsumerView):
    """The simulated coordinator as the consumer service reads it
    (``consumer_service.ConsumerHost``): its core's view, the simulated clock, every group
    served here."""

    def __init__(self, core: Coordinator, sched: Scheduler, kept: Callable[[], None]) -> None:
        super().__init__(core)
        self._sched = sched
        self._kept = kept  # the core's changes go to the data dir now

    def now_ms(self) -> float:
        return self._sched.now

    def keep(self, records: list[Record], *, outside: bool) -> None:
        self._core.keep_consumer(records)
        if outside:  # an expiry's: a heartbeat's are taken with the request's
            self._kept()

    def not_served(self, group_id: str) -> tuple[ErrorCode, str] | None:
        return None

    def classic_snapshot(self, group_id: str) -> tuple[ErrorCode, str]:
        """The simulator runs one protocol per run: a classic group is never upgraded."""
        return ErrorCode.GROUP_ID_NOT_FOUND, "the simulator does not mix group protocols"

    def drop_classic(self, group_id: str) -> None:
        """Never asked: ``classic_snapshot`` refuses every upgrade, so nothing is dropped."""

    def to_classic(
        self,
        group_id: str,
        group: ClassicGroupSnapshot,
        clients: Mapping[str, tuple[str, str]],
    ) -> None:
        """Never asked: without an upgrade no group has classic members to downgrade to."""


class SimConsumerService(ConsumerService):
    """The server's consumer service, its expiry timer on the simulated clock (the
    server's runs on its event loop)."""

    def __init__(
        self,
        host: SimConsumerHost,
        core: ConsumerCoordinator,
        sched: Scheduler,
        expired: Callable[[], None],
    ) -> None:
        super().__init__(host, core)
        self._sched = sched
        self._expired = expired
        self._wake: Timer | None = None

    def _arm(self) -> None:
        deadline = self.core.next_deadline()
        if deadline is None:
            return
        wake = self._wake
        if wake is not None and wake.pending and wake.when <= deadline:
            return
        if wake is not None:
            wake.cancel()
        self._wake = self._sched.at(deadline, self._due)

    def _due(self) -> None:
        self._wake = None
        self._expire()  # the service's own expiry: fences, tells the watchers, re-arms
        self._expired()

    def close(self) -> None:
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None


class ConsumerPart:
    """The consumer groups of one simulated coordinator, across its crashes."""

    def __init__(
        self,
        sched: Scheduler,
        config: ConsumerGroupConfig,
        observer: ConsumerObserver,
        kept: Callable[[], None],
        make_group: GroupMaker | None = None,
    ) -> None:
        self.sched = sched
        self.config = config
        self.observer = observer
        self.make_group = make_group  # a planted bug's faulty group, made up front
        self.take_changes = kept  # the coordinator's changes go to its data dir
        # the groups as last served (while the coordinator is down: as it left them)
        self.kept: dict[str, ConsumerGroup] = {}
        self.service: SimConsumerService | None = None
        self.links: dict[tuple[str, str], Link] = {}  # (group, member) -> its connection

    @property
    def core(self) -> ConsumerCoordinator | None:
        return None if self.service is None else self.service.core

    def started(self, coordinator: Coordinator) -> None:
        """The coordinator (re)started, its data dir replayed: the kept groups are served."""
        core = ConsumerCoordinator(self.config)
        host = SimConsumerHost(coordinator, self.sched, self.take_changes)
        service = SimConsumerService(host, core, self.sched, self._changed)
        service.watchers.append(self._tell)
        self.service = service
        service.load_kept(None)  # each member at its epoch, with a fresh session
        self.kept = core.groups

    def crashed(self) -> None:
        if self.service is not None:
            self.service.close()
        self.service = None
        self.links.clear()

    def group(self, group_id: str) -> None:
        """Make ``group_id`` up front as the planted bug's faulty group, if one is planted
        (an empty group is what a first heartbeat would make)."""
        core = self.core
        if self.make_group is not None and core is not None and group_id not in core.groups:
            core.groups[group_id] = self.make_group(group_id)

    def serve(self, link: Link, peer: Peer, cid: int, request: ConsumerHeartbeatRequest) -> None:
        """A heartbeat on huddle's wire (``consumer_wire.HuddleConsumer.serve``)."""
        service = self.service
        if service is None:
            return
        answer = service.heartbeat(core_request(request), peer)
        key = (request.group_id, request.member_id)
        if answer.error or request.member_epoch < 0:
            self.links.pop(key, None)
        else:
            self.links[key] = link
        link.deliver(Reply(correlation_id=cid, response=wire_answer(answer)))
        self._changed()

    def _tell(self, group_id: str, member_id: str, target_epoch: int) -> None:
        link = self.links.get((group_id, member_id))
        if link is None:
            return
        if link.coordinator_closed:
            del self.links[group_id, member_id]
            return
        link.deliver(
            ConsumerAssignmentChanged(
                group_id=group_id, member_id=member_id, target_epoch=target_epoch
            )
        )

    def _changed(self) -> None:
        core = self.core
        if core is not None:
            self.observer.consumer_changed(core)
