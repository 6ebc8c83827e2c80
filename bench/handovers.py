"""Who owned which partition, and when, as a chaos run's members tell it: handovers measured
from the event files alone (no Spark), for ``bench.consumer_protocol``.

A process owns a partition from its ``assigned`` event naming it until its next ``revoked``
or ``lost`` naming it; it owns nothing once it starts again (``process_started``), stops
(``process_stopped``) or is SIGKILLed (the harness's ``fault`` ``kill``: it writes nothing
more). From that timeline, within the run's measured window (the harness's ``steady`` event
to its ``scenario_finished``):

- ``unowned_seconds``: partition-seconds no live process owned (the pipeline's *unowned*
  figure, without its processing islands), and ``twice_seconds``: partition-seconds two
  processes owned at once (a safety figure: 0 under every protocol);
- ``moves``: partitions handed to another process than the one that had them last;
- ``join``: for a member started during the scenario, the seconds from its
  ``process_started`` until it owned its share (the run's partitions over the live
  members, rounded down), the partitions other members gave it, and the partitions other
  members stopped (revoked or lost) that did not go to it: what the join cost anyone else;
- ``kill``: for a SIGKILLed member, the seconds until each partition it owned was owned by
  another live process.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Partition = tuple[str, int]
Record = dict[str, Any]


def run_events(run_dir: Path) -> list[Record]:
    """The harness's and the members' events of a run, in time order."""
    events = run_dir / "events"
    records: list[Record] = []
    for path in [events / "chaos.jsonl", *sorted(events.glob("member-*.jsonl"))]:
        if path.exists():
            text = path.read_text()
            records += [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]
    records.sort(key=lambda r: float(r["ts"]))
    return records


def _tps(record: Record) -> set[Partition]:
    return {(str(t), int(p)) for t, p in record.get("partitions") or []}


@dataclass(frozen=True, slots=True)
class Change:
    ts: float
    proc: str
    owned: frozenset[Partition]  # what ``proc`` owns from ``ts`` on


@dataclass(slots=True)
class Timeline:
    partitions: frozenset[Partition]
    changes: list[Change] = field(default_factory=list)
    steady: float | None = None
    finished: float | None = None
    faults: list[Record] = field(default_factory=list)

    def owned_at(self, proc: str, ts: float, *, before: bool = False) -> frozenset[Partition]:
        """What ``proc`` owned at ``ts`` (``before``: just before any change at ``ts``)."""
        mine: frozenset[Partition] = frozenset()
        for c in self.changes:
            if c.ts > ts or (before and c.ts == ts):
                break
            if c.proc == proc:
                mine = c.owned
        return mine


def timeline(records: Iterable[Record]) -> Timeline:
    """The ownership changes of a run's records (``run_events``)."""
    records = list(records)
    started = next((r for r in records if r["event"] == "run_started"), None)
    if started is None:
        raise ValueError("no run_started event: not a chaos run's events")
    topic = str(started["settings"].get("topic", "chaos"))
    t = Timeline(frozenset((topic, p) for p in range(int(started["partitions"]))))
    owned: dict[str, set[Partition]] = {}
    for r in records:
        event, ts = r["event"], float(r["ts"])
        if event == "steady" and t.steady is None:
            t.steady = ts
        elif event == "scenario_finished":
            t.finished = ts
        elif event == "fault":
            t.faults.append(r)
            if r["action"] == "kill":
                owned[str(r["target"])] = set()
                t.changes.append(Change(ts, str(r["target"]), frozenset()))
        elif event in ("process_started", "process_stopped", "assigned", "revoked", "lost"):
            proc = str(r["proc"])
            mine = owned.setdefault(proc, set())
            if event in ("process_started", "process_stopped"):
                mine.clear()
            elif event == "assigned":
                mine |= _tps(r)
            else:
                mine -= _tps(r)
            t.changes.append(Change(ts, proc, frozenset(mine)))
    return t


def _window(t: Timeline) -> tuple[float, float]:
    if t.steady is None or t.finished is None:
        raise ValueError("the run has no steady or no scenario_finished event")
    return t.steady, t.finished


def _counted(t: Timeline) -> Iterator[tuple[float, dict[Partition, int]]]:
    """``(seconds, owners per partition)`` for each stretch of the window without a change."""
    low, high = _window(t)
    owned: dict[str, frozenset[Partition]] = {}
    at = low
    for c in [*t.changes, Change(high, "", frozenset())]:
        if c.ts > at:
            counts = dict.fromkeys(t.partitions, 0)
            for mine in owned.values():
                for p in mine:
                    counts[p] = counts.get(p, 0) + 1
            yield min(c.ts, high) - at, counts
            at = c.ts
        if at >= high:
            return
        owned[c.proc] = c.owned


def unowned_seconds(t: Timeline) -> float:
    """Partition-seconds within the window that no live process owned."""
    return sum(s * sum(1 for n in counts.values() if n == 0) for s, counts in _counted(t))


def twice_seconds(t: Timeline) -> float:
    """Partition-seconds within the window that two or more processes owned at once."""
    return sum(s * sum(1 for n in counts.values() if n > 1) for s, counts in _counted(t))


def moves(t: Timeline) -> int:
    """Handovers within the window to another process than the one that owned the
    partition last (a bounced ``member-3`` is the same process: the pipeline's
    ``partitions_moved``)."""
    low, high = _window(t)
    last: dict[Partition, str] = {}
    before: dict[str, frozenset[Partition]] = {}
    moved = 0
    for c in t.changes:
        gained = c.owned - before.get(c.proc, frozenset())
        before[c.proc] = c.owned
        for p in gained:
            if low <= c.ts <= high and last.get(p, c.proc) != c.proc:
                moved += 1
            last[p] = c.proc
    return moved


@dataclass(frozen=True, slots=True)
class Join:
    member: str
    share: int  # partitions over live members, rounded down
    share_s: float | None  # from its process_started to owning its share; None: never
    given: int  # partitions other members handed it
    disturbed: int  # other members' partitions stopped that did not go to it


def join(t: Timeline, records: Iterable[Record]) -> Join | None:
    """The first member started during the scenario with a name not seen before it; its
    window ends at the next fault, or at the end of the scenario."""
    records = list(records)
    for f in (f for f in t.faults if f["action"] == "start"):
        at, member = float(f["ts"]), str(f["target"])
        if not any(
            r["event"] == "process_started" and r["proc"] == member and float(r["ts"]) < at
            for r in records
        ):
            return _join(t, records, member, at)
    return None


def _join(t: Timeline, records: list[Record], member: str, at: float) -> Join:
    later = [float(f["ts"]) for f in t.faults if float(f["ts"]) > at]
    end = min([*later, t.finished or float("inf")])
    began = next(
        (
            float(r["ts"])
            for r in records
            if r["event"] == "process_started" and r["proc"] == member and float(r["ts"]) >= at
        ),
        at,  # it wrote nothing: from when it was started
    )
    live = {c.proc for c in t.changes if c.ts < at} - {
        str(f["target"]) for f in t.faults if f["action"] == "kill" and float(f["ts"]) < at
    }
    share = len(t.partitions) // (len(live | {member}))
    share_s = next(
        (
            c.ts - began
            for c in t.changes
            if c.proc == member and began <= c.ts <= end and len(c.owned) >= share
        ),
        None,
    )
    stopped: set[Partition] = set()
    for r in records:
        ts = float(r["ts"])
        if at <= ts <= end and r["event"] in ("revoked", "lost") and r["proc"] != member:
            stopped |= _tps(r)
    mine = t.owned_at(member, end)
    return Join(member, share, share_s, len(stopped & mine), len(stopped - mine))


@dataclass(frozen=True, slots=True)
class Kill:
    victim: str
    owned: int  # partitions it owned when it was killed
    seconds: list[float]  # per partition: until another live process owned it
    never: int  # partitions nobody else owned before the scenario ended


def kill(t: Timeline) -> Kill | None:
    """The scenario's first SIGKILL."""
    f = next((f for f in t.faults if f["action"] == "kill"), None)
    if f is None:
        return None
    victim, at = str(f["target"]), float(f["ts"])
    lost = t.owned_at(victim, at, before=True)
    first: dict[Partition, float] = {}
    for c in t.changes:
        if c.ts < at or c.proc == victim:
            continue
        for p in lost & c.owned:
            first.setdefault(p, c.ts - at)
    return Kill(victim, len(lost), sorted(first.values()), len(lost - set(first)))
