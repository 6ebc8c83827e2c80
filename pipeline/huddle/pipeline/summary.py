"""``summary.json``: a run's figures by name, rounded to microseconds, as a ``RunSummary``.

``write_summary`` writes it (keys sorted, indented), ``read_summary`` reads it back through
the same Struct, so a report and a comparison agree on every field and its type.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from huddle.pipeline.analysis import RunAnalysis
from huddle.pipeline.availability import WINDOW_DEFINITION
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
    partitions_moved: int = 0
    partitions_returned: int = 0
    records_restored: int = 0
    restore_seconds: float | None = None
    unowned_partition_seconds: float | None = None
    restoring_partition_seconds: float | None = None
    stopped_partition_seconds: float | None = None


def summarise(a: RunAnalysis) -> RunSummary:
    per_partition = {
        partition_key(r["topic"], r["partition"]): PartitionFigures(
            unavailable_seconds=_r(r["unavailable_seconds"]),
            max_outage_seconds=_r(r["max_outage_seconds"]),
            outages=int(r["outages"]),
        )
        for r in a.unavailability
    }
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
    )


def write_summary(summary: RunSummary, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(msgspec.to_builtins(summary), indent=2, sort_keys=True)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def read_summary(path: Path) -> RunSummary:
    """A ``summary.json`` back as the Struct (msgspec.ValidationError if it is not one)."""
    return msgspec.json.decode(path.read_bytes(), type=RunSummary)
