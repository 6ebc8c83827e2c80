"""Reading a run directory's JSON-lines event logs into DataFrames (the schema is derived
from the event Structs: ``huddle.pipeline.schema``).

Every row gets ``ts`` in epoch seconds: member and harness lines carry ``ts`` already, the
coordinator's structlog lines carry an ISO-8601 ``timestamp`` that is converted. ``proc``
falls back to the file's name (``events/<proc>.jsonl``) when a line has none. ``seq`` is a
tie-breaker that follows line order within a file. ``partitions`` stays raw JSON text
(``assigned``/``revoked``/``lost`` carry ``[[topic, partition], ...]``; ``run_started``
may carry anything) and is parsed where needed. Truncated last lines (a SIGKILLed writer)
are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from huddle.pipeline.schema import EVENT_SCHEMA
from huddle.protocol.errors import HuddleError

PROCESSED_COLUMNS = ("proc", "member_id", "generation", "topic", "partition", "offset", "count")


@dataclass(frozen=True)
class RunEvents:
    """One run's events: ``processed`` (the bulk, narrow columns) and ``control`` (the rest)."""

    run: str
    run_dir: Path
    processed: DataFrame
    control: DataFrame

    def unpersist(self) -> None:
        self.processed.unpersist()
        self.control.unpersist()


class NoEventsError(HuddleError, FileNotFoundError):
    """A run directory without event files (also a ``FileNotFoundError``)."""


def event_files(run_dir: Path) -> list[str]:
    files = sorted((run_dir / "events").glob("*.jsonl"))
    if not files:
        raise NoEventsError(f"no events/*.jsonl under {run_dir}")
    return [str(f) for f in files]


def read_events(spark: SparkSession, run_dir: Path) -> DataFrame:
    """All events of a run, one row per line, with ``ts`` (seconds) and ``seq``."""
    raw = spark.read.schema(EVENT_SCHEMA).json(event_files(run_dir))
    file_proc = F.regexp_replace(F.col("_metadata.file_name"), r"\.jsonl$", "")
    iso_ts = F.to_timestamp(F.col("timestamp")).cast("double")
    return (
        raw.withColumn("ts", F.coalesce(F.col("ts"), iso_ts))
        .withColumn("proc", F.coalesce(F.col("proc"), file_proc))
        .where(F.col("event").isNotNull() & F.col("ts").isNotNull())
        .withColumn("seq", F.monotonically_increasing_id())
        .drop("timestamp")
    )


def load_run(spark: SparkSession, run_dir: Path) -> RunEvents:
    """Read and cache a run, split into processed events and everything else."""
    events = read_events(spark, run_dir)
    processed = (
        events.where(F.col("event") == "processed")
        .select("ts", "seq", *PROCESSED_COLUMNS)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    control = events.where(F.col("event") != "processed").persist(StorageLevel.MEMORY_AND_DISK)
    return RunEvents(run=run_dir.name, run_dir=run_dir, processed=processed, control=control)
