"""The callbacks of a consumer-protocol member's reconciliation, with heartbeats meanwhile.

``Reconciliation.run`` performs what a ``huddle.client.consumer_core.Reconcile`` asks of a
``huddle.client.consumer_member.ConsumerProtocolMember`` (``on_partitions_lost``, then
``on_partitions_revoked``, then ``on_partitions_assigned``), then what was answered while
they ran (a new target, a fence), until nothing more is asked. While the callbacks run, a
task heartbeats at the interval, as a Kafka consumer's background thread does: the
heartbeats keep the session alive and report the partitions being revoked as owned still;
their answers start no callback (the core keeps them for ``callbacks_done``). A connection
lost meanwhile (or a node that no longer serves the group) is found again by that task, on a
connection of the callbacks' own (the member's commits go there): it ends with the callbacks,
and the member's main loop then finds the coordinator again itself, at the epoch these
heartbeats kept alive. A refusal answered meanwhile is raised once the callbacks returned.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import anyio
from structlog.stdlib import BoundLogger

from huddle.client.anyio_runtime import loop_ms
from huddle.client.connection import Connection
from huddle.client.connection_errors import ConnectionClosedError
from huddle.client.consumer_core import ConsumerCore, Reconcile
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ClientError, CoordinatorNotAvailableError
from huddle.protocol.messages import ConsumerHeartbeatResponse, ErrorResponse


class FindAgainError(ClientError, ConnectionError):
    """The node answered that it does not coordinate the group (now): find it again."""


# a connection lost, or no coordinator found yet: the member connects again after a backoff
RECONNECT = (ConnectionClosedError, CoordinatorNotAvailableError, OSError, TimeoutError)


class Reconciliation:
    """The callbacks of a member's reconciliations (one at a time), heartbeating meanwhile.
    Given the member's core and logger, and its ways to run a callback (``call``, raising
    ``ListenerFailedError``), to send a heartbeat (``beat``), to connect to the group's
    coordinator (``connect``, a connection without notices), to count a lost connection
    (``lost``) and the backoff before the next attempt (``backoff``)."""

    def __init__(
        self,
        core: ConsumerCore,
        log: BoundLogger,
        *,
        call: Callable[[str, frozenset[TopicPartition]], Awaitable[None]],
        beat: Callable[[Connection], Awaitable[ConsumerHeartbeatResponse | ErrorResponse]],
        connect: Callable[[], AbstractAsyncContextManager[Connection]],
        lost: Callable[[BaseException], None],
        backoff: Callable[[], float],
    ) -> None:
        self._core, self._log, self._call, self._beat = core, log, call, beat
        self._connect, self._lost, self._backoff = connect, lost, backoff
        self._beat_error: Exception | None = None  # a heartbeat's, while callbacks ran
        self._finding: anyio.CancelScope | None = None  # a connection made while they run
        # the connection of the callbacks' own, while it is up (the member's commits go there)
        self.conn: Connection | None = None

    async def run(self, conn: Connection, step: Reconcile) -> None:
        """The callbacks ``step`` asks, heartbeating meanwhile on ``conn``; then those of
        what was answered while they ran, until nothing more is asked."""
        core = self._core
        while step.lost or step.revoke or step.assign:
            core.callbacks_begin()
            self._beat_error = None
            done = anyio.Event()
            async with anyio.create_task_group() as beats:
                beats.start_soon(self._keep_alive, conn, done)
                try:
                    await self._callbacks_of(step)
                finally:
                    done.set()  # the heartbeat out is answered first: one at a time
                    if self._finding is not None:  # not a coordinator still being found
                        self._finding.cancel()
            step = core.callbacks_done()
            if self._beat_error is not None:
                raise self._beat_error

    async def _callbacks_of(self, step: Reconcile) -> None:
        core = self._core
        if step.lost:
            self._log.info("partitions_lost", partitions=len(step.lost))
            await self._call("on_partitions_lost", step.lost)
            core.lost()
        if step.revoke:
            await self._call("on_partitions_revoked", step.revoke)
            core.revoked(step.revoke)
        # as the cooperative order: assigned follows, maybe empty; not once fenced meanwhile
        if (step.revoke or step.assign) and not core.abandoned:
            await self._call("on_partitions_assigned", step.assign)
            core.assigned(step.assign)

    async def _keep_alive(self, conn: Connection, done: anyio.Event) -> None:
        """Heartbeat at the interval until ``done``, on ``conn``, or on a connection of its
        own once ``conn`` is lost (given up when ``done``)."""
        try:
            lost = await self._keep_alive_on(conn, done)
            while lost and self._core.keeps_alive():
                with anyio.move_on_after(self._backoff()):
                    await done.wait()
                if done.is_set():
                    return
                try:
                    with anyio.CancelScope() as self._finding:  # given up when the callbacks end
                        async with self._connect() as again:
                            self._finding = None
                            self.conn = again
                            lost = await self._keep_alive_on(again, done)
                except RECONNECT as exc:
                    self._lost(exc)
        finally:
            self._finding = self.conn = None  # the main loop connects again after them

    async def _keep_alive_on(self, conn: Connection, done: anyio.Event) -> bool:
        """Heartbeats on ``conn`` until ``done`` (False), the member is out of the group or
        refused (False), or the connection is lost or does not serve the group (True)."""
        core = self._core
        while True:
            with anyio.move_on_after(core.heartbeat_interval_ms / 1000):
                await done.wait()
            if done.is_set() or not core.keeps_alive():
                return False
            sent = loop_ms()
            try:
                step = core.answered(await self._beat(conn), sent)
            except RECONNECT as exc:
                self._lost(exc)
                return True
            except Exception as exc:  # a refusal, raised when the callbacks returned
                self._beat_error = exc
                return False
            if step.find:
                self._lost(FindAgainError("another node coordinates the group"))
                return True
