"""Ownership intervals: which member process owned which partition, and when.

An interval opens at an ``assigned`` event listing the partition and closes at the same
process incarnation's next ``revoked``/``lost`` (or a repeated ``assigned``) for that
partition; failing that, at the incarnation's end. An incarnation of a process runs from
its ``process_started`` to just before the next one; it ends at ``process_stopped`` (a
clean stop) or, for a SIGKILLed process that writes nothing more, at its last event
(``end_reason`` ``last_event``). The coordinator and other members may still have counted
a killed member as owner until its removal; these intervals are the member's own view.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

CHANGE_EVENTS = ("assigned", "revoked", "lost")
NO_START = -1.0e18

OWNERSHIP_COLUMNS = (
    "proc",
    "incarnation",
    "member_id",
    "generation",
    "topic",
    "partition",
    "start",
    "end",
    "duration",
    "end_reason",
)


def incarnations(control: DataFrame) -> DataFrame:
    """``proc, incarnation, inc_start, inc_next``: incarnation 0 precedes any start event."""
    starts = control.where(F.col("event") == "process_started").select("proc", "ts", "seq")
    by_proc = Window.partitionBy("proc").orderBy("ts", "seq")
    numbered = starts.select(
        "proc",
        F.row_number().over(by_proc).cast("long").alias("incarnation"),
        F.col("ts").alias("inc_start"),
        F.lead("ts").over(by_proc).alias("inc_next"),
    )
    first_start = numbered.where(F.col("incarnation") == 1).select(
        "proc", F.col("inc_start").alias("first")
    )
    procs = control.select("proc").distinct().join(first_start, "proc", "left")
    before = procs.select(
        "proc",
        F.lit(0).cast("long").alias("incarnation"),
        F.lit(NO_START).alias("inc_start"),
        F.col("first").alias("inc_next"),
    )
    return before.unionByName(numbered)


def in_incarnation(events: DataFrame, incs: DataFrame) -> DataFrame:
    """``events`` with the ``incarnation`` each row belongs to (by process and time)."""
    i = F.broadcast(incs).alias("i")
    e = events.alias("e")
    cond = (
        (F.col("e.proc") == F.col("i.proc"))
        & (F.col("e.ts") >= F.col("i.inc_start"))
        & (F.col("i.inc_next").isNull() | (F.col("e.ts") < F.col("i.inc_next")))
    )
    return e.join(i, cond, "inner").select("e.*", F.col("i.incarnation"))


def incarnation_ends(control: DataFrame, processed: DataFrame, incs: DataFrame) -> DataFrame:
    """``proc, incarnation, inc_end, inc_end_reason`` from each incarnation's last event."""
    last_processed = (
        in_incarnation(processed.select("proc", "ts"), incs)
        .groupBy("proc", "incarnation")
        .agg(F.max("ts").alias("last_ts"), F.lit(False).alias("stopped"))
    )
    last_control = (
        in_incarnation(control.select("proc", "ts", "event"), incs)
        .groupBy("proc", "incarnation")
        .agg(
            F.max("ts").alias("last_ts"),
            F.max(F.col("event") == "process_stopped").alias("stopped"),
        )
    )
    return (
        last_control.unionByName(last_processed)
        .groupBy("proc", "incarnation")
        .agg(F.max("last_ts").alias("inc_end"), F.max("stopped").alias("stopped"))
        .select(
            "proc",
            "incarnation",
            "inc_end",
            F.when(F.col("stopped"), F.lit("process_stopped"))
            .otherwise(F.lit("last_event"))
            .alias("inc_end_reason"),
        )
    )


def partition_changes(control: DataFrame) -> DataFrame:
    """One row per partition named by an ``assigned``/``revoked``/``lost`` event."""
    pairs = F.from_json(F.col("partitions"), "array<array<string>>")
    return (
        control.where(F.col("event").isin(*CHANGE_EVENTS))
        .select(
            "proc", "member_id", "generation", "event", "ts", "seq", F.explode(pairs).alias("tp")
        )
        .select(
            "proc",
            "member_id",
            "generation",
            "event",
            "ts",
            "seq",
            F.col("tp")[0].alias("topic"),
            F.col("tp")[1].cast("long").alias("partition"),
        )
    )


def _end_reason(next_event: Column, inc_reason: Column) -> Column:
    return (
        F.when(next_event == "assigned", F.lit("reassigned"))
        .when(next_event.isNotNull(), next_event)
        .otherwise(inc_reason)
    )


def ownership_intervals(control: DataFrame, processed: DataFrame) -> DataFrame:
    """One row per ownership interval (columns ``OWNERSHIP_COLUMNS``)."""
    incs = incarnations(control).cache()
    ends = incarnation_ends(control, processed, incs)
    changes = in_incarnation(partition_changes(control), incs)
    w = Window.partitionBy("proc", "incarnation", "topic", "partition").orderBy("ts", "seq")
    opened = changes.select(
        "*",
        F.lead("event").over(w).alias("next_event"),
        F.lead("ts").over(w).alias("next_ts"),
    ).where(F.col("event") == "assigned")
    joined = opened.join(F.broadcast(ends), ["proc", "incarnation"], "left")
    return joined.select(
        "proc",
        "incarnation",
        "member_id",
        "generation",
        "topic",
        "partition",
        F.col("ts").alias("start"),
        F.coalesce(F.col("next_ts"), F.col("inc_end")).alias("end"),
        (F.coalesce(F.col("next_ts"), F.col("inc_end")) - F.col("ts")).alias("duration"),
        _end_reason(F.col("next_event"), F.col("inc_end_reason")).alias("end_reason"),
    )
