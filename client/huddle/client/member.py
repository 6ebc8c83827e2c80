"""``Member``: the member library's public face, a thin anyio adapter.

A ``Member`` builds the member core (``huddle.client.member_core``) and the driver around
it, and runs them on anyio through ``huddle.client.anyio_runtime.AnyioRuntime``: one task
group owns everything the member runs (the main loop, the only code that changes the core
and calls the listener, so callbacks never overlap and follow KIP-429's order; the heartbeat
task and the notice reader of the current connection; a watchdog that declares the member's
partitions lost when its session may have run out). Leaving the ``async with`` revokes what
the member owns, sends LeaveGroup (dynamic members only) and returns with nothing left
running. Nothing here decides: docs/member.md walks through the layers.
"""

from __future__ import annotations

import inspect
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Self, TypeVar

import anyio
import anyio.lowlevel
from prometheus_client import CollectorRegistry

import huddle.client.assignors  # noqa: F401 - registers the built-in assignors
from huddle.client.anyio_runtime import AnyioRuntime, loop_ms
from huddle.client.arguments import check_member
from huddle.client.assignors.base import ASSIGNORS, Assignor
from huddle.client.checks import (
    checked_offsets,
    checked_partitions,
    require_number,
    require_type,
)
from huddle.client.discovery import bootstrap_addresses
from huddle.client.driver import MemberDriver
from huddle.client.events import (
    CommitFailedError,
    Event,
    MemberFailedError,
    Rejoin,
    StableTimeoutError,
)
from huddle.client.listener import Callbacks, ListenerLike, RebalanceListener
from huddle.client.member_core import MemberConfig, MemberCore, MemberState
from huddle.client.metrics import MemberStats, collector_for
from huddle.client.security import NO_SECURITY, Security
from huddle.client.subscription import Subscription
from huddle.logs import library_logger
from huddle.protocol.embedded import HUDDLE, EmbeddedFormat, TopicPartition
from huddle.protocol.errors import (
    ErrorCode,
    InvalidArgumentError,
    UsageError,
    raise_for,
)
from huddle.protocol.messages import (
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
)

log = library_logger("huddle.member")
E = ErrorCode
V = TypeVar("V")
REQUEST_PARTITIONS = 10_000  # partitions per offset commit or fetch request, at most


class Member:
    """A group member. Use as ``async with Member(...) as member:``.

    ``group_protocol="consumer"`` makes a member of the consumer group protocol (KIP-848,
    ``huddle.client.consumer_member``): the coordinator assigns, and the member reconciles
    one heartbeat at a time. The default, ``"classic"``, is JoinGroup/SyncGroup."""

    def __new__(cls, *args: object, group_protocol: str = "classic", **kwargs: object) -> Self:
        if group_protocol == "consumer" and cls is Member:
            from huddle.client.consumer_member import ConsumerProtocolMember

            return super().__new__(ConsumerProtocolMember)  # type: ignore[return-value]
        if group_protocol not in ("classic", "consumer"):
            raise InvalidArgumentError(
                f"group_protocol must be 'classic' or 'consumer', not {group_protocol!r}"
            )
        return super().__new__(cls)

    def __init__(
        self,
        bootstrap: str,
        *,
        group_id: str,
        topics: Sequence[str] | None = None,
        pattern: str | re.Pattern[str] | None = None,
        assignors: Sequence[str | Assignor] = ("cooperative-sticky",),
        instance_id: str | None = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 1_000,
        rebalance_timeout_ms: int = 30_000,
        listener: ListenerLike | None = None,
        client_id: str = "huddle-member",
        retry_backoff_ms: int = 100,
        max_retry_backoff_ms: int = 1_000,
        lags: Callable[[], Mapping[TopicPartition, int]] | None = None,
        security: Security = NO_SECURITY,
        metrics_registry: CollectorRegistry | None = None,
        embedded: EmbeddedFormat = HUDDLE,
        group_protocol: str = "classic",
    ) -> None:
        # every bad argument is an InvalidArgumentError (a ValueError), raised here and now
        check_member(
            group_id=group_id,
            assignors=assignors,
            instance_id=instance_id,
            client_id=client_id,
            timeouts_ms={
                "session_timeout_ms": session_timeout_ms,
                "heartbeat_interval_ms": heartbeat_interval_ms,
                "rebalance_timeout_ms": rebalance_timeout_ms,
            },
            backoffs_ms={
                "retry_backoff_ms": retry_backoff_ms,
                "max_retry_backoff_ms": max_retry_backoff_ms,
            },
            lags=lags,
            security=security,
            metrics_registry=metrics_registry,
        )
        self._subscription = Subscription(topics, pattern)
        resolved = [ASSIGNORS.create(a) if isinstance(a, str) else a for a in assignors]
        bootstrap_addresses(bootstrap)
        # this Member's own unforgeable token, sent on each connection it makes: only a
        # connection presenting it moves its member there (never logged nor shown)
        self._incarnation = secrets.token_bytes(16)
        # Prometheus: this member's numbers, read from metrics_registry when it is scraped
        stats = MemberStats(group_id, client_id, lambda: len(self.assignment))
        metrics = None if metrics_registry is None else collector_for(metrics_registry)
        self._core = MemberCore(
            MemberConfig(
                group_id=group_id,
                topics=self._subscription.current(),
                instance_id=instance_id,
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                client_id=client_id,
                embedded=embedded,
            ),
            resolved,
        )
        self._timer = self._core.session  # the core's session clock, in milliseconds
        # every decision around the core (heartbeats, zombie safety, backoff) is the driver's
        self._driver = MemberDriver(
            self._core,
            self._subscription,
            retry_backoff_ms=retry_backoff_ms,
            max_retry_backoff_ms=max_retry_backoff_ms,
        )
        self._log = log.bind(group_id=group_id, client_id=client_id)
        # the anyio tasks that perform the runtime's actions (the flow, heartbeats, ...)
        self._runtime = AnyioRuntime(
            self._driver,
            Callbacks(listener if listener is not None else RebalanceListener()),
            bootstrap=bootstrap,
            security=security,
            incarnation=self._incarnation,
            lags=lags,
            stats=stats,
            metrics=metrics,
            log=self._log,
        )

    # --- what the application sees --------------------------------------------------

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member owns right now.

        Empty as soon as the member's session may have expired, even before
        ``on_partitions_lost`` has run: a process that was frozen (SIGSTOP, a long GC
        pause) and wakes up must not process anything before it finds out it was dropped.
        """
        return self._runtime.owned_now()

    @property
    def standby(self) -> frozenset[TopicPartition]:
        """Tasks whose state this member keeps warm as a standby (KIP-441)."""
        return self._core.standby

    @property
    def warmup(self) -> frozenset[TopicPartition]:
        """Tasks this member is catching up on before it may take them over (KIP-441)."""
        return self._core.warmup

    @property
    def member_id(self) -> str:
        return self._core.member_id

    @property
    def generation(self) -> int:
        return self._core.generation

    @property
    def is_leader(self) -> bool:
        return self._core.is_leader

    @property
    def state(self) -> MemberState:
        return self._core.state

    @property
    def connected(self) -> bool:
        """Whether the member has a live connection to the coordinator right now."""
        return self._runtime.conn is not None

    @property
    def protocol(self) -> str | None:
        """The embedded protocol (assignor) the group chose."""
        return self._core.protocol_name

    @property
    def rebalance_protocol(self) -> str:
        return self._core.rebalance_protocol.name.lower()

    @property
    def failure(self) -> MemberFailedError | None:
        """Why the member stopped, if it failed (what ``wait_stable()`` raises)."""
        return self._runtime.failure

    def _stable(self) -> bool:
        return (
            self._core.state is MemberState.STABLE
            and self._runtime.conn is not None
            and self._runtime.events.statistics().current_buffer_used == 0
            and self._core.rejoin_at_ms is None
        )

    async def wait_stable(self, timeout: float | None = None) -> None:
        """Until the member is joined and synced with no follow-up rebalance pending;
        ``StableTimeoutError`` (a ``TimeoutError``) after ``timeout`` seconds (None: no
        limit), saying what it saw. Raises the member's ``MemberFailedError`` once it
        failed, and a ``UsageError`` once it is closed (it will never be stable again)."""
        if timeout is not None:
            require_number("timeout", timeout, positive=False)
        with anyio.move_on_after(timeout):
            while True:
                if self._runtime.failure is not None:
                    raise self._runtime.failure
                if self._runtime.closed:
                    raise UsageError("the member is closed: it will not be stable again")
                if self._stable():
                    return
                await self._runtime.changed.wait()
        raise StableTimeoutError(
            f"the member was not stable (joined, synced, no rebalance pending) within "
            f"{timeout:g} s: {self._unstable()}"
        )

    def _unstable(self) -> str:
        """What keeps the member from being stable, as ``wait_stable`` says it."""
        core = self._core
        seen = [
            f"state {core.state.value}",
            f"generation {core.generation}",
            f"{len(core.owned)} partitions owned",
            "connected" if self._runtime.conn is not None else "not connected to the coordinator",
        ]
        if core.rejoin_at_ms is not None:
            seen.append("a rejoin pending")
        if self._runtime.events.statistics().current_buffer_used:
            seen.append("events not handled yet")
        return ", ".join(seen)

    @property
    def subscription(self) -> list[str]:
        """The topics the member subscribes to now (with a pattern: those it matches)."""
        return list(self._core.config.topics)

    async def subscribe(self, topics: Sequence[str]) -> None:
        """Subscribe to ``topics`` instead (a pattern given before is dropped). The member
        rejoins with the new subscription; partitions of topics it drops are revoked
        through the listener before it joins."""
        self._resubscribe(self._subscription.use(topics), "the subscription changed")
        await anyio.lowlevel.checkpoint()

    def _resubscribe(self, topics: Sequence[str], reason: str) -> None:
        rejoin = self._driver.resubscribe(list(topics), reason)
        if rejoin is not None:
            self._runtime.post(rejoin)

    async def commit(
        self, offsets: Mapping[TopicPartition, int], *, metadata: str | None = None
    ) -> None:
        """Commit offsets in the member's current generation. Raises CommitFailedError if
        the member is no longer in that generation (its partitions are then lost, unless it
        rejoined a later generation meanwhile: a refusal about a stay it has left changes
        nothing else), and the registered HuddleError for other refusals (e.g.
        REBALANCE_IN_PROGRESS).

        More than ``REQUEST_PARTITIONS`` offsets go in several requests, one after another
        (a coordinator bounds the partitions one request may name). Offsets are whole
        numbers from 0 to 2**63 - 1 keyed by ``TopicPartition`` (else
        ``InvalidArgumentError``)."""
        items = checked_offsets(offsets)
        if metadata is not None:
            require_type("metadata", metadata, str, "a str or None")
        conn = self._runtime.require_connection()
        await self._runtime.spoken_first()
        generation = self._core.current
        refused = self._driver.commit_refusal(generation, loop_ms())
        if refused is not None:
            raise CommitFailedError(E.ILLEGAL_GENERATION, refused)
        for chunk in _by_topic(items, REQUEST_PARTITIONS):
            request = self._driver.commit_request(chunk, metadata, generation)
            sent = loop_ms()
            response = await self._runtime.request(conn, request, OffsetCommitResponse, loaded=True)
            message = response.error_message or ""
            fell_out = self._driver.commit_answered(response.error_code, message, generation, sent)
            if fell_out is not None:
                self._runtime.post(fell_out)
                raise CommitFailedError(fell_out.code, message)
            if response.error_code != E.NONE:
                raise_for(response.error_code, response.error_message)
            for topic in response.topics:
                for p in topic.partitions:
                    if p.error_code != E.NONE:
                        raise_for(p.error_code, f"{topic.name}-{p.partition}")

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The committed offset of each partition, None where nothing is committed (in
        requests of at most ``REQUEST_PARTITIONS`` partitions)."""
        wanted = checked_partitions(partitions)
        conn = self._runtime.require_connection()

        async def fetch(request: OffsetFetchRequest) -> OffsetFetchResponse:
            response = await self._runtime.request(conn, request, OffsetFetchResponse, loaded=True)
            raise_for(response.error_code, response.error_message)
            return response

        return await fetch_committed(fetch, self._core.config.group_id, wanted)

    def _post(self, event: Event) -> None:
        """Queue ``event`` for the main loop (as the runtime's own tasks do)."""
        self._runtime.post(event)

    # --- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        rt = self._runtime
        if rt.tg is not None:
            raise UsageError("a Member can be entered only once")
        rt.tg = anyio.create_task_group()
        if rt.metrics is not None:
            rt.metrics.add(rt.stats)
        await rt.tg.__aenter__()
        rt.tg.start_soon(rt.run_guarded)
        rt.tg.start_soon(rt.watchdog)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        rt = self._runtime
        assert rt.tg is not None
        self._driver.close()
        rt.close_requested.set()
        if rt.join_scope is not None:
            rt.join_scope.cancel()  # a held JoinGroup would keep us waiting
        rt.post(Rejoin("closing"))
        rt.notify()
        # The body was cancelled by this member's own task group when the member failed
        # (see _run_guarded): the task group absorbs that, and the failure is raised instead.
        cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
        absorbed = False
        try:
            with anyio.move_on_after(self._core.config.session_timeout_ms / 1000) as scope:
                while self._core.state is not MemberState.FAILED and not rt.closed:
                    await rt.changed.wait()
            if scope.cancelled_caught:
                self._log.warning("close_timed_out")
        finally:
            if rt.metrics is not None:  # its series go with it, whatever happens next
                rt.metrics.remove(rt.stats)
            rt.tg.cancel_scope.cancel()
            if rt.callback_scope is not None:  # a callback still running is given up
                rt.callback_scope.cancel()
            if cancelled:
                absorbed = bool(await rt.tg.__aexit__(exc_type, exc, tb))
            else:
                await rt.tg.__aexit__(None, None, None)
            rt.events_in.close()
            rt.events.close()
            rt.closed = True  # even if closing timed out: nothing runs any more
            rt.notify()
        failure = rt.failure
        if failure is not None and (exc is None or absorbed):
            raise failure
        return absorbed or None


# help() and IDEs show __init__'s parameters, not those of the __new__ that picks the protocol
_INIT = inspect.signature(Member.__init__)
Member.__signature__ = _INIT.replace(  # type: ignore[attr-defined]
    parameters=list(_INIT.parameters.values())[1:]
)


def _by_topic(
    items: list[tuple[TopicPartition, V]], size: int
) -> Iterator[dict[str, list[tuple[int, V]]]]:
    """``items`` grouped by topic, in chunks of at most ``size`` partitions."""
    for start in range(0, max(len(items), 1), size):  # nothing: one empty request
        chunk: dict[str, list[tuple[int, V]]] = {}
        for tp, value in items[start : start + size]:
            chunk.setdefault(tp.topic, []).append((tp.partition, value))
        yield chunk


async def fetch_committed(
    fetch: Callable[[OffsetFetchRequest], Awaitable[OffsetFetchResponse]],
    group_id: str,
    partitions: Sequence[TopicPartition],
) -> dict[TopicPartition, int | None]:
    """The committed offset of each of ``partitions`` of ``group_id`` (None: nothing
    committed), asked with ``fetch`` in requests of at most ``REQUEST_PARTITIONS``."""
    found: dict[TopicPartition, int | None] = {}
    for chunk in _by_topic([(tp, None) for tp in partitions], REQUEST_PARTITIONS):
        topics = [
            OffsetFetchTopic(name=t, partitions=[p for p, _ in ps]) for t, ps in chunk.items()
        ]
        response = await fetch(OffsetFetchRequest(group_id=group_id, topics=topics))
        for t in response.topics:
            for p in t.partitions:
                found[TopicPartition(t.name, p.partition)] = p.offset if p.offset >= 0 else None
    return found
