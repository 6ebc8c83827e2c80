"""``summary.json``: a run's figures by name, rounded to microseconds, as a ``RunSummary``.

``write_summary`` writes it (keys sorted, indented), ``read_summary`` reads it back through
the same Struct, so a report and a comparison agree on every field and its type.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from pyspark.sql import Row

from huddle.pipeline.analysis import RunAnalysis
from huddle.pipeline.availability import WINDOW_DEFINITION, MeasureWindow
from huddle.pipeline.safety import VIOLATION_TYPES

DIGITS = 6


def _r(value: float | None) -> float | None:
    return None if value is None else round(float(value), DIGITS)


def partition_key(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class Window(msgspec.Struct, kw_only=True, frozen=True):
    """What counts for availability: from the group settling to the end of the scenario
    (or the last processed record)."""

    definition: str
    start: float | None
    end: float | None
    seconds: float | None


class PartitionFigures(msgspec.Struct, kw_only=True, frozen=True):
    unavailable_seconds: float | None
    max_outage_seconds: float | None
    outages: int
    # why processing stopped (``huddle.pipeline.moves``); None: not measured
    unowned_seconds: float | None = None
    restoring_seconds: float | None = None


class RunSummary(msgspec.Struct, kw_only=True, frozen=True):
    run: str
    protocol: str | None
    scenario: str | None
    gap_ms: float
    window: Window
    client: str | None = None  # huddle, or the Kafka client the members ran
    partitions: int
    total_unavailable_partition_seconds: float | None
    max_outage_seconds: float | None
    per_partition: dict[str, PartitionFigures]
    rebalance_count: int
    rebalance_durations_seconds: list[float | None]
    rebalance_total_seconds: float | None
    rebalance_max_seconds: float | None
    violations: dict[str, int]
    violations_total: int
    records_processed: int
    distinct_records_processed: int
    duplicates: int
    duplicates_below_commit: int
    lost: int
    ownership_intervals: int
    # what moved (``huddle.pipeline.moves``), in the window; the defaults read summaries
    # written before these were measured
    partitions_moved: int = 0  # handovers to another member than the last owner
    partitions_returned: int = 0  # handovers back to the member that owned it last
    records_restored: int = 0  # state records replayed, over all partitions
    # restores with state to rebuild (records to replay), and those of them cut short
    restores: int = 0
    restores_cut: int = 0
    restore_seconds: float | None = None  # seconds spent restoring, over all partitions
    # partition-seconds processing stopped because no member owned the partition, because
    # its owner was restoring its state, and because of either (each instant once)
    unowned_partition_seconds: float | None = None
    restoring_partition_seconds: float | None = None
    stopped_partition_seconds: float | None = None
    # of the unowned, partition-seconds held for a process that went away and came back
    held_partition_seconds: float | None = None


def _total(rows: list[Row], column: str) -> float | None:
    """The sum of ``column`` over ``rows``; None when there are no rows (nothing measured)."""
    return _r(sum(float(r[column]) for r in rows)) if rows else None


def _in(window: MeasureWindow | None, restore: Row) -> float:
    """A restore's seconds within ``window`` (as its restoring partition-seconds are)."""
    seconds = float(restore["seconds"])
    if window is None:
        return seconds
    start = float(restore["start"])
    end = start + seconds if restore["end"] is None else float(restore["end"])
    return max(min(end, window.end) - max(start, window.start), 0.0)


def summarise(a: RunAnalysis) -> RunSummary:
    stopped = {partition_key(r["topic"], r["partition"]): r for r in a.stopped}
    per_partition = {}
    for r in a.unavailability:
        key = partition_key(r["topic"], r["partition"])
        why = stopped.get(key)
        per_partition[key] = PartitionFigures(
            unavailable_seconds=_r(r["unavailable_seconds"]),
            max_outage_seconds=_r(r["max_outage_seconds"]),
            outages=int(r["outages"]),
            unowned_seconds=None if why is None else _r(why["unowned_seconds"]),
            restoring_seconds=None if why is None else _r(why["restoring_seconds"]),
        )
    kinds = [h["kind"] for h in a.handovers]
    rebuilt = [r for r in a.restores if (r["records"] or 0) > 0]
    durations = [_r(r["duration"]) for r in a.rebalances]
    known = [d for d in durations if d is not None]
    counts = dict.fromkeys(VIOLATION_TYPES, 0)
    for v in a.violations:
        counts[v["type"]] += 1
    records = sum(int(r["records"]) for r in a.offsets)
    distinct = sum(int(r["distinct_records"]) for r in a.offsets)
    lost = sum(int(r["lost_records"]) for r in a.offsets)
    below_commit = sum(
        int(v["records"] or 0) for v in a.violations if v["type"] == "duplicate_below_commit"
    )
    window = a.window
    return RunSummary(
        run=a.run,
        protocol=a.protocol,
        client=a.client,
        scenario=a.scenario,
        gap_ms=a.gap_ms,
        window=Window(
            definition=WINDOW_DEFINITION,
            start=None if window is None else _r(window.start),
            end=None if window is None else _r(window.end),
            seconds=None if window is None else _r(window.seconds),
        ),
        partitions=len(per_partition),
        total_unavailable_partition_seconds=_r(
            sum(float(r["unavailable_seconds"]) for r in a.unavailability)
        ),
        max_outage_seconds=_r(
            max((float(r["max_outage_seconds"]) for r in a.unavailability), default=0.0)
        ),
        per_partition=per_partition,
        rebalance_count=len(a.rebalances),
        rebalance_durations_seconds=durations,
        rebalance_total_seconds=_r(sum(known)),
        rebalance_max_seconds=_r(max(known, default=0.0)),
        violations=counts,
        violations_total=sum(counts.values()),
        records_processed=records,
        distinct_records_processed=distinct,
        duplicates=records - distinct,
        duplicates_below_commit=below_commit,
        lost=lost,
        ownership_intervals=len(a.ownership),
        partitions_moved=kinds.count("moved"),
        partitions_returned=kinds.count("returned"),
        records_restored=sum(int(r["replayed"] or 0) for r in a.restores),
        restores=len(rebuilt),
        restores_cut=sum(1 for r in rebuilt if not r["finished"]),
        restore_seconds=_r(sum(_in(window, r) for r in a.restores)),
        unowned_partition_seconds=_total(a.stopped, "unowned_seconds"),
        restoring_partition_seconds=_total(a.stopped, "restoring_seconds"),
        stopped_partition_seconds=_total(a.stopped, "stopped_seconds"),
        held_partition_seconds=_total(a.stopped, "held_seconds"),
    )


def write_summary(summary: RunSummary, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(msgspec.to_builtins(summary), indent=2, sort_keys=True)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def read_summary(path: Path) -> RunSummary:
    """A ``summary.json`` back as the Struct (msgspec.ValidationError if it is not one)."""
    return msgspec.json.decode(path.read_bytes(), type=RunSummary)
