"""The event log of a chaos run: what every process did, as JSON lines.

A run directory holds ``events/<proc>.jsonl``, one file per process (``chaos`` for the
harness itself, ``member-N`` for members, ``coordinator`` for the coordinator's own
structlog output). Every line is one JSON object, one of the Structs below (``AnyEvent``):

- ``event``: what happened (the Struct's tag), with its own fields;
- ``ts``: wall-clock seconds (``time.time()``) on the one machine that runs everything;
- ``proc``: the process name.

These Structs are the contract with ``huddle.pipeline``, which derives the Spark schema it
reads the lines with from them (``huddle.pipeline.schema``).

The coordinator's lines are its structlog JSON events instead (``timestamp`` ISO-8601 UTC,
``event`` such as ``generation_started``, ``group_state_changed``, ``member_removed``).

Partitions are ``[topic, partition]`` pairs. A member's records are numbered per partition
from 0; ``processed`` covers ``count`` consecutive offsets starting at ``offset``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, Final

import msgspec

from huddle.protocol.embedded import TopicPartition

# --- the events: one Struct each; the tag is the ``event`` name --------------------------


class Event(msgspec.Struct, kw_only=True, tag_field="event"):
    """Fields every line carries; ``EventLog.write`` stamps them."""

    ts: float = 0.0
    proc: str = ""


class RunStarted(Event, tag="run_started", kw_only=True):
    scenario: str
    protocol: str
    members: int
    partitions: int
    settings: dict[str, Any]
    # who the members were: huddle's Member, or a Kafka client (huddle.chaos.clients)
    client: str = "huddle"


class RunFinished(Event, tag="run_finished", kw_only=True):
    outcome: str


class Fault(Event, tag="fault", kw_only=True):
    action: str  # one of FAULT_ACTIONS
    target: str  # a proc name, or "proxy"
    detail: str


class Steady(Event, tag="steady", kw_only=True):
    """The group settled after start-up (every member joined the latest generation, every
    partition processed, no rebalance for a while); the scenario's clock, and the pipeline's
    availability window, start here. ``settled`` false: it did not settle within the wait
    and the scenario started anyway."""

    generation: int | None  # None: no member had joined
    members: int
    settled: bool


class ScenarioFinished(Event, tag="scenario_finished", kw_only=True):
    """The scenario's duration is over: the harness stops every member next. The pipeline's
    availability window ends here, since how the members shut down together is not what a
    scenario measures. Not written when a run is interrupted or fails."""


class ProcessStarted(Event, tag="process_started", kw_only=True):
    pid: int
    role: str
    group_id: str
    protocol: str
    instance_id: str | None = None


class ProcessStopped(Event, tag="process_stopped", kw_only=True):
    reason: str


class Joined(Event, tag="joined", kw_only=True):
    member_id: str
    generation: int  # the consumer protocol (KIP-848): the member's epoch
    leader: bool


class Assigned(Event, tag="assigned", kw_only=True):
    """Newly assigned partitions."""

    member_id: str
    generation: int
    partitions: list[tuple[str, int]]


class Revoked(Event, tag="revoked", kw_only=True):
    """Processing of these partitions stopped; the commit of their positions follows."""

    member_id: str
    generation: int
    partitions: list[tuple[str, int]]


class Lost(Event, tag="lost", kw_only=True):
    member_id: str
    generation: int
    partitions: list[tuple[str, int]]


class RestoreStarted(Event, tag="restore_started", kw_only=True):
    """Stateful mode: a newly assigned task starts restoring its state (written after the
    ``assigned`` event that gave it). The state is rebuilt up to ``offset``, the committed
    offset the task resumes processing from, by replaying the ``records`` from
    ``from_offset``, where the member's local state of that partition stood (0: it had
    none). A task whose local state is already there restores 0 records. ``seconds``: how
    long replaying them takes at the member's restore rate (None in logs written before
    it was told)."""

    member_id: str
    generation: int
    topic: str
    partition: int
    offset: int
    from_offset: int = 0
    records: int = 0
    seconds: float | None = None


class Restored(Event, tag="restored", kw_only=True):
    """Stateful mode: the task's state is restored, it is ready to process. ``offset`` and
    ``records`` repeat its ``restore_started`` (None in logs written before they were)."""

    member_id: str
    topic: str
    partition: int
    offset: int | None = None
    records: int | None = None


class RestoreStopped(Event, tag="restore_stopped", kw_only=True):
    """Stateful mode: a task's restore was cut short, its partition revoked or lost (or the
    member closed) before its ``restored``: ``records`` of the restore's records were
    replayed by then, and the task keeps none of them. (A SIGKILLed member writes none.)"""

    member_id: str
    topic: str
    partition: int
    offset: int  # the offset the restore was rebuilding the state up to
    records: int


class Processed(Event, tag="processed", kw_only=True):
    """``count`` consecutive records of a partition from ``offset``. (Field order matters to
    ``huddle.chaos.progress``, which reads ``partition`` and ``count`` with a pattern.)"""

    member_id: str
    generation: int
    topic: str
    partition: int
    offset: int
    count: int


class Committed(Event, tag="committed", kw_only=True):
    member_id: str
    generation: int
    topic: str
    partition: int
    offset: int
    accepted: bool
    error: str | None = None


class ShardsServed(Event, tag="shards_served", kw_only=True):
    """A coordinator cluster after a heal (``after``, a fault action): seconds until etcd
    answered, then until every shard was served again (None: not within the measure);
    ``unserved``: the shards still not served when the measure gave up."""

    after: str
    answering_s: float | None
    served_s: float | None
    bound_s: float
    unserved: list[int]


EVENT_TYPES: Final[tuple[type[Event], ...]] = (
    RunStarted,
    RunFinished,
    Fault,
    Steady,
    ScenarioFinished,
    ProcessStarted,
    ProcessStopped,
    Joined,
    Assigned,
    Revoked,
    Lost,
    RestoreStarted,
    Restored,
    RestoreStopped,
    Processed,
    Committed,
    ShardsServed,
)
AnyEvent = (
    RunStarted
    | RunFinished
    | Fault
    | Steady
    | ScenarioFinished
    | ProcessStarted
    | ProcessStopped
    | Joined
    | Assigned
    | Revoked
    | Lost
    | RestoreStarted
    | Restored
    | RestoreStopped
    | Processed
    | Committed
    | ShardsServed
)


def tag_of(event_type: type[Event]) -> str:
    return str(event_type.__struct_config__.tag)


# The event names, for readers of the JSON lines.
RUN_STARTED: Final = tag_of(RunStarted)
RUN_FINISHED: Final = tag_of(RunFinished)
FAULT: Final = tag_of(Fault)
STEADY: Final = tag_of(Steady)
SCENARIO_FINISHED: Final = tag_of(ScenarioFinished)
PROCESS_STARTED: Final = tag_of(ProcessStarted)
PROCESS_STOPPED: Final = tag_of(ProcessStopped)
JOINED: Final = tag_of(Joined)
ASSIGNED: Final = tag_of(Assigned)
REVOKED: Final = tag_of(Revoked)
LOST: Final = tag_of(Lost)
RESTORE_STARTED: Final = tag_of(RestoreStarted)
RESTORED: Final = tag_of(Restored)
RESTORE_STOPPED: Final = tag_of(RestoreStopped)
PROCESSED: Final = tag_of(Processed)
COMMITTED: Final = tag_of(Committed)
SHARDS_SERVED: Final = tag_of(ShardsServed)

FAULT_ACTIONS: Final = frozenset(
    {
        "kill",  # SIGKILL
        "sigterm",  # clean shutdown
        "sigstop",  # frozen: a zombie
        "sigcont",
        "start",  # a (re)started member process
        "coordinator_kill",
        "coordinator_start",
        "owner_kill",  # SIGKILL the cluster node that owns the group
        "owner_stop",  # SIGSTOP it
        "owner_cont",
        "etcd_stop",  # SIGSTOP the cluster's etcd
        "etcd_cont",
        "etcd_kill",  # SIGKILL it
        "etcd_start",  # start it again on its data dir and port
        "store_freeze",  # blackhole the link between the group's owner and etcd
        "store_reset",  # reset its connections to etcd
        "store_mute",  # its open connections to etcd drop what it sends, one way
        "store_heal",
        "client_freeze",  # blackhole the link between the owner and its clients
        "client_heal",
        "net_latency",
        "net_stall",
        "net_drop",
        "net_partition",
        "net_heal",
    }
)


_encode = msgspec.json.Encoder().encode  # compact JSON, as json.dumps with "," and ":"
_decoder = msgspec.json.Decoder(AnyEvent)


def decode_event(line: str | bytes) -> AnyEvent:
    """One chaos event line (not a coordinator line) back into its Struct."""
    event: AnyEvent = _decoder.decode(line)
    return event


def partitions_field(partitions: Iterable[TopicPartition]) -> list[tuple[str, int]]:
    return [(tp.topic, tp.partition) for tp in sorted(partitions)]


class EventLog:
    """Appends events of one process to its file; line-buffered so a killed process loses
    at most the line it was writing."""

    def __init__(self, path: Path, proc: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.proc = proc
        self._file: IO[str] = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def write(self, event: Event) -> None:
        """One line: ``event``, stamped with the time and this process's name."""
        event.ts = time.time()
        event.proc = self.proc
        self._file.write(_encode(event).decode() + "\n")

    def flush(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def events_dir(run_dir: Path) -> Path:
    return run_dir / "events"
