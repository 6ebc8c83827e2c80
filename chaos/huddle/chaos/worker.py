"""One chaos member process: ``python -m huddle.chaos.worker SETTINGS_JSON``.

``SETTINGS_JSON`` is one ``WorkerSettings`` as JSON (the harness builds it), e.g.
``{"bootstrap": "127.0.0.1:9292", "name": "member-1", "run_dir": "runs/x"}``; unknown or
ill-typed settings are refused with one line and exit status 2.

Runs a ``Member`` with the synthetic workload of ``huddle.chaos.workload`` and writes what it
does to ``events/<NAME>.jsonl`` (see ``huddle.chaos.events``): joins, assignments, revocations,
losses, every batch of records processed and every commit, accepted or refused. SIGTERM
or SIGINT shut it down cleanly (revoke -> commit -> leave); SIGKILL ends it mid-line.

Under a consumer protocol (``consumer``, ``consumer-deferred``, ``consumer-paced``: KIP-848)
the member is ``Member(group_protocol="consumer")``: the coordinator assigns, its session
timeout is the coordinator's, a ``joined`` line tells each new member epoch (it moves
without a callback too: the worker looks at every tick). Under every protocol the worker
commits and reads its offsets through its member (``Member.commit``/``committed``): in its
generation (classic) or at its member epoch (consumer), which the coordinator checks (a
commit refused so, FENCED/STALE_MEMBER_EPOCH, is written as refused, and the next one goes
at the epoch the member has by then).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
import msgspec
import structlog

from huddle.chaos import events as ev
from huddle.chaos.events import EventLog, events_dir, partitions_field
from huddle.chaos.kafka_workers.options import is_consumer
from huddle.chaos.protocols import ProtocolOptions, build_assignor
from huddle.chaos.resumes import PendingResumes
from huddle.chaos.workload import Workload
from huddle.client.listener import RebalanceListener
from huddle.client.member import Member
from huddle.client.security import NO_SECURITY, Security, security_from_env
from huddle.logs import configure_logging
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import InvalidArgumentError

log = structlog.get_logger("huddle.chaos.worker")
TICK_S = 0.02
RESUME_ATTEMPTS = 3  # in the assignment callback; then the partitions wait (``resumes``)


class WorkerSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Everything a worker needs, given as one JSON argument (the harness builds it)."""

    bootstrap: str  # coordinator HOST:PORT
    name: str  # process name, e.g. member-3
    run_dir: str
    group: str = "chaos"
    topic: str = "chaos"
    # an assignor's name, or a consumer-protocol one (``consumer``, ``consumer-deferred``...)
    protocol: str = "cooperative-sticky"
    options: ProtocolOptions = msgspec.field(default_factory=ProtocolOptions)
    instance_id: str | None = None  # static membership (KIP-345)
    session_timeout_ms: int = 3_000
    heartbeat_interval_ms: int = 500
    rebalance_timeout_ms: int = 10_000
    rate: float = 50.0  # records/s per partition
    commit_interval_ms: int = 1_000
    stateful: bool = False  # restore state before processing
    restore_rate: float = 1_000.0  # records/s restored
    state_records: int | None = None  # a partition's state: its last N records (None: all)
    max_seconds: float = 3_600.0  # stop after this long
    # TLS and SASL settings from HUDDLE_CLIENT_TLS_* and HUDDLE_USERNAME/PASSWORD (a
    # secured coordinator given with --bootstrap): huddle.client.security.security_from_env
    secure_from_env: bool = False
    # huddle: this worker; a Kafka client's name: huddle.chaos.kafka_member runs that client
    client: str = "huddle"

    def __post_init__(self) -> None:
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "rebalance_timeout_ms"):
            if getattr(self, name) <= 0:
                raise InvalidArgumentError(f"{name} must be positive")
        if self.rate <= 0 or self.restore_rate <= 0 or self.max_seconds <= 0:
            raise InvalidArgumentError("rate, restore_rate and max_seconds must be positive")
        if self.commit_interval_ms <= 0:
            raise InvalidArgumentError("commit_interval_ms must be positive")
        if self.state_records is not None and self.state_records <= 0:
            raise InvalidArgumentError("state_records must be positive")

    def to_json(self) -> str:
        return msgspec.json.encode(self).decode()


def parse_settings(text: str) -> WorkerSettings:
    """The settings argument; InvalidArgumentError (a ValueError) with one line saying what
    is wrong."""
    try:
        return msgspec.json.decode(text, type=WorkerSettings)
    except msgspec.ValidationError as exc:
        raise InvalidArgumentError(str(exc)) from None
    except msgspec.DecodeError as exc:
        raise InvalidArgumentError(f"not JSON: {exc}") from None


class Worker(RebalanceListener):
    """The member's listener and workload; every callback writes its event."""

    def __init__(self, args: WorkerSettings, events: EventLog) -> None:
        self.args = args
        self.events = events
        self.workload = Workload(
            rate=args.rate,
            stateful=args.stateful,
            restore_rate=args.restore_rate,
            state_records=args.state_records,
        )
        self.member: Member | None = None
        self.resumes = PendingResumes()  # given, committed offsets not read yet
        self.consumer = is_consumer(args.protocol)  # KIP-848: the coordinator assigns
        self._last_tick = time.monotonic()
        self._generation = -1
        self._state_file = Path(args.run_dir) / "state" / f"{args.name}.json"
        if args.stateful:
            self.workload.local = load_state(self._state_file)

    # --- the member ------------------------------------------------------------------

    def make_member(self) -> Member:
        a = self.args
        if self.consumer:
            return self._make_consumer_member()
        options = a.options
        self.member = Member(
            a.bootstrap,
            group_id=a.group,
            topics=[a.topic],
            assignors=[build_assignor(a.protocol, options)],
            instance_id=a.instance_id,
            session_timeout_ms=a.session_timeout_ms,
            heartbeat_interval_ms=a.heartbeat_interval_ms,
            rebalance_timeout_ms=a.rebalance_timeout_ms,
            listener=self,
            client_id=a.name,
            lags=self.workload.lags if a.stateful else None,
            security=self._security(),
        )
        return self.member

    def _make_consumer_member(self) -> Member:
        """A consumer-protocol (KIP-848) member: the coordinator assigns, with its own
        session timeout (``huddle serve --consumer-session-timeout-ms``); the server
        assignor is the coordinator's default (the harness puts the one the protocol's name
        asks for first)."""
        a = self.args
        self.member = Member(
            a.bootstrap,
            group_id=a.group,
            topics=[a.topic],
            instance_id=a.instance_id,
            heartbeat_interval_ms=a.heartbeat_interval_ms,
            rebalance_timeout_ms=a.rebalance_timeout_ms,
            listener=self,
            client_id=a.name,
            security=self._security(),
            group_protocol="consumer",
        )
        return self.member

    def _security(self) -> Security:
        return security_from_env(os.environ) if self.args.secure_from_env else NO_SECURITY

    def _m(self) -> Member:
        assert self.member is not None
        return self.member

    def _note_generation(self) -> None:
        m = self._m()
        if m.generation != self._generation:
            self._generation = m.generation
            self.events.write(
                ev.Joined(member_id=m.member_id, generation=m.generation, leader=m.is_leader)
            )

    # --- listener callbacks ----------------------------------------------------------

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        self._note_generation()
        resume = await self._resume_offsets(assigned)
        m = self._m()
        self.events.write(
            ev.Assigned(
                member_id=m.member_id,
                generation=m.generation,
                partitions=partitions_field(assigned),
            )
        )
        if resume is None:  # started once their committed offsets are read (``resumes``)
            self.resumes.defer(assigned)
        else:
            self.resumes.drop(assigned)
            self.take({tp: resume.get(tp) for tp in assigned})

    def take(self, resume: Mapping[TopicPartition, int | None]) -> None:
        """Start processing each partition of ``resume`` from its committed offset (0 when
        none is), restoring its state first (stateful)."""
        now = time.monotonic()
        m = self._m()
        for tp in sorted(resume):
            offset = resume[tp] or 0
            from_offset = self.workload.state_from(tp, offset) if self.args.stateful else 0
            records = self.workload.restore_records(tp, offset)
            seconds = self.workload.assign(tp, offset, now)
            if self.args.stateful:  # after the assignment that gave the task
                self.events.write(
                    ev.RestoreStarted(
                        member_id=m.member_id,
                        generation=m.generation,
                        topic=tp.topic,
                        partition=tp.partition,
                        offset=offset,
                        from_offset=from_offset,
                        records=records,
                        seconds=seconds,
                    )
                )
        if resume:
            self.tick()  # records are waiting: process them now, not at the next tick

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        self._note_generation()  # cooperative: revoked after a sync, before assigned
        positions, cut = self._release(revoked)
        # processing of these stopped here; the commit of their positions follows
        m = self._m()
        self.events.write(
            ev.Revoked(
                member_id=m.member_id, generation=m.generation, partitions=partitions_field(revoked)
            )
        )
        self._write_cut(cut)
        await self.commit(positions)

    async def on_partitions_lost(self, lost: frozenset[TopicPartition]) -> None:
        _, cut = self._release(lost)
        m = self._m()
        self.events.write(
            ev.Lost(
                member_id=m.member_id, generation=m.generation, partitions=partitions_field(lost)
            )
        )
        self._write_cut(cut)

    def _release(
        self, tps: frozenset[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, tuple[int, int]]]:
        """Stop processing ``tps``: their positions, and the restores this cuts short (the
        offset each was rebuilding up to, the records it replayed). A restore that finished
        and was not told yet is told first (``restored``)."""
        now = time.monotonic()
        self.resumes.drop(tps)
        self._report_restored(now)
        replayed = self.workload.cut_restores(tps, now)
        cut = {tp: (self.workload.tasks[tp].position, n) for tp, n in replayed.items()}
        return self.workload.release(tps), cut

    def _write_cut(self, cut: Mapping[TopicPartition, tuple[int, int]]) -> None:
        if not self.args.stateful:
            return
        member_id = self._m().member_id
        for tp, (offset, records) in sorted(cut.items()):
            self.events.write(
                ev.RestoreStopped(
                    member_id=member_id,
                    topic=tp.topic,
                    partition=tp.partition,
                    offset=offset,
                    records=records,
                )
            )

    async def on_replicas_assigned(
        self, standby: frozenset[TopicPartition], warmup: frozenset[TopicPartition]
    ) -> None:
        self.workload.replicas = standby | warmup

    async def _resume_offsets(
        self, tps: frozenset[TopicPartition]
    ) -> Mapping[TopicPartition, int | None] | None:
        """The committed offsets of ``tps``; None if they cannot be read now (then the
        partitions wait for them: ``resumes``)."""
        if not tps:
            return {}
        for attempt in range(RESUME_ATTEMPTS):
            try:
                return await self._m().committed(tps)
            except Exception as exc:  # not connected, timed out: try again shortly
                log.warning("committed_fetch_failed", error=repr(exc), attempt=attempt)
                await anyio.sleep(0.1 * (attempt + 1))
        log.warning("committed_fetch_deferred", partitions=len(tps))
        return None

    # --- commits ---------------------------------------------------------------------

    async def commit(self, positions: Mapping[TopicPartition, int]) -> None:
        """Commit ``positions``; one ``committed`` event per partition, accepted or not."""
        if not positions:
            return
        member_id, generation = self._m().member_id, self._m().generation
        error: str | None = None
        try:
            await self._m().commit(positions)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        for tp, offset in sorted(positions.items()):
            self.events.write(
                ev.Committed(
                    member_id=member_id,
                    generation=generation,
                    topic=tp.topic,
                    partition=tp.partition,
                    offset=offset,
                    accepted=error is None,
                    error=error,
                )
            )
        if error is None:
            self.workload.accepted(positions)

    async def commit_loop(self) -> None:
        interval = self.args.commit_interval_ms / 1000
        while True:
            await anyio.sleep(interval)
            await self.commit(self.workload.positions())
            if self.args.stateful:
                await self._refresh_replicas()
                save_state(self._state_file, self.workload.checkpoint())

    async def resume_loop(self) -> None:
        """Start the partitions whose committed offsets could not be read when they were
        given, once they can be (``resumes``)."""
        m = self._m()
        await self.resumes.run(m.committed, lambda: m.assignment, self.take)

    async def _refresh_replicas(self) -> None:
        replicas = self.workload.replicas - set(self.workload.tasks)
        if not replicas:
            return
        try:
            offsets = await self._m().committed(replicas)
        except Exception as exc:
            log.info("replica_offsets_unavailable", error=repr(exc))
            return
        for tp, offset in offsets.items():
            if offset is not None:
                self.workload.latest[tp] = max(self.workload.latest.get(tp, 0), offset)

    # --- processing ------------------------------------------------------------------

    async def tick_loop(self) -> None:
        while True:
            await anyio.sleep(TICK_S)
            self.tick()

    def tick(self) -> None:
        """Process what is due on every partition the member owns now, and write it."""
        now = time.monotonic()
        self.workload.catch_up(now - self._last_tick)
        self._last_tick = now
        m = self._m()
        if self.consumer and m.generation > 0:  # its epoch moves without callbacks too
            self._note_generation()
        member_id, generation = m.member_id, m.generation
        self._report_restored(now)
        # what the member owns *now*: empty for a zombie that just woke up
        for batch in self.workload.tick(now, m.assignment):
            self.events.write(
                ev.Processed(
                    member_id=member_id,
                    generation=generation,
                    topic=batch.tp.topic,
                    partition=batch.tp.partition,
                    offset=batch.offset,
                    count=batch.count,
                )
            )

    def _report_restored(self, now: float) -> None:
        """A ``restored`` for every task whose restore finished by ``now``."""
        for tp in self.workload.newly_restored(now):
            if self.args.stateful:
                task = self.workload.tasks[tp]  # not processed yet: still at its resume offset
                self.events.write(
                    ev.Restored(
                        member_id=self._m().member_id,
                        topic=tp.topic,
                        partition=tp.partition,
                        offset=task.position,
                        records=task.restore_records,
                    )
                )


def started_event(args: WorkerSettings) -> ev.ProcessStarted:
    """The ``process_started`` event of a member process run with ``args``."""
    return ev.ProcessStarted(
        pid=os.getpid(),
        role="member",
        group_id=args.group,
        protocol=args.protocol,
        instance_id=args.instance_id,
    )


def load_state(path: Path) -> dict[TopicPartition, int]:
    try:
        raw = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {TopicPartition(t, int(p)): int(o) for t, p, o in raw}


def save_state(path: Path, local: Mapping[TopicPartition, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([[tp.topic, tp.partition, o] for tp, o in sorted(local.items())]))
    os.replace(tmp, path)


async def run(args: WorkerSettings) -> str:
    """Run until a signal or ``--max-seconds``; returns why it stopped."""
    with EventLog(events_dir(Path(args.run_dir)) / f"{args.name}.jsonl", args.name) as events:
        events.write(started_event(args))
        worker = Worker(args, events)
        reason = "deadline"
        stop = anyio.Event()

        async def watch_signals() -> None:
            nonlocal reason
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    reason = signal.Signals(signum).name.lower()
                    stop.set()

        member = worker.make_member()
        async with anyio.create_task_group() as outer:
            outer.start_soon(watch_signals)
            async with anyio.create_task_group() as ticking:
                async with member, anyio.create_task_group() as committing:
                    ticking.start_soon(worker.tick_loop)
                    committing.start_soon(worker.commit_loop)
                    committing.start_soon(worker.resume_loop)
                    with anyio.move_on_after(args.max_seconds):
                        await stop.wait()
                    committing.cancel_scope.cancel()
                # the member closed (revoked, committed, left) while still processing what
                # it owned: processing stops at the revocation, not at the signal
                ticking.cancel_scope.cancel()
            outer.cancel_scope.cancel()
        if args.stateful:
            save_state(worker._state_file, worker.workload.checkpoint())
        events.write(ev.ProcessStopped(reason=reason))
        return reason


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if len(words) != 1 or words[0] in ("-h", "--help"):
        print(f"usage: python -m huddle.chaos.worker SETTINGS_JSON\n\n{__doc__}", file=sys.stderr)
        return 2
    try:
        args = parse_settings(words[0])
    except ValueError as exc:
        print(f"huddle.chaos.worker: bad settings: {exc}", file=sys.stderr)
        return 2
    configure_logging("json", "info", stream=sys.stderr)
    structlog.contextvars.bind_contextvars(proc=args.name)
    anyio.run(run, args, backend_options={"use_uvloop": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
