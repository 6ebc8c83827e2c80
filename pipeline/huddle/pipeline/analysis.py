"""One run through every job: the tables (as DataFrames and collected rows) and figures."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from huddle.pipeline import availability, coverage, moves, ownership, rebalances, safety
from huddle.pipeline.load import RunEvents, load_run


@dataclass(frozen=True)
class RunAnalysis:
    run: str
    run_dir: Path
    protocol: str | None
    scenario: str | None
    gap_ms: float
    client: str | None  # huddle, or the Kafka client the members ran (None: not told)
    window: availability.MeasureWindow | None
    ownership: list[Row]
    unavailability: list[Row]
    outages: list[Row]
    rebalances: list[Row]
    violations: list[Row]
    offsets: list[Row]
    tables: dict[str, DataFrame]
    first_ts: float
    # what moved (``moves``), in the window: handovers and restores that started in it,
    # and per partition the unowned / restoring / stopped seconds (empty without a window)
    handovers: list[Row] = field(default_factory=list)
    restores: list[Row] = field(default_factory=list)
    stopped: list[Row] = field(default_factory=list)


def run_metadata(events: RunEvents) -> tuple[str | None, str | None, str | None]:
    """The run's protocol, scenario and client (the harness's ``run_started``; a run
    written before ``client`` was logged ran huddle's members)."""
    row = (
        events.control.where(F.col("event") == "run_started")
        .orderBy("ts")
        .select("protocol", "scenario", "client")
        .first()
    )
    if row is None:
        proto = events.control.where(F.col("protocol").isNotNull()).select("protocol").first()
        return (None if proto is None else str(proto["protocol"])), None, None
    return row["protocol"], row["scenario"], row["client"] or "huddle"


def known_partitions(events: RunEvents) -> DataFrame:
    from_processed = events.processed.select("topic", "partition")
    from_changes = ownership.partition_changes(events.control).select("topic", "partition")
    return from_processed.unionByName(from_changes).distinct()


def _harness_ts(events: RunEvents, event: str) -> float | None:
    row = events.control.where(F.col("event") == event).agg(F.min("ts").alias("t")).first()
    return None if row is None or row["t"] is None else float(row["t"])


def steady_ts(events: RunEvents) -> float | None:
    """When the harness saw the group settle after start-up (its ``steady`` event)."""
    return _harness_ts(events, "steady")


def scenario_end_ts(events: RunEvents) -> float | None:
    """When the scenario's duration was over (the ``scenario_finished`` event)."""
    return _harness_ts(events, "scenario_finished")


def _first_ts(events: RunEvents) -> float:
    row = events.control.agg(F.min("ts").alias("t")).first()
    return 0.0 if row is None or row["t"] is None else float(row["t"])


def _keep(df: DataFrame) -> DataFrame:
    return df.persist(StorageLevel.MEMORY_AND_DISK)


def analyse(
    spark: SparkSession,
    run_dir: Path,
    gap_ms: float,
    progress: Callable[[str], None] | None = None,
) -> RunAnalysis:
    """Every table of one run. ``progress`` is told each step as it begins."""
    say = progress or (lambda _: None)
    say("loading events")
    events = load_run(spark, run_dir)
    protocol, scenario, client = run_metadata(events)
    stops = coverage.stops(ownership.partition_changes(events.control))
    annotated = _keep(coverage.annotate(events.processed, gap_ms / 1000.0, stops))
    islands = _keep(coverage.islands(annotated))
    runs = _keep(coverage.offset_runs(annotated))
    owned = _keep(ownership.ownership_intervals(events.control, events.processed))
    partitions = _keep(known_partitions(events))
    say("availability")
    window = availability.measure_window(
        events.processed, steady_ts(events), scenario_end_ts(events)
    )
    tables: dict[str, DataFrame] = {"ownership": owned}
    if window is not None:
        outage_df = _keep(availability.outages(islands, partitions, window))
        tables["outages"] = outage_df
        tables["unavailability"] = availability.unavailability(outage_df, partitions, window)
    say("what moved")
    restore_rows = _keep(moves.restores(events.control, owned))
    tables["handovers"], tables["restores"] = moves.moves_in_window(owned, restore_rows, window)
    if window is not None:
        tables["stopped"] = moves.stopped(owned, restore_rows, partitions, window)
    say("rebalances and safety checks")
    tables["rebalances"] = rebalances.rebalances(events.control)
    tables["violations"] = _keep(
        safety.violations(events.processed, islands, runs, owned, events.control)
    )
    tables["offsets"] = safety.offset_union(runs)

    def rows(name: str, *order: str) -> list[Row]:
        df = tables.get(name)
        return [] if df is None else df.orderBy(*order).collect()

    say("collecting the results")
    result = RunAnalysis(
        run=events.run,
        run_dir=run_dir,
        protocol=protocol,
        scenario=scenario,
        gap_ms=gap_ms,
        client=client,
        window=window,
        ownership=rows("ownership", "topic", "partition", "start", "proc"),
        unavailability=rows("unavailability", "topic", "partition"),
        outages=rows("outages", "topic", "partition", "start"),
        rebalances=rows("rebalances", "group_id", "generation", "join_completed"),
        violations=rows("violations", "type", "topic", "partition", "ts", "proc"),
        offsets=rows("offsets", "topic", "partition"),
        tables=tables,
        first_ts=_first_ts(events),
        handovers=rows("handovers", "topic", "partition", "start"),
        restores=rows("restores", "topic", "partition", "start"),
        stopped=rows("stopped", "topic", "partition"),
    )
    return result


def write_tables(analysis: RunAnalysis, out_dir: Path) -> dict[str, Path]:
    """Each table as Parquet under ``out_dir`` (``<name>.parquet`` directories)."""
    written: dict[str, Path] = {}
    for name, df in analysis.tables.items():
        path = out_dir / f"{name}.parquet"
        df.coalesce(1).write.mode("overwrite").parquet(str(path))
        written[name] = path
    return written


def as_dicts(rows: list[Row]) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in rows]
