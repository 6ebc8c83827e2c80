"""Answers held until their changes are kept, and what happens when a change cannot be.

A request whose changes must be kept (in the data dir, or in etcd for a cluster node) is
answered once its batch is: the keeper (``GroupCommit`` or ``EtcdKeeper``) gives the batch
back to ``kept`` or to ``not_kept``. While a connection has ``HELD_PER_CONNECTION`` answers
waiting, the intake serves it no further; once they go it is served again (or closed, if
its peer shut its side and everything it sent is answered).

A batch the data dir could not keep stops the coordinator (``storage_failed``), as Kafka
stops a broker whose log directories failed: the state in memory is ahead of the disk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

import structlog

from huddle.coordinator.connection import Connection
from huddle.coordinator.storage.group_commit import Held
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    AlterTopicsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ErrorResponse,
    Reply,
)

log = structlog.get_logger("huddle.server")

HELD_PER_CONNECTION: Final = 1_000  # answers waiting for the disk before a connection waits
_TOPIC_CHANGES = (CreateTopicsRequest, AlterTopicsRequest, DeleteTopicsRequest)


class HeldAnswers:
    """Releases or refuses the answers the keeper held; stops the server when the data dir
    fails."""

    def __init__(
        self,
        conns: Mapping[int, Connection],
        *,
        backlogged: Callable[[Connection], None],
        flush: Callable[[], None],
        stop: Callable[[], None],
    ) -> None:
        self.conns = conns
        self._backlogged = backlogged  # the intake's: serve the connection's frames again
        self._flush = flush
        self._stop = stop  # no more requests, and a graceful shutdown
        self.clustered = False  # a cluster node: what was not kept is retriable elsewhere
        self.failure: str | None = None  # why the server stopped by itself
        self.limit = HELD_PER_CONNECTION  # read once: a test may lower the module's

    def kept(self, held: list[Held]) -> None:
        """A batch is in the data dir: its answers go out."""
        conns = self.conns
        for conn_id, _, out in held:
            conn = conns.get(conn_id)
            if conn is not None:
                conn.held -= 1
            for to, frame in out:  # released together: each as its client reads
                receiver = conns.get(to)
                if receiver is not None:
                    receiver.send_when_read(frame)
        self._after_held(held)
        self._flush()

    def not_kept(self, held: list[Held]) -> None:
        """A batch could not be kept: no acknowledgement and no notices. Every answer the
        held requests produced becomes a storage error to whoever it was for: the caller,
        or members whose JoinGroup or SyncGroup the request completed. A request the core
        still holds (a JoinGroup waiting for its phase to end) is answered by the core,
        once: at shutdown."""
        conns = self.conns
        clustered = self.clustered
        for caller, call, out in held:
            held_by = conns.get(caller)
            if held_by is not None:
                held_by.held -= 1
            topics = call is not None and isinstance(call.request, _TOPIC_CHANGES)
            for conn_id, frame in out:
                conn = conns.get(conn_id)
                if conn is not None and type(frame) is Reply:
                    conn.send(not_kept(frame.correlation_id, clustered=clustered, topics=topics))
        self._after_held(held)
        self._flush()

    def storage_failed(self) -> None:
        """A change could not be kept: the state in memory is ahead of the data dir. Stop
        (as Kafka stops a broker whose log directories failed) rather than serve it; a
        restart replays what was kept."""
        if self.failure is not None:
            return
        self.failure = "a change could not be written to the data dir"
        log.critical("coordinator_stopping", reason=self.failure)
        self._stop()

    def _after_held(self, held: list[Held]) -> None:
        """Connections whose held answers went out may be served again, or closed (a peer
        that shut its side once everything it sent is answered)."""
        conns = self.conns
        for conn_id in {conn_id for conn_id, _, _ in held}:
            conn = conns.get(conn_id)
            if conn is None or conn.closing or conn.held >= self.limit:
                continue
            if conn.inbox:
                self._backlogged(conn)
            elif conn.ends_after_input and not conn.held:
                conn.input_done()
            else:
                conn.release_input()  # its reading was held while its answers waited


def not_kept(correlation_id: int, *, clustered: bool = False, topics: bool = False) -> Reply:
    """The answer to a request whose change could not be kept."""
    if clustered and topics:  # the topic changed meanwhile, or etcd did not answer: retriable
        return Reply(
            correlation_id=correlation_id,
            response=ErrorResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message="the topic change could not be kept in etcd (the topic changed "
                "meanwhile, or etcd did not answer); the node holds etcd's topics again: "
                "make the request again",
            ),
        )
    if clustered:  # the shard is no longer served here: find its coordinator again
        return Reply(
            correlation_id=correlation_id,
            response=ErrorResponse(
                error_code=ErrorCode.NOT_COORDINATOR,
                error_message="the change could not be kept in etcd; find the coordinator again",
            ),
        )
    return Reply(
        correlation_id=correlation_id,
        response=ErrorResponse(
            error_code=ErrorCode.KAFKA_STORAGE_ERROR,
            error_message="the coordinator could not keep this change in its data dir",
        ),
    )
