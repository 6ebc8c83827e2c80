"""``Member(..., group_protocol="consumer")``: a huddle member on the consumer group protocol
(KIP-848), run on anyio around the sans-IO ``huddle.client.consumer_core.ConsumerCore``.

The coordinator computes the assignment (its server-side assignor); the member heartbeats
with its epoch and reconciles toward what each answer gives it: it revokes first (the
listener's ``on_partitions_revoked``, then the partitions are given up and the next
heartbeat, sent at once, acknowledges it), then takes what it was given
(``on_partitions_assigned``). Fenced (FENCED_MEMBER_EPOCH) or forgotten (UNKNOWN_MEMBER_ID),
it loses everything (``on_partitions_lost``) and joins again with epoch 0. A pushed
``ConsumerAssignmentChanged`` wakes it to heartbeat at once, so it reconciles within a round
trip rather than at its next heartbeat interval. Leaving the ``async with`` revokes what it
owns and leaves with epoch -1 (a static member: -2, keeping its place until its session
runs out). One task runs the heartbeats and the listener (callbacks never overlap); a second
reads the connection's notices. While callbacks run, a third heartbeats at the interval (as
a Kafka consumer's background thread), reporting the partitions being revoked as owned
still, so a callback slower than the session timeout costs nothing: the coordinator's
rebalance timeout bounds a revocation instead.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.lowlevel

from huddle.client.anyio_runtime import loop_ms
from huddle.client.checks import checked_offsets, checked_partitions, require_type
from huddle.client.connection import Connection
from huddle.client.connection_errors import ConnectionClosedError
from huddle.client.consumer_core import ConsumerCore, Reconcile
from huddle.client.discovery import bootstrap_addresses, connect_coordinator
from huddle.client.events import (
    CommitFailedError,
    MemberFailedError,
    NotConnectedError,
    StableTimeoutError,
)
from huddle.client.listener import Callbacks, ListenerLike, RebalanceListener
from huddle.client.member import REQUEST_PARTITIONS, Member, _by_topic, fetch_committed
from huddle.client.security import NO_SECURITY, Security
from huddle.client.steps import MemberState
from huddle.logs import library_logger
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import (
    ClientError,
    CoordinatorNotAvailableError,
    ErrorCode,
    InvalidArgumentError,
    UsageError,
    error_name,
    raise_for,
    to_code,
)
from huddle.protocol.messages import (
    ConsumerAssignmentChanged,
    ConsumerHeartbeatResponse,
    ErrorResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

log = library_logger("huddle.member")
_REQUEST_TIMEOUT_S = 10.0


# answered so, a commit is refused for the member's epoch: it is not (or no longer) in it
_COMMIT_FENCED = frozenset(
    {ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION}
)


class _NotCoordinatorError(ClientError, ConnectionError):
    """The node answered that it does not coordinate the group (now): find it again."""


# a connection lost, or no coordinator found yet: the member connects again after a backoff
_RECONNECT = (ConnectionClosedError, CoordinatorNotAvailableError, OSError, TimeoutError)


def _topic_names(topics: Sequence[str]) -> list[str]:
    if isinstance(topics, str) or not all(isinstance(t, str) and t for t in topics):
        raise InvalidArgumentError("topics is a list of topic names (non-empty strings)")
    return list(topics)


def _regex(topics: Sequence[str] | None, pattern: str | re.Pattern[str] | None) -> str | None:
    """The pattern as the regular expression the coordinator matches (RE2: a whole-name
    match, Kafka's ``SubscriptionPattern``); a subscription is topics or a pattern."""
    if (topics is None) == (pattern is None) or topics == []:
        raise InvalidArgumentError("give topics or a pattern (one of them)")
    if isinstance(pattern, re.Pattern):
        return pattern.pattern
    if pattern is not None and (not isinstance(pattern, str) or not pattern):
        raise InvalidArgumentError("pattern is a non-empty str or a compiled re.Pattern")
    return pattern


class ConsumerProtocolMember(Member):
    """A ``Member`` on the consumer group protocol; made by ``Member(...,
    group_protocol="consumer")``. ``assignors`` are the coordinator's then (not sent); a
    ``pattern`` is matched by the coordinator (RE2, whole names)."""

    def __init__(  # the classic Member's signature: a Member is made with it
        self,
        bootstrap: str,
        *,
        group_id: str,
        topics: Sequence[str] | None = None,
        pattern: str | re.Pattern[str] | None = None,
        instance_id: str | None = None,
        heartbeat_interval_ms: int = 1_000,
        rebalance_timeout_ms: int = 30_000,
        listener: ListenerLike | None = None,
        client_id: str = "huddle-member",
        retry_backoff_ms: int = 100,
        max_retry_backoff_ms: int = 1_000,
        security: Security = NO_SECURITY,
        group_protocol: str = "consumer",
        **classic_only: Any,
    ) -> None:
        regex = _regex(topics, pattern)
        bootstrap_addresses(bootstrap)  # a malformed list: InvalidArgumentError, now
        self._bootstrap = bootstrap
        self._client_id = client_id
        self._security = security
        self._incarnation = secrets.token_bytes(16)
        self._backoff_s = retry_backoff_ms / 1000
        self._max_backoff_s = max(max_retry_backoff_ms, retry_backoff_ms) / 1000
        self._connects = 0  # connection attempts that failed (which bootstrap address next)
        self._failures = 0  # in a row, since a heartbeat was last answered
        self._callbacks = Callbacks(listener if listener is not None else RebalanceListener())
        self._consumer = ConsumerCore(
            group_id=group_id,
            topics=_topic_names(topics or ()),
            pattern=regex,
            instance_id=instance_id,
            rebalance_timeout_ms=rebalance_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
        )
        self._log = log.bind(group_id=group_id, client_id=client_id, protocol="consumer")
        self._tg: anyio.abc.TaskGroup | None = None
        self._conn: Connection | None = None
        self._wake = anyio.Event()
        self._changed = anyio.Event()
        self._closing = False
        self._closed = False
        self._settled = False  # the last answer asked nothing more of the member
        self._failed: MemberFailedError | None = None
        self._beat_error: Exception | None = None  # a heartbeat's, while callbacks ran

    # --- what the application sees -----------------------------------------------------

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the member owns: none once its session may have run out while it
        could reach no coordinator, even before ``on_partitions_lost`` has run."""
        if not self._consumer.may_own(loop_ms()):
            return frozenset()
        return self._consumer.owned

    @property
    def standby(self) -> frozenset[TopicPartition]:
        return frozenset()

    @property
    def warmup(self) -> frozenset[TopicPartition]:
        return frozenset()

    @property
    def member_id(self) -> str:
        return self._consumer.member_id

    @property
    def generation(self) -> int:
        """The member epoch."""
        return self._consumer.epoch

    @property
    def is_leader(self) -> bool:
        return False  # the coordinator assigns

    @property
    def state(self) -> MemberState:
        if self._failed is not None:
            return MemberState.FAILED
        if self._consumer.epoch <= 0:
            return MemberState.UNJOINED
        return MemberState.STABLE if self._settled else MemberState.JOINING

    @property
    def connected(self) -> bool:
        return self._conn is not None

    @property
    def protocol(self) -> str | None:
        return None

    @property
    def rebalance_protocol(self) -> str:
        return "consumer"

    @property
    def failure(self) -> MemberFailedError | None:
        return self._failed

    @property
    def subscription(self) -> list[str]:
        """The topics the member subscribes to by name; with a pattern (which the
        coordinator matches), the topics of the partitions it owns."""
        core = self._consumer
        if core.pattern is None:
            return list(core.topics)
        return sorted({tp.topic for tp in core.owned} | set(core.topics))

    async def subscribe(self, topics: Sequence[str]) -> None:
        """Subscribe to ``topics`` instead (a pattern given before is dropped): the next
        heartbeat, sent at once, tells the coordinator, and the member revokes what the new
        target takes away (partitions of topics it dropped) and takes what it gives."""
        self._consumer.subscribe(_topic_names(topics))
        self._wake.set()
        await anyio.lowlevel.checkpoint()

    async def commit(
        self, offsets: Mapping[TopicPartition, int], *, metadata: str | None = None
    ) -> None:
        """Commit offsets at the member's epoch, as the classic ``Member.commit`` does in
        its generation. Raises CommitFailedError when the coordinator refuses the epoch
        (STALE_MEMBER_EPOCH: the member's epoch moved on and it has not heard yet;
        UNKNOWN_MEMBER_ID: it is no longer in the group; ILLEGAL_GENERATION: the
        coordinator holds no such group), the registered HuddleError for other refusals."""
        items = checked_offsets(offsets)
        if metadata is not None:
            require_type("metadata", metadata, str, "a str or None")
        conn = self._serving()
        for chunk in _by_topic(items, REQUEST_PARTITIONS):
            request = self._consumer.commit_request(chunk, metadata)
            response = await conn.request_loaded(request, timeout=_REQUEST_TIMEOUT_S)
            code = to_code(response.error_code)
            message = getattr(response, "error_message", None) or ""
            if code in _COMMIT_FENCED:
                raise CommitFailedError(code, message)
            raise_for(code, message)
            for topic in getattr(response, "topics", ()):
                for p in topic.partitions:
                    raise_for(p.error_code, f"{topic.name}-{p.partition}")

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The committed offset of each partition, None where nothing is committed."""
        conn = self._serving()

        async def fetch(request: OffsetFetchRequest) -> OffsetFetchResponse:
            return await conn.call(request, OffsetFetchResponse, timeout=_REQUEST_TIMEOUT_S)

        return await fetch_committed(fetch, self._consumer.group_id, checked_partitions(partitions))

    def _serving(self) -> Connection:
        if self._conn is None:
            raise NotConnectedError("the member is not connected to the coordinator")
        return self._conn

    def _stable(self) -> bool:
        return self._conn is not None and self._settled and self._consumer.epoch > 0

    async def wait_stable(self, timeout: float | None = None) -> None:
        """Until the member is in the group and its last heartbeat asked nothing more of it."""
        with anyio.move_on_after(timeout):
            while True:
                if self._failed is not None:
                    raise self._failed
                if self._closed:
                    raise UsageError("the member is closed: it will not be stable again")
                if self._stable():
                    return
                await self._changed.wait()
        raise StableTimeoutError(f"the member was not stable within {timeout:g} s")

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # --- running -------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while not self._closing:
                try:
                    async with self._coordinator() as conn:
                        self._conn = conn
                        self._notify()
                        assert self._tg is not None
                        self._tg.start_soon(self._read_notices, conn)
                        await self._heartbeats(conn)
                    return  # closed, and left
                except _RECONNECT as exc:  # lost: found again after a backoff, at its epoch
                    self._lost_connection(exc)
                finally:
                    self._conn = None
                    self._notify()
                self._wake = anyio.Event()  # set by a close (or the old connection's end)
                await self._wait_offline(self._backoff())
            await self._closed_while_disconnected()
        except Exception as exc:  # a refusal, the listener raising
            if not self._closing:
                code = (
                    exc.code if isinstance(exc, MemberFailedError) else getattr(exc, "code", None)
                )
                self._failed = MemberFailedError(code, str(exc))
                self._failed.__cause__ = exc
                self._log.warning("member_failed", error=str(exc))
        finally:
            self._conn = None
            self._closed = True
            self._notify()

    @asynccontextmanager
    async def _coordinator(self) -> AsyncIterator[Connection]:
        """A connection to the node that coordinates the group now (a cluster's owner of its
        shard), asking the bootstrap addresses from the next one after each failure, each
        for as long as a heartbeat waits (a frozen node costs no more); a refusal of the
        member (authentication, authorization) is raised as it came."""
        self._wake = anyio.Event()
        async with connect_coordinator(
            self._bootstrap,
            self._consumer.group_id,
            client_id=self._client_id,
            timeout=self._answer_timeout_s(),
            start=self._connects,
            security=self._security,
            incarnation=self._incarnation,
        ) as conn:
            self._log.info("member_connected", member_id=self.member_id, node=conn.bootstrap)
            yield conn

    def _lost_connection(self, exc: BaseException) -> None:
        self._connects += 1  # the next attempt asks another bootstrap address first
        self._failures += 1
        self._consumer.disconnected()
        self._settled = False
        self._log.info(
            "member_disconnected",
            member_id=self.member_id,
            member_epoch=self._consumer.epoch,
            reason=str(exc) or type(exc).__name__,
        )

    async def _wait_offline(self, wait_s: float) -> None:
        """Wait ``wait_s`` between connection attempts (a close ends it), and once the
        member's session may have run out meanwhile, lose what it owns: the coordinator
        may have given it to others. Its epoch stays: a coordinator that still knows it
        gives the partitions back, one that fenced it answers UNKNOWN_MEMBER_ID."""
        deadline = self._consumer.session_deadline()
        if deadline is not None:
            wait_s = min(wait_s, max(deadline - loop_ms(), 0) / 1000)
        with anyio.move_on_after(wait_s):
            await self._wake.wait()
        if not self._consumer.may_own(loop_ms()):
            self._log.info("session_expired_offline", partitions=len(self._consumer.owned))
            await self._callbacks.call("on_partitions_lost", self._consumer.owned)
            self._consumer.lost()
            self._settled = False
            self._notify()

    def _backoff(self) -> float:
        """Seconds to wait before the next connection attempt: ``retry_backoff_ms``,
        doubling with each failure in a row, up to ``max_retry_backoff_ms``."""
        if self._closing:
            return 0.0
        return min(self._backoff_s * 2.0 ** max(self._failures - 1, 0), self._max_backoff_s)

    async def _closed_while_disconnected(self) -> None:
        """Closed with no coordinator to leave through: what it owns may be given to others
        once its session ends, so it is lost (as the classic member's)."""
        if self._consumer.owned:
            await self._callbacks.call("on_partitions_lost", self._consumer.owned)
        self._consumer.left()

    async def _heartbeats(self, conn: Connection) -> None:
        core = self._consumer
        while not self._closing:
            self._wake = anyio.Event()
            sent = loop_ms()
            answer = await self._beat(conn)
            step = core.answered(answer, sent)
            if step.find:
                said = error_name(answer.error_code)
                raise _NotCoordinatorError(f"the coordinator answered {said}")
            self._failures = 0  # answered: the next loss backs off from the start
            await self._reconcile(conn, step)
            self._settled = not (step.again or step.retry)
            self._notify()
            if step.again:
                continue
            wait_s = self._backoff_s if step.retry else core.heartbeat_interval_ms / 1000
            with anyio.move_on_after(wait_s):
                await self._wake.wait()
        await self._leave(conn)

    def _answer_timeout_s(self) -> float:
        return self._consumer.answer_timeout_ms(_REQUEST_TIMEOUT_S * 1000) / 1000

    async def _beat(self, conn: Connection) -> ConsumerHeartbeatResponse | ErrorResponse:
        answer = await conn.request(self._consumer.request(), timeout=self._answer_timeout_s())
        if not isinstance(answer, ConsumerHeartbeatResponse | ErrorResponse):
            code = getattr(answer, "error_code", None)
            message = getattr(answer, "error_message", "") or type(answer).__name__
            raise MemberFailedError(code, f"the coordinator answered {message}")
        return answer

    async def _reconcile(self, conn: Connection, step: Reconcile) -> None:
        """The callbacks ``step`` asks, heartbeating meanwhile; then those of what was
        answered while they ran (a target, a fence), until nothing more is asked."""
        core = self._consumer
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
            step = core.callbacks_done()
            if self._beat_error is not None:
                raise self._beat_error

    async def _callbacks_of(self, step: Reconcile) -> None:
        core = self._consumer
        if step.lost:
            self._log.info("partitions_lost", partitions=len(step.lost))
            await self._callbacks.call("on_partitions_lost", step.lost)
            core.lost()
        if step.revoke:
            await self._callbacks.call("on_partitions_revoked", step.revoke)
            core.revoked(step.revoke)
        # as the cooperative order: assigned follows, maybe empty; not once fenced meanwhile
        if (step.revoke or step.assign) and not core.abandoned:
            await self._callbacks.call("on_partitions_assigned", step.assign)
            core.assigned(step.assign)

    async def _keep_alive(self, conn: Connection, done: anyio.Event) -> None:
        """Heartbeat at the interval until ``done``; a lost connection or another
        coordinator stops it, a refusal is raised once the callbacks returned."""
        core = self._consumer
        while True:
            with anyio.move_on_after(core.heartbeat_interval_ms / 1000):
                await done.wait()
            if done.is_set() or not core.keeps_alive():
                return
            sent = loop_ms()
            try:
                step = core.answered(await self._beat(conn), sent)
            except _RECONNECT:
                return
            except Exception as exc:  # a refusal, raised when the callbacks returned
                self._beat_error = exc
                return
            if step.find:
                return
            self._failures = 0

    async def _leave(self, conn: Connection) -> None:
        core = self._consumer
        if core.epoch <= 0:
            return
        if core.owned:
            await self._callbacks.call("on_partitions_revoked", core.owned)
        try:
            await conn.request(core.leave_request(), timeout=_REQUEST_TIMEOUT_S)
        except _RECONNECT as exc:  # its session ends at the coordinator instead
            self._log.warning("leave_failed", error=str(exc) or type(exc).__name__)
        core.left()

    async def _read_notices(self, conn: Connection) -> None:
        async for notice in conn.notices:
            if (
                isinstance(notice, ConsumerAssignmentChanged)
                and notice.member_id == self._consumer.member_id
            ):
                self._wake.set()
        # the stream ends with the connection: the heartbeat loop finds it closed now, once a
        # callback running returns (a callback is never cut off)
        if self._conn is conn:
            self._wake.set()

    # --- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None:
            raise UsageError("a Member can be entered only once")
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        self._closing = True
        self._wake.set()
        with anyio.move_on_after(_REQUEST_TIMEOUT_S * 2):
            while not self._closed:
                await self._changed.wait()
        self._tg.cancel_scope.cancel()
        absorbed = await self._tg.__aexit__(exc_type, exc, tb)
        if self._failed is not None and exc is None:
            raise self._failed
        return absorbed or None
