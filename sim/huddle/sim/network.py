"""The simulated network: one link per connection, FIFO in each direction as TCP is.

A message takes the link's latency plus a jitter drawn from the run's RNG, and never
overtakes one sent before it the same way. While a member is partitioned from the
coordinator, whatever reaches either end of its links waits, in order, and arrives once
the partition heals, before anything sent after it. A reset drops what is in flight and tells
both ends.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Protocol

from huddle.protocol.messages import Request, ServerFrame
from huddle.sim.scheduler import Scheduler


class CoordinatorEnd(Protocol):
    def connection_opened(self, link: Link) -> bool:
        """A connection arrives; False if nothing listens (it is refused)."""

    def request_arrived(self, link: Link, cid: int, request: Request) -> None: ...

    def connection_ended(self, link: Link) -> None: ...


class MemberEnd(Protocol):
    index: int
    token: bytes  # the incarnation token of the process's handshake

    def link_up(self, link: Link) -> None:
        """The coordinator accepted the connection (its hello arrived)."""

    def frame_arrived(self, link: Link, frame: ServerFrame) -> None: ...

    def link_down(self, link: Link, reason: str) -> None: ...


class Link:
    __slots__ = (
        "conn_id",
        "coordinator_closed",
        "dead",
        "held",
        "jitter",
        "last_down",
        "last_held",
        "last_up",
        "latency",
        "member",
        "member_closed",
        "net",
        "token",
    )

    def __init__(
        self, net: Network, conn_id: int, member: MemberEnd, latency: float, jitter: float
    ) -> None:
        self.net = net
        self.conn_id = conn_id
        self.member = member
        # what its handshake presented: the token of the process that opened it, even once
        # that process has died and another took its place
        self.token = member.token
        self.latency = latency
        self.jitter = jitter
        self.last_up = 0.0
        self.last_down = 0.0
        self.member_closed = False
        self.coordinator_closed = False
        self.dead = False  # reset: nothing more gets through
        self.held: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self.last_held = 0.0  # when the last of what waited is due, once released

    def _delay(self) -> float:
        return self.latency + self.net.rng.random() * self.jitter

    def _up(self, fn: Callable[..., None], *args: Any) -> None:
        net = self.net
        sched = net.sched
        when = sched.now + (self.latency + net.rng.random() * self.jitter)  # _delay, inlined
        if when < self.last_up:
            when = self.last_up
        self.last_up = when
        sched.at(when, self._arrive, fn, args)

    def _down(self, fn: Callable[..., None], *args: Any) -> None:
        net = self.net
        sched = net.sched
        when = sched.now + (self.latency + net.rng.random() * self.jitter)  # _delay, inlined
        if when < self.last_down:
            when = self.last_down
        self.last_down = when
        sched.at(when, self._arrive, fn, args)

    def _arrive(self, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        if self.dead:
            return
        if self.held or self.member.index in self.net.partitioned:
            # cut off, or behind what waited for a partition to heal: nothing overtakes it
            self.held.append((fn, args))
            if self.member.index not in self.net.partitioned:
                self.net.sched.at(self.last_held, self._next_held)
            return
        fn(*args)

    def release(self) -> None:
        """The partition healed: what waited arrives, in order, and before anything sent
        after it (sent later, it may have been due sooner: it waits its turn)."""
        sched = self.net.sched
        when = sched.now
        for _ in self.held:
            when = max(sched.now + self._delay(), when, self.last_held)
            sched.at(when, self._next_held)
        self.last_held = when
        self.last_up = max(self.last_up, when)
        self.last_down = max(self.last_down, when)

    def _next_held(self) -> None:
        """The first of what waited arrives (unless cut off again: it waits on)."""
        if self.dead or not self.held or self.member.index in self.net.partitioned:
            return
        fn, args = self.held.pop(0)
        fn(*args)

    # --- the member's end ----------------------------------------------------------

    def send(self, cid: int, request: Request) -> None:
        if not self.member_closed:
            self._up(self._request_arrives, cid, request)

    def close_by_member(self) -> None:
        if not self.member_closed:
            self.member_closed = True
            self._up(self._member_close_arrives)

    def _request_arrives(self, cid: int, request: Request) -> None:
        if not self.coordinator_closed:
            self.net.coordinator.request_arrived(self, cid, request)

    def _member_close_arrives(self) -> None:
        if not self.coordinator_closed:
            self.coordinator_closed = True
            self.net.coordinator.connection_ended(self)

    # --- the coordinator's end -----------------------------------------------------

    def deliver(self, frame: ServerFrame) -> None:
        if not self.coordinator_closed:
            self._down(self._frame_arrives, frame)

    def close_by_coordinator(self, reason: str) -> None:
        if not self.coordinator_closed:
            self.coordinator_closed = True
            self._down(self._coordinator_close_arrives, reason)

    def _frame_arrives(self, frame: ServerFrame) -> None:
        if not self.member_closed:
            self.member.frame_arrived(self, frame)

    def _coordinator_close_arrives(self, reason: str) -> None:
        if not self.member_closed:
            self.member_closed = True
            self.member.link_down(self, reason)

    # --- set-up and faults -----------------------------------------------------------

    def open(self) -> None:
        """The member opens the connection: its SYN travels up to the coordinator."""
        self._up(self._syn_arrives)

    def _syn_arrives(self) -> None:
        if self.member_closed:
            return
        if self.net.coordinator.connection_opened(self):
            self._down(self._hello_arrives)
        else:
            self.coordinator_closed = True
            self._down(self._coordinator_close_arrives, "connection refused")

    def _hello_arrives(self) -> None:
        if not self.member_closed:
            self.member.link_up(self)

    def reset(self, reason: str) -> None:
        """The connection is reset: in-flight data is lost, both ends find out."""
        if self.dead:
            return
        self.dead = True
        self.held.clear()
        sched = self.net.sched
        if not self.coordinator_closed:
            self.coordinator_closed = True
            sched.after(self._delay(), self.net.coordinator.connection_ended, self)
        if not self.member_closed:
            self.member_closed = True
            sched.after(self._delay(), self.member.link_down, self, reason)


class Network:
    def __init__(self, sched: Scheduler, rng: random.Random, coordinator: CoordinatorEnd) -> None:
        self.sched = sched
        self.rng = rng
        self.coordinator = coordinator
        self.partitioned: set[int] = set()  # member indexes cut off from the coordinator
        self.links: dict[int, Link] = {}
        self._next_conn = 0
        self.latency_ms = (1.0, 20.0)  # a link's base latency is drawn from this range
        self.jitter_ms = (0.0, 10.0)

    def connect(self, member: MemberEnd) -> Link:
        """Open a connection from ``member``: its hello arrives one round trip later, if
        the coordinator listens and nothing cuts them off."""
        self._next_conn += 1
        rng = self.rng
        link = Link(
            self,
            self._next_conn,
            member,
            rng.uniform(*self.latency_ms),
            rng.uniform(*self.jitter_ms),
        )
        self.links[link.conn_id] = link
        link.open()
        return link

    def forget(self, link: Link) -> None:
        self.links.pop(link.conn_id, None)

    def partition(self, index: int) -> None:
        self.partitioned.add(index)

    def heal(self, index: int) -> None:
        self.partitioned.discard(index)
        for link in list(self.links.values()):
            if link.member.index == index:
                link.release()
