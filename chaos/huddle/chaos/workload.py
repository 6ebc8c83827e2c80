"""The synthetic workload of one member: endless partitions processed at a fixed rate.

Pure and clock-free: the caller passes ``now`` (seconds). Every partition is the sequence
of records 0, 1, 2, ...; an owned partition that is ready (restored, in stateful mode)
advances by ``rate`` records per second from its resume offset. Records are always
waiting, so the first one is processed the moment a task is ready (record ``k`` after
the start is due at ``start + k / rate``): a member that gains a partition processes it at
once, as a consumer with a backlog would. ``local`` is the offset
the member's local state of a task has reached (stateful mode, KIP-441): restoring a task
brings it to the resume offset at ``restore_rate`` records per second. With
``state_records``, a partition's state is its last ``state_records`` records (a windowed
aggregate): a member that did not have it rebuilds at most that many, so rebuilding a
partition from nothing takes ``state_records / restore_rate`` seconds however far it has come.
A task's state is kept on disk as it stood at its last accepted commit (``checkpoint``), and
a local state ahead of the offset a task resumes from (records applied after the commit)
cannot be rewound: it is dropped and rebuilt up to the commit (``state_from``), so no record
counts twice in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from huddle.protocol.embedded import TopicPartition


@dataclass(slots=True)
class Task:
    """One owned partition: where processing stands, and when it may start."""

    position: int  # the next offset to process
    ready_at: float  # processing starts then (after restoring)
    started: float | None = None  # when processing started
    done_since_start: int = 0
    restored_reported: bool = False
    restore_records: int = 0  # records its restore replays
    restore_began: float = 0.0  # when its restore began
    committed: int = 0  # its last accepted commit here (its resume offset before one)


@dataclass(frozen=True, slots=True)
class Batch:
    tp: TopicPartition
    offset: int
    count: int


@dataclass(slots=True)
class Workload:
    rate: float  # records per second per partition
    stateful: bool = False
    restore_rate: float = 1_000.0  # records per second restored
    state_records: int | None = None  # a partition's state: its last N records (None: all)
    tasks: dict[TopicPartition, Task] = field(default_factory=dict)
    local: dict[TopicPartition, int] = field(default_factory=dict)  # local state offsets
    latest: dict[TopicPartition, int] = field(default_factory=dict)  # last committed seen
    replicas: frozenset[TopicPartition] = frozenset()  # standby + warm-up tasks (KIP-441)

    def _behind(self, tp: TopicPartition, offset: int) -> int:
        """Records of state to rebuild to bring ``tp`` to ``offset``."""
        lag = max(offset - self.local.get(tp, 0), 0)
        return lag if self.state_records is None else min(lag, self.state_records)

    def state_from(self, tp: TopicPartition, resume: int) -> int:
        """Where ``tp``'s local state starts for a restore up to ``resume``: a state ahead
        of ``resume`` holds records after the commit (they would count twice when processed
        again) and cannot be rewound, so it is dropped (0: rebuilt from nothing)."""
        if self.local.get(tp, 0) > resume:
            del self.local[tp]
        return self.local.get(tp, 0)

    def restore_records(self, tp: TopicPartition, resume: int) -> int:
        """Records of state restored before ``tp`` is processed from ``resume``."""
        return self._behind(tp, resume) if self.stateful else 0

    def restore_seconds(self, tp: TopicPartition, resume: int) -> float:
        records = self.restore_records(tp, resume)
        return records / self.restore_rate if self.restore_rate > 0 else 0.0

    def assign(self, tp: TopicPartition, resume: int, now: float) -> float:
        """Own ``tp`` from offset ``resume``; returns the seconds it takes to restore."""
        self.latest[tp] = max(self.latest.get(tp, 0), resume)
        if self.stateful:
            self.state_from(tp, resume)
        records = self.restore_records(tp, resume)
        wait = self.restore_seconds(tp, resume)
        self.tasks[tp] = Task(
            position=resume,
            ready_at=now + wait,
            restore_records=records,
            restore_began=now,
            committed=resume,
        )
        return wait

    def cut_restores(self, tps: frozenset[TopicPartition], now: float) -> dict[TopicPartition, int]:
        """Of ``tps``, the tasks whose restore is still under way at ``now``, and the records
        each has replayed by then (released next, a task keeps none of them)."""
        cut = {}
        for tp in sorted(tps):
            task = self.tasks.get(tp)
            if task is not None and now < task.ready_at:
                replayed = int((now - task.restore_began) * self.restore_rate)
                cut[tp] = min(max(replayed, 0), task.restore_records)
        return cut

    def release(self, tps: frozenset[TopicPartition]) -> dict[TopicPartition, int]:
        """Stop processing ``tps``; returns their positions (what to commit)."""
        return {tp: self.tasks.pop(tp).position for tp in tps if tp in self.tasks}

    def positions(self) -> dict[TopicPartition, int]:
        return {tp: t.position for tp, t in self.tasks.items() if t.started is not None}

    def accepted(self, positions: Mapping[TopicPartition, int]) -> None:
        """The commit of ``positions`` was accepted."""
        for tp, offset in positions.items():
            self.latest[tp] = max(self.latest.get(tp, 0), offset)
            if (task := self.tasks.get(tp)) is not None:
                task.committed = max(task.committed, offset)

    def checkpoint(self) -> dict[TopicPartition, int]:
        """The local state to keep on disk: a task being processed as it stood at its last
        accepted commit (processing goes on during and after a commit, and what it applied
        since is not committed: after a kill it would count twice), the others as they are."""
        kept = dict(self.local)
        for tp, task in self.tasks.items():
            if task.started is not None:
                kept[tp] = task.committed
        return kept

    def newly_restored(self, now: float) -> list[TopicPartition]:
        """Tasks whose restore finished by ``now`` and were not reported yet."""
        done = []
        for tp, task in self.tasks.items():
            if not task.restored_reported and now >= task.ready_at:
                task.restored_reported = True
                self.local[tp] = max(self.local.get(tp, 0), task.position)
                done.append(tp)
        return done

    def tick(self, now: float, owned: frozenset[TopicPartition] | None = None) -> list[Batch]:
        """Process the records due by ``now`` on every ready task the member still owns
        (``owned``: the member's view right now; None: all of them)."""
        batches = []
        for tp, task in self.tasks.items():
            if now < task.ready_at or (owned is not None and tp not in owned):
                continue
            if task.started is None:
                task.started = task.ready_at
            due = int((now - task.started) * self.rate) + 1 - task.done_since_start
            if due <= 0:
                continue
            batches.append(Batch(tp, task.position, due))
            task.position += due
            task.done_since_start += due
            self.local[tp] = task.position
            self.latest[tp] = max(self.latest.get(tp, 0), task.position)
        return batches

    def catch_up(self, seconds: float) -> None:
        """Bring the local state of standby and warm-up tasks towards the committed offsets."""
        step = int(self.restore_rate * seconds)
        for tp in self.replicas:
            if tp in self.tasks or tp not in self.latest:
                continue
            latest = self.latest[tp]
            current = latest - self._behind(tp, latest)  # older records are not state
            self.local[tp] = min(current + step, latest)

    def lags(self) -> dict[TopicPartition, int]:
        """The lag of the local state of every task known here (KIP-441 join metadata)."""
        if not self.stateful:
            return {}
        return {
            tp: self._behind(tp, self.latest.get(tp, offset)) for tp, offset in self.local.items()
        }
