"""The event log of a chaos run: what every process did, as JSON lines.

A run directory holds ``events/<proc>.jsonl``, one file per process (``chaos`` for the
harness itself, ``member-N`` for members, ``coordinator`` for the coordinator's own
structlog output). Every line is one JSON object with at least:

- ``ts``: wall-clock seconds (``time.time()``) on the one machine that runs everything;
- ``proc``: the process name;
- ``event``: what happened (below), with its own fields.

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

# --- the event names, and the fields each carries (besides ts, proc, event) ---------------

RUN_STARTED: Final = "run_started"  # scenario, protocol, members, partitions, settings
RUN_FINISHED: Final = "run_finished"  # outcome
FAULT: Final = "fault"  # action, target (a proc name), detail
# generation, members: the group settled after start-up (every member joined the latest
# generation, every partition processed, no rebalance for a while); the scenario's clock,
# and the pipeline's availability window, start here. ``settled`` false: it did not settle
# within the wait and the scenario started anyway.
STEADY: Final = "steady"
PROCESS_STARTED: Final = "process_started"  # pid, role, group_id, protocol, instance_id
PROCESS_STOPPED: Final = "process_stopped"  # reason
JOINED: Final = "joined"  # member_id, generation, leader
ASSIGNED: Final = "assigned"  # member_id, generation, partitions (newly assigned)
REVOKED: Final = "revoked"  # member_id, generation, partitions (processing stopped;
# the commit of their positions follows)
LOST: Final = "lost"  # member_id, generation, partitions
RESTORED: Final = "restored"  # member_id, topic, partition (stateful mode: ready to process)
PROCESSED: Final = "processed"  # member_id, generation, topic, partition, offset, count
COMMITTED: Final = "committed"  # member_id, generation, topic, partition, offset, accepted, error

FAULT_ACTIONS: Final = frozenset(
    {
        "kill",  # SIGKILL
        "sigterm",  # clean shutdown
        "sigstop",  # frozen: a zombie
        "sigcont",
        "start",  # a (re)started member process
        "coordinator_kill",
        "coordinator_start",
        "net_latency",
        "net_stall",
        "net_drop",
        "net_partition",
        "net_heal",
    }
)


_encode = msgspec.json.Encoder().encode  # compact JSON, as json.dumps with "," and ":"


def partitions_field(partitions: Iterable[TopicPartition]) -> list[list[str | int]]:
    return [[tp.topic, tp.partition] for tp in sorted(partitions)]


class EventLog:
    """Appends events of one process to its file; line-buffered so a killed process loses
    at most the line it was writing."""

    def __init__(self, path: Path, proc: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.proc = proc
        self._file: IO[str] = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def write(self, event: str, **fields: Any) -> None:
        record = {"ts": time.time(), "proc": self.proc, "event": event, **fields}
        self._file.write(_encode(record).decode() + "\n")

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
