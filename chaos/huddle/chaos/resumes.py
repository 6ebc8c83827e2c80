"""Partitions a chaos member was given but cannot start yet: their committed offsets could
not be read when they were assigned (the coordinator moved, the connection dropped while
the callback ran).

Processing such a partition from offset 0, or from anything but its committed offset,
would process records twice below a commit (or skip some), so the worker holds it back
instead: ``PendingResumes.run`` asks the member for the committed offsets again, once its
callbacks have returned and it has found its coordinator again, and hands each answer to
the worker. A partition revoked or lost meanwhile is dropped; one given again meanwhile is
asked again (an answer read before it was given again may be older than a commit made
since).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping

import anyio
import structlog

from huddle.protocol.embedded import TopicPartition

log = structlog.get_logger("huddle.chaos.worker")
RETRY_S = 0.1  # between two attempts to read the committed offsets

Fetch = Callable[[frozenset[TopicPartition]], Awaitable[Mapping[TopicPartition, int | None]]]


class PendingResumes:
    """The partitions waiting for their committed offsets, each with the turn it was
    given in (an answer counts only for the turn it was asked for)."""

    def __init__(self) -> None:
        self._pending: dict[TopicPartition, int] = {}
        self._turn = 0
        self._added = anyio.Event()

    @property
    def pending(self) -> frozenset[TopicPartition]:
        return frozenset(self._pending)

    def defer(self, tps: Iterable[TopicPartition]) -> None:
        """Hold ``tps`` back until their committed offsets are read."""
        for tp in tps:
            self._turn += 1
            self._pending[tp] = self._turn
        self._added.set()

    def drop(self, tps: Iterable[TopicPartition]) -> None:
        """``tps`` are no longer the member's (revoked, lost): stop asking for them."""
        for tp in tps:
            self._pending.pop(tp, None)

    async def run(
        self,
        fetch: Fetch,
        owned: Callable[[], frozenset[TopicPartition]],
        take: Callable[[Mapping[TopicPartition, int | None]], None],
    ) -> None:
        """Forever: read the committed offsets of the pending partitions the member owns
        (``owned``) through ``fetch``, and ``take`` those still pending in the turn they
        were asked for."""
        while True:
            if not self._pending:
                self._added = anyio.Event()
                await self._added.wait()
                continue
            asked = {tp: turn for tp, turn in self._pending.items() if tp in owned()}
            if not asked:  # not connected, or its session may have run out
                await anyio.sleep(RETRY_S)
                continue
            try:
                offsets = await fetch(frozenset(asked))
            except Exception as exc:  # not connected, not the coordinator: again shortly
                log.info("committed_fetch_retry", error=repr(exc), partitions=len(asked))
                await anyio.sleep(RETRY_S)
                continue
            answered = {
                tp: offsets.get(tp) for tp, turn in asked.items() if self._pending.get(tp) == turn
            }
            self.drop(answered)
            if answered:
                take(answered)
