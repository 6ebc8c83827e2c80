"""What the processed events cover, in time and in offsets, per member and partition.

A ``processed`` event at ``ts`` covers time ``[ts, next)`` where ``next`` is the same
process's next processed event for that partition, if it comes within ``gap_s`` seconds
(the member's next tick); otherwise it covers the instant ``[ts, ts]`` only. Consecutive
covering events of one process form an *island* (a stretch of continuous processing).

In offsets an event covers ``[offset, offset + count)``. Consecutive events of one
process that continue exactly where the previous one stopped form an *offset run*.
Both are aggregated with window functions, so no Python touches individual records.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from huddle.pipeline.defaults import DEFAULT_GAP_MS  # noqa: F401 - re-exported


def annotate(processed: DataFrame, gap_s: float, stops: DataFrame | None = None) -> DataFrame:
    """Processed events with ``cov_end``, ``end_offset``, ``island`` and ``offset_run``.

    ``stops`` (``proc, topic, partition, ts, seq``: a member's own ``revoked``/``lost``
    events) end an island even when the member's next tick comes within ``gap_s``: an eager
    member that revokes a partition and gets it back 10 ms later did stop processing it,
    and that stop is what eager rebalancing costs.
    """
    w = Window.partitionBy("proc", "topic", "partition").orderBy("ts", "seq")
    rows = processed.withColumn("_stop", F.lit(False))
    if stops is not None:
        rows = rows.unionByName(
            stops.select("proc", "topic", "partition", "ts", "seq").withColumn(
                "_stop", F.lit(True)
            ),
            allowMissingColumns=True,
        )
    next_ts = F.lead("ts").over(w)
    next_stop = F.coalesce(F.lead("_stop").over(w), F.lit(False))
    within = next_ts.isNotNull() & (next_ts - F.col("ts") <= F.lit(gap_s))
    ticks = rows.select(
        "*",
        (within & ~next_stop).alias("_chained"),
        # processing went on until the next tick, or until the member stopped it
        F.when(within, next_ts).otherwise(F.col("ts")).alias("cov_end"),
    ).where(~F.col("_stop"))
    upto = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    step = ticks.select(
        "*",
        (F.col("offset") + F.col("count")).alias("end_offset"),
        F.coalesce(
            F.lag("_chained").over(w),  # did the previous tick chain into this one?
            F.lit(False),
        ).alias("continues_island"),
        (F.col("offset") == F.lag(F.col("offset") + F.col("count")).over(w)).alias("continues_run"),
    )
    return step.select(
        *[c for c in step.columns if c not in ("_stop", "_chained")],
        F.sum(F.when(F.col("continues_island"), 0).otherwise(1)).over(upto).alias("island"),
        F.sum(F.when(F.coalesce(F.col("continues_run"), F.lit(False)), 0).otherwise(1))
        .over(upto)
        .alias("offset_run"),
    )


def stops(changes: DataFrame) -> DataFrame:
    """The ``revoked``/``lost`` rows of ``ownership.partition_changes``."""
    return changes.where(F.col("event").isin("revoked", "lost")).select(
        "proc", "topic", "partition", "ts", "seq"
    )


def islands(annotated: DataFrame) -> DataFrame:
    """``proc, member_id, topic, partition, island, start, end, events, first_offset,
    end_offset`` - one row per stretch of continuous processing."""
    return annotated.groupBy("proc", "topic", "partition", "island").agg(
        F.first("member_id").alias("member_id"),
        F.min("ts").alias("start"),
        F.max("cov_end").alias("end"),
        F.count(F.lit(1)).alias("events"),
        F.min("offset").alias("first_offset"),
        F.max("end_offset").alias("end_offset"),
    )


def offset_runs(annotated: DataFrame) -> DataFrame:
    """``proc, topic, partition, offset_run, start_offset, end_offset, records, start, end``:
    maximal gapless, overlap-free offset ranges one process processed in order."""
    return annotated.groupBy("proc", "topic", "partition", "offset_run").agg(
        F.min("offset").alias("start_offset"),
        F.max("end_offset").alias("end_offset"),
        F.sum("count").alias("records"),
        F.min("ts").alias("start"),
        F.max("ts").alias("end"),
    )
