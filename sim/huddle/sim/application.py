"""The application on top of a simulated member: what it does in its callbacks, how long
they take, the positions it processes from, the offsets it commits and fetches, and its
local state per task (KIP-441's lags).

It stands for an application using ``huddle.client.Member``: it commits through the
member's driver (``commit_refusal``, ``commit_request``, ``commit_response``), as
``Member.commit`` does, and takes what it owns from the member library. The member process
(``huddle.sim.process``) calls it where ``Member`` would call the application.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from huddle.client.events import ReconnectError
from huddle.client.generation import Generation
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    Response,
)

if TYPE_CHECKING:
    from huddle.sim.process import MemberProcess

E = ErrorCode
COMMIT_INTERVAL_MS = 5_000.0  # the application commits this often (Kafka's auto-commit default)
RECORD_MS = 10.0  # a partition gets one record this often: positions move by one
GROUP_ID = "sim"  # the simulated group
SPOKEN_POLL_MS = 1.0  # a commit waiting for the member's own first request looks this often


class Application:
    """One process's application; a new one each time the process starts."""

    def __init__(self, process: MemberProcess) -> None:
        self.process = process
        self.owned: set[TopicPartition] = set()  # what its callbacks gave it
        self.revoking: frozenset[TopicPartition] = frozenset()  # a revocation running
        self.positions: dict[TopicPartition, tuple[int, float]] = {}  # base offset, since
        self.committing = False
        self.commit_cid = 0
        self.replicas: frozenset[TopicPartition] = frozenset()  # standby and warm-up
        # local state per task (KIP-441): its lag then, since when, whether it is kept up
        self.state: dict[TopicPartition, tuple[float, float, bool]] = {}
        process.after_local(COMMIT_INTERVAL_MS, self.commit_tick)

    # --- callbacks --------------------------------------------------------------------

    def callback(self, name: str, partitions: frozenset[TopicPartition]) -> float:
        """The listener's ``name`` begins: what the application does; how long it takes."""
        duration = self.process.world.callback_ms(name)
        if name == "on_partitions_revoked":
            self.revoking = partitions
            self.commit(partitions)  # the last positions, before giving them up
            self.owned -= partitions
            for tp in partitions:  # if it gets one back, it starts from the committed offset
                self.positions.pop(tp, None)
        elif name == "on_partitions_lost":
            self.owned -= partitions
            for tp in partitions:
                self.positions.pop(tp, None)
        else:
            self.owned |= partitions
            self.fetch(partitions)
        self.track()
        return duration

    def callback_done(self) -> None:
        for tp in self.revoking:
            self.positions.pop(tp, None)
        self.revoking = frozenset()

    def replicas_assigned(
        self, standby: frozenset[TopicPartition], warmup: frozenset[TopicPartition]
    ) -> None:
        self.track()
        self.replicas = standby | warmup
        self.track()

    # --- KIP-441's local state ----------------------------------------------------------

    def lags(self) -> dict[TopicPartition, int] | None:
        if self.process.world.config.protocol != "high-availability":
            return None
        self.track()
        now = self.process.now_ms()
        return {tp: int(self._lag(tp, now)) for tp in self.state}

    def _lag(self, tp: TopicPartition, now: float) -> float:
        """A task's state catches up while the member runs it or keeps a replica of it,
        and falls behind (the log grows) once it stops."""
        lag, since, tracking = self.state[tp]
        config = self.process.world.config
        if tracking:
            return max(0.0, lag - (now - since) * config.catch_up_per_ms)
        return lag + (now - since) * config.produce_per_ms

    def track(self) -> None:
        """Which tasks' state the member keeps up now: what it runs and its replicas."""
        config = self.process.world.config
        if config.protocol != "high-availability":
            return
        now = self.process.now_ms()
        owned = self.process.core.owned
        kept = owned | self.replicas
        tasks = set(kept)  # a set (``kept | self.state.keys()`` is one, typed a frozenset)
        tasks.update(self.state.keys())
        for tp in tasks:
            if tp in self.state:
                lag = 0.0 if tp in owned else self._lag(tp, now)
            else:
                lag = 0.0 if tp in owned else float(config.initial_lag)
            self.state[tp] = (lag, now, tp in kept)

    # --- commits and fetches ------------------------------------------------------------

    def _position(self, tp: TopicPartition, now: float) -> int | None:
        kept = self.positions.get(tp)
        if kept is None:
            return None
        base, since = kept
        return base + int((now - since) / RECORD_MS)

    def commit_tick(self) -> None:
        process = self.process
        process.after_local(COMMIT_INTERVAL_MS, self.commit_tick)
        # the application commits from the task that runs its callbacks: not during one
        if not self.committing and process.runtime.listening is None:
            self.commit(process.driver.visible(process.now_ms()))

    def commit(self, partitions: frozenset[TopicPartition]) -> None:
        process = self.process
        if not process.runtime.offline.serving or not partitions:
            return
        now = process.now_ms()
        chunk: dict[str, list[tuple[int, int]]] = {}
        for tp in sorted(partitions):
            position = self._position(tp, now)
            if position is not None:
                chunk.setdefault(tp.topic, []).append((tp.partition, position))
        if not chunk:
            return
        self._commit(chunk, 0.0)

    def _commit(self, chunk: dict[str, list[tuple[int, int]]], waited_ms: float) -> None:
        """Commit ``chunk`` as ``Member.commit`` does: after the member's own first request
        on a new connection (``spoken_first``: a heartbeat's timeout at most), in the
        generation it is in then, unless the driver refuses it."""
        process = self.process
        offline = process.runtime.offline
        if not offline.serving:
            return
        driver = process.driver
        if offline.commit_waits and waited_ms < driver.heartbeat_timeout_ms:
            process.after_local(SPOKEN_POLL_MS, self._commit, chunk, waited_ms + SPOKEN_POLL_MS)
            return
        now = process.now_ms()
        generation = process.core.current
        if driver.commit_refusal(generation, now) is not None:
            return  # Member.commit refuses it (CommitFailedError): nothing is sent
        request = driver.commit_request(chunk, None, generation)
        self.committing = True
        self.commit_cid = process.runtime.send(
            request,
            partial(self._committed, generation=generation, sent=now),
            process.core.config.session_timeout_ms,
        )

    def commit_timed_out(self, cid: int) -> None:
        if self.committing and cid == self.commit_cid:
            self.committing = False

    def _committed(self, response: Response, generation: Generation, sent: float) -> None:
        self.committing = False
        try:
            fell_out = self.process.driver.commit_response(response, generation, sent)
        except ReconnectError:  # out of step: the application's commit fails, nothing else
            return
        if fell_out is not None:
            self.process.runtime.post(fell_out)

    def fetch(self, partitions: frozenset[TopicPartition]) -> None:
        """Where to start: the committed offsets of newly assigned partitions."""
        process = self.process
        if not process.runtime.offline.serving or not partitions:
            return
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = OffsetFetchRequest(
            group_id=GROUP_ID,
            topics=[OffsetFetchTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        process.runtime.send(request, self._fetched, process.core.config.session_timeout_ms)

    def _fetched(self, response: Response) -> None:
        if not isinstance(response, OffsetFetchResponse) or response.error_code != E.NONE:
            return
        now = self.process.now_ms()
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition)
                if tp in self.owned and tp not in self.positions:
                    self.positions[tp] = (max(p.offset, 0), now)
