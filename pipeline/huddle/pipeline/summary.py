"""``summary.json``: a run's figures by name, rounded to microseconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from huddle.pipeline.analysis import RunAnalysis
from huddle.pipeline.availability import WINDOW_DEFINITION
from huddle.pipeline.safety import VIOLATION_TYPES

DIGITS = 6


def _r(value: float | None) -> float | None:
    return None if value is None else round(float(value), DIGITS)


def partition_key(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def summarise(a: RunAnalysis) -> dict[str, Any]:
    per_partition = {
        partition_key(r["topic"], r["partition"]): {
            "unavailable_seconds": _r(r["unavailable_seconds"]),
            "max_outage_seconds": _r(r["max_outage_seconds"]),
            "outages": int(r["outages"]),
        }
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
    return {
        "run": a.run,
        "protocol": a.protocol,
        "scenario": a.scenario,
        "gap_ms": a.gap_ms,
        "window": {
            "definition": WINDOW_DEFINITION,
            "start": None if window is None else _r(window.start),
            "end": None if window is None else _r(window.end),
            "seconds": None if window is None else _r(window.seconds),
        },
        "partitions": len(per_partition),
        "total_unavailable_partition_seconds": _r(
            sum(float(r["unavailable_seconds"]) for r in a.unavailability)
        ),
        "max_outage_seconds": _r(
            max((float(r["max_outage_seconds"]) for r in a.unavailability), default=0.0)
        ),
        "per_partition": per_partition,
        "rebalance_count": len(a.rebalances),
        "rebalance_durations_seconds": durations,
        "rebalance_total_seconds": _r(sum(known)),
        "rebalance_max_seconds": _r(max(known, default=0.0)),
        "violations": counts,
        "violations_total": sum(counts.values()),
        "records_processed": records,
        "distinct_records_processed": distinct,
        "duplicates": records - distinct,
        "duplicates_below_commit": below_commit,
        "lost": lost,
        "ownership_intervals": len(a.ownership),
    }


def write_summary(summary: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path
