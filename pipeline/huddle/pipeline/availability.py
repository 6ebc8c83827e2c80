"""Unavailability: time a partition had records waiting and nobody processing them.

Records are always waiting, so a partition is unavailable whenever no island (see
``coverage``) of any member covers it. The measured window is the same for every
partition of a run: from the first moment *all* partitions had been processed once (the
latest of the partitions' first processed events), or from the harness's ``steady`` event
if that is later (the group settled after start-up and the scenario's clock started), to
the last processed event of the run, or to the harness's ``scenario_finished`` event if
that is earlier (the scenario's duration was over and the harness stopped the members:
members that stop first would otherwise leave their partitions unprocessed until the last
one stops). Start-up and shutdown are left out. A partition
known from ownership events but never processed is unavailable for the whole window.
Outages are the maximal gaps in the union of islands within the window; unavailable
seconds are their sum.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

WINDOW_DEFINITION = (
    "from the first moment all partitions had been processed once, or the harness's "
    "steady event (the group settled after start-up) if later, "
    "to the last processed event of the run, or the harness's scenario_finished event "
    "(the members are stopped next) if earlier"
)


@dataclass(frozen=True)
class MeasureWindow:
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)


def measure_window(
    processed: DataFrame, not_before: float | None = None, not_after: float | None = None
) -> MeasureWindow | None:
    """The window over which availability is measured; ``None`` if nothing was processed.
    ``not_before``: the ``steady`` event's time, ``not_after`` the ``scenario_finished``
    event's, if the run has them."""
    firsts = processed.groupBy("topic", "partition").agg(
        F.min("ts").alias("first"), F.max("ts").alias("last")
    )
    row = firsts.agg(F.max("first").alias("start"), F.max("last").alias("end")).first()
    if row is None or row["start"] is None:
        return None
    start = float(row["start"])
    if not_before is not None:
        start = max(start, not_before)
    end = float(row["end"])
    if not_after is not None:
        end = max(min(end, not_after), start)
    return MeasureWindow(start=start, end=end)


def outages(islands: DataFrame, partitions: DataFrame, window: MeasureWindow) -> DataFrame:
    """``topic, partition, start, end, duration``: every gap in processing in the window.

    ``partitions`` (``topic, partition``) is every partition the run knows of.
    """
    w0, w1 = F.lit(window.start), F.lit(window.end)
    clipped = (
        islands.select(
            "topic",
            "partition",
            F.greatest(F.col("start"), w0).alias("start"),
            F.least(F.col("end"), w1).alias("end"),
        )
        .where(F.col("start") <= F.col("end"))
        .unionByName(partitions.select("topic", "partition", w0.alias("start"), w0.alias("end")))
        .unionByName(partitions.select("topic", "partition", w1.alias("start"), w1.alias("end")))
    )
    before = (
        Window.partitionBy("topic", "partition")
        .orderBy("start", "end")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    covered_until = F.max("end").over(before)
    return (
        clipped.select("topic", "partition", covered_until.alias("gap_start"), "start")
        .where(F.col("start") > F.col("gap_start"))
        .select(
            "topic",
            "partition",
            F.col("gap_start").alias("start"),
            F.col("start").alias("end"),
            (F.col("start") - F.col("gap_start")).alias("duration"),
        )
    )


def unavailability(
    outage_rows: DataFrame, partitions: DataFrame, window: MeasureWindow
) -> DataFrame:
    """``topic, partition, window_seconds, unavailable_seconds, outages, max_outage_seconds``."""
    per = outage_rows.groupBy("topic", "partition").agg(
        F.sum("duration").alias("unavailable_seconds"),
        F.count(F.lit(1)).alias("outages"),
        F.max("duration").alias("max_outage_seconds"),
    )
    return partitions.join(per, ["topic", "partition"], "left").select(
        "topic",
        "partition",
        F.lit(window.seconds).alias("window_seconds"),
        F.coalesce(F.col("unavailable_seconds"), F.lit(0.0)).alias("unavailable_seconds"),
        F.coalesce(F.col("outages"), F.lit(0)).alias("outages"),
        F.coalesce(F.col("max_outage_seconds"), F.lit(0.0)).alias("max_outage_seconds"),
    )
