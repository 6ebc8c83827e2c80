"""``summary.json`` files written before a figure existed still read: every figure added
since has a default (the comparison reads old runs beside new ones)."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import Row

from huddle.pipeline.analysis import RunAnalysis
from huddle.pipeline.availability import MeasureWindow
from huddle.pipeline.summary import read_summary, summarise

BEFORE_WHAT_MOVED = {
    "run": "old",
    "protocol": "range",
    "scenario": "rolling-bounce",
    "gap_ms": 100.0,
    "window": {"definition": "d", "start": 1.0, "end": 2.0, "seconds": 1.0},
    "partitions": 1,
    "total_unavailable_partition_seconds": 0.5,
    "max_outage_seconds": 0.5,
    "per_partition": {"t-0": {"unavailable_seconds": 0.5, "max_outage_seconds": 0.5, "outages": 1}},
    "rebalance_count": 1,
    "rebalance_durations_seconds": [0.1],
    "rebalance_total_seconds": 0.1,
    "rebalance_max_seconds": 0.1,
    "violations": {"overlap": 0},
    "violations_total": 0,
    "records_processed": 10,
    "distinct_records_processed": 10,
    "duplicates": 0,
    "duplicates_below_commit": 0,
    "lost": 0,
    "ownership_intervals": 1,
}


def test_a_summary_written_before_what_moved_was_measured_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(BEFORE_WHAT_MOVED))
    summary = read_summary(path)
    assert (summary.partitions_moved, summary.partitions_returned) == (0, 0)
    assert (summary.records_restored, summary.restore_seconds) == (0, None)
    assert summary.stopped_partition_seconds is None
    assert summary.unowned_partition_seconds is None
    assert summary.restoring_partition_seconds is None
    figures = summary.per_partition["t-0"]
    assert (figures.unowned_seconds, figures.restoring_seconds) == (None, None)


def test_restore_seconds_count_only_the_part_within_the_window(tmp_path: Path) -> None:
    """A restore that runs past the scenario's end counts its seconds up to the end, as
    its restoring partition-seconds do."""
    restore = Row(start=7.0, end=9.0, seconds=2.0, records=250, replayed=125, finished=False)
    stopped = Row(
        topic="t",
        partition=0,
        unowned_seconds=0.0,
        restoring_seconds=1.0,
        stopped_seconds=1.0,
        held_seconds=0.0,
    )
    analysis = RunAnalysis(
        run="r",
        run_dir=tmp_path,
        protocol="range",
        scenario="rolling-bounce",
        gap_ms=100.0,
        client="huddle",
        window=MeasureWindow(start=1.0, end=8.0),
        ownership=[],
        unavailability=[],
        outages=[],
        rebalances=[],
        violations=[],
        offsets=[],
        tables={},
        first_ts=0.0,
        restores=[restore],
        stopped=[stopped],
    )
    summary = summarise(analysis)
    assert summary.restore_seconds == 1.0
    assert summary.restore_seconds == summary.restoring_partition_seconds
