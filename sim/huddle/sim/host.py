"""The coordinator as the simulator runs it: the real sans-IO core behind the simulated
network, its deadlines on the simulated clock, and a crash and restart that keep what a
data dir keeps (topics, committed offsets, and each group as its last rebalance left it,
loaded again with fresh sessions)."""

from __future__ import annotations

from typing import Protocol

from huddle.coordinator.config import GroupConfig
from huddle.coordinator.core import Coordinator
from huddle.coordinator.effects import Outgoing, Peer, incarnation_digest
from huddle.coordinator.storage.records import Record
from huddle.protocol.messages import (
    AlterTopicsRequest,
    ConsumerHeartbeatRequest,
    CreateTopicsRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
    Reply,
    Request,
    TopicSpec,
)
from huddle.sim.consumer_host import ConsumerPart
from huddle.sim.faulty_offsets import planted_commit_fence
from huddle.sim.network import Link
from huddle.sim.scheduler import Scheduler, Timer

ADMIN_CONN = 0  # the conn id of the operator's own changes (topics)


class Observer(Protocol):
    """Sees what the coordinator does, for the invariants."""

    def commit_handled(
        self,
        core: Coordinator,
        request: OffsetCommitRequest,
        response: OffsetCommitResponse,
        before: dict[tuple[str, int], int],
        allowed: str | None,
    ) -> None: ...

    def coordinator_changed(self, core: Coordinator) -> None: ...


class CoordinatorHost:
    def __init__(
        self,
        sched: Scheduler,
        config: GroupConfig,
        observer: Observer,
        consumer: ConsumerPart | None = None,
    ) -> None:
        self.sched = sched
        self.config = config
        self.observer = observer
        self.consumer = consumer  # the consumer group protocol's groups, if it is served
        self.kept: list[Record] = []  # the data dir: every change, in order
        self.incarnation = 0
        self.core: Coordinator | None = None
        self.links: dict[int, Link] = {}
        self.peers: dict[int, Peer] = {}  # who each link is, as its handshake told the core
        self._wake: Timer | None = None
        self._ids = 0
        self._admin_cid = 0
        self.start()

    @property
    def up(self) -> bool:
        return self.core is not None

    def _member_id(self, client_id: str) -> str:
        self._ids += 1
        return f"{client_id}-c{self.incarnation}-{self._ids}"

    # --- life ---------------------------------------------------------------------

    def start(self) -> None:
        self.incarnation += 1
        core = Coordinator(
            self.config, new_member_id=self._member_id, commit_fence=planted_commit_fence
        )
        core.keep_groups()  # as a data dir keeps them
        core.restore(self.kept)
        core.start(self.sched.now)
        self.core = core
        if self.consumer is not None:
            self.consumer.started(core)
        self.observer.coordinator_changed(core)

    def crash(self) -> None:
        """The process dies: every connection is reset; what it kept is loaded again at
        the restart."""
        if self.core is None:
            return
        self.core = None
        if self.consumer is not None:
            self.consumer.crashed()
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        for link in list(self.links.values()):
            link.close_by_coordinator("the coordinator went away")
        self.links.clear()
        self.peers.clear()

    # --- the network's end ----------------------------------------------------------

    def connection_opened(self, link: Link) -> bool:
        if self.core is None:
            return False
        self.links[link.conn_id] = link
        self.peers[link.conn_id] = Peer(
            link.conn_id,
            f"m{link.member.index}",
            "sim",
            incarnation=incarnation_digest(link.token),
        )
        return True

    def connection_ended(self, link: Link) -> None:
        self.peers.pop(link.conn_id, None)
        if self.links.pop(link.conn_id, None) is None or self.core is None:
            return
        self._send(self.core.connection_closed(link.conn_id, self.sched.now))

    def request_arrived(self, link: Link, cid: int, request: Request) -> None:
        core = self.core
        peer = self.peers.get(link.conn_id)
        if core is None or peer is None:
            return
        if type(request) is ConsumerHeartbeatRequest and self.consumer is not None:
            self.consumer.serve(link, peer, cid, request)  # beside the core, as the server
            self.kept.extend(core.take_changes())  # its records, before the answer arrives
            return
        if type(request) is OffsetCommitRequest:
            before = _committed(core, request)
            allowed = _commit_allowed(core, request)
            out = core.handle(peer, cid, request, self.sched.now)
            for _, frame in out:
                if isinstance(frame, Reply) and isinstance(frame.response, OffsetCommitResponse):
                    self.observer.commit_handled(core, request, frame.response, before, allowed)
        else:
            out = core.handle(peer, cid, request, self.sched.now)
        self.kept.extend(core.take_changes())
        self._send(out)

    # --- the operator ---------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> None:
        self._admin(CreateTopicsRequest(topics=[TopicSpec(name=name, partitions=partitions)]))

    def alter_topic(self, name: str, partitions: int) -> None:
        self._admin(AlterTopicsRequest(topics=[TopicSpec(name=name, partitions=partitions)]))

    def _admin(self, request: Request) -> None:
        core = self.core
        if core is None:
            return
        self._admin_cid += 1
        out = core.handle(
            Peer(ADMIN_CONN, "admin", "sim"), self._admin_cid, request, self.sched.now
        )
        self.kept.extend(core.take_changes())
        self._send(out)

    # --- plumbing -------------------------------------------------------------------

    def _send(self, out: list[Outgoing]) -> None:
        links = self.links
        for conn_id, frame in out:
            link = links.get(conn_id)
            if link is not None:
                link.deliver(frame)
        core = self.core
        if core is None:
            return
        self.observer.coordinator_changed(core)
        deadline = core.next_deadline()
        wake = self._wake
        if deadline is not None and (wake is None or not wake.pending or deadline < wake.when):
            if wake is not None:
                wake.cancel()
            self._wake = self.sched.at(deadline, self._advance)

    def keep_changes(self) -> None:
        """What the core changed outside a request (a consumer group's expiry) is kept."""
        if self.core is not None:
            self.kept.extend(self.core.take_changes())

    def _advance(self) -> None:
        self._wake = None
        core = self.core
        if core is not None:
            out = core.advance(self.sched.now)
            self.kept.extend(core.take_changes())  # a group a session expiry emptied, say
            self._send(out)


def _committed(core: Coordinator, request: OffsetCommitRequest) -> dict[tuple[str, int], int]:
    group = core.groups.get(request.group_id)
    if group is None:
        return {}
    return {
        (t.name, p.partition): group.offsets[(t.name, p.partition)][0]
        for t in request.topics
        for p in t.partitions
        if (t.name, p.partition) in group.offsets
    }


def _commit_allowed(core: Coordinator, request: OffsetCommitRequest) -> str | None:
    """Why the commit must be refused by the group rules, or None if it may be accepted:
    from a current member in the current generation, or with no generation into a group
    with no members (Kafka's rules, written here independently of the core's)."""
    group = core.groups.get(request.group_id)
    if request.generation_id < 0:
        if group is None or not group.members:
            return None
        return "a commit without a generation into a group with members"
    if group is None:
        return "a commit with a generation into no group"
    member = group.members.get(request.member_id)
    if member is None:
        return f"a commit from {request.member_id}, not a member"
    if request.generation_id != group.generation:
        return (
            f"a commit from {request.member_id} in generation {request.generation_id}, "
            f"not the group's {group.generation}"
        )
    return None
