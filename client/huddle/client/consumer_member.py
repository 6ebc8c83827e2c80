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
reads the connection's notices; while callbacks run, a third heartbeats at the interval
(``huddle.client.consumer_callbacks``), so a callback slower than the session timeout, or a
connection lost meanwhile, costs nothing.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.lowlevel

from huddle.client.anyio_runtime import loop_ms
from huddle.client.checks import (
    checked_offsets,
    checked_partitions,
    checked_pattern,
    checked_topic_names,
    require_type,
)
from huddle.client.connection import Connection
from huddle.client.consumer_callbacks import RECONNECT, FindAgainError, Reconciliation
from huddle.client.consumer_core import ConsumerCore
from huddle.client.discovery import bootstrap_addresses, connect_coordinator
from huddle.client.events import (
    CommitFailedError,
    ListenerFailedError,
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
    ErrorCode,
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


def _failure(exc: Exception) -> MemberFailedError:
    """What the member stops with when ``exc`` ended it: a refusal, with its code; the
    listener's callback, named, with what it raised as the cause (as the classic member's)."""
    cause: BaseException = exc
    if isinstance(exc, ListenerFailedError) and exc.__cause__ is not None:
        cause = exc.__cause__
        failure = MemberFailedError(None, f"{exc} raised {type(cause).__name__}: {cause}")
    else:
        code = exc.code if isinstance(exc, MemberFailedError) else getattr(exc, "code", None)
        failure = MemberFailedError(code, str(exc))
    failure.__cause__ = cause
    return failure


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
        regex = checked_pattern(topics, pattern)
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
            topics=checked_topic_names(topics or ()),
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
        self._reconciliation = Reconciliation(  # its callbacks, heartbeating meanwhile
            self._consumer,
            self._log,
            call=self._call,
            beat=self._beat,
            connect=partial(self._connect, notices=False),
            lost=self._lost_connection,
            backoff=self._backoff,
        )

    # --- what the application sees -----------------------------------------------------

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the member owns: none once it failed, once it heard it was fenced
        (while a callback runs still), or once its session may have run out while it could
        reach no coordinator, even before ``on_partitions_lost`` has run."""
        if self._failed is not None or not self._consumer.may_own(loop_ms()):
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
        self._consumer.subscribe(checked_topic_names(topics))
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
        if self._reconciliation.conn is not None:  # its callbacks' own, while they run
            return self._reconciliation.conn
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
                except RECONNECT as exc:  # lost: found again after a backoff, at its epoch
                    self._lost_connection(exc)
                finally:
                    self._conn = None
                    self._notify()
                self._wake = anyio.Event()  # set by a close (or the old connection's end)
                await self._wait_offline(self._backoff())
            await self._closed_while_disconnected()
        except Exception as exc:  # a refusal, the listener raising
            while isinstance(exc, ExceptionGroup) and exc.exceptions:
                exc = exc.exceptions[0]  # a task group's: what a callback or a heartbeat raised
            if not self._closing or isinstance(exc, ListenerFailedError):
                self._failed = _failure(exc)
                self._log.warning("member_failed", error=str(self._failed))
            if not isinstance(exc, ListenerFailedError):
                await self._lose_all()
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
        async with self._connect() as conn:
            yield conn

    @asynccontextmanager
    async def _connect(self, *, notices: bool = True) -> AsyncIterator[Connection]:
        async with connect_coordinator(
            self._bootstrap,
            self._consumer.group_id,
            client_id=self._client_id,
            timeout=self._answer_timeout_s(),
            notices=notices,
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
            await self._call("on_partitions_lost", self._consumer.owned)
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
            await self._call("on_partitions_lost", self._consumer.owned)
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
                raise FindAgainError(f"the coordinator answered {said}")
            self._failures = 0  # answered: the next loss backs off from the start
            await self._reconciliation.run(conn, step)
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

    async def _leave(self, conn: Connection) -> None:
        core = self._consumer
        if core.epoch <= 0:
            return
        try:
            if core.owned:
                await self._call("on_partitions_revoked", core.owned)
        finally:  # the member leaves even if the listener raised (its failure is raised then)
            try:
                await conn.request(core.leave_request(), timeout=_REQUEST_TIMEOUT_S)
            except RECONNECT as exc:  # its session ends at the coordinator instead
                self._log.warning("leave_failed", error=str(exc) or type(exc).__name__)
            core.left()

    async def _lose_all(self) -> None:
        """The member stopped on a refusal: what it owned is lost (as a Kafka consumer's
        entering its fatal state), the coordinator gives it to others."""
        owned, self._consumer.owned = self._consumer.owned, frozenset()
        if owned:
            with contextlib.suppress(ListenerFailedError):  # logged; failed already
                await self._call("on_partitions_lost", owned)

    async def _call(self, name: str, partitions: frozenset[TopicPartition]) -> None:
        """The listener's callback ``name``: what it raises stops the member, as a
        ``ListenerFailedError`` naming it (what it raised as its cause)."""
        try:
            await self._callbacks.call(name, partitions)
        except Exception as exc:
            self._log.exception("listener_failed", callback=name)
            raise ListenerFailedError(name) from exc

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
        # what the body raised comes out as it was (the task group would wrap it in a
        # group); only a cancellation goes through the task group, which may absorb it
        absorbed = False
        if isinstance(exc, anyio.get_cancelled_exc_class()):
            absorbed = bool(await self._tg.__aexit__(exc_type, exc, tb))
        else:
            await self._tg.__aexit__(None, None, None)
        if self._failed is not None and (exc is None or absorbed):
            raise self._failed
        return absorbed or None
