"""Rebalances per generation and how long each took.

From the coordinator's log (``source = coordinator``): generation *g* of a group starts
with the first ``rebalance_started`` after generation *g-1*'s ``generation_started`` (or
with ``generation_started`` itself if none was logged), its join phase ends at
``generation_started`` (generation *g*), and the rebalance ends when the coordinator logs
``assignment_stored`` for *g*. ``duration = stored - started``; a generation whose
assignment was never stored has a null ``stored`` and ``duration``.

Without a coordinator log (``source = members``), a generation is seen from the members'
``joined`` events: from the first ``joined`` of *g* to the last ``assigned``/``joined`` of
*g*.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

REBALANCE_COLUMNS = (
    "source",
    "group_id",
    "generation",
    "started",
    "join_completed",
    "stored",
    "duration",
    "triggers",
    "reason",
    "members",
)

COORDINATOR_EVENTS = ("rebalance_started", "generation_started", "assignment_stored")


def rebalances(control: DataFrame) -> DataFrame:
    coordinator = control.where(F.col("event").isin(*COORDINATOR_EVENTS))
    if coordinator.where(F.col("event") == "generation_started").limit(1).count() > 0:
        return _from_coordinator(coordinator)
    return _from_members(control)


def _from_coordinator(events: DataFrame) -> DataFrame:
    group = F.coalesce(F.col("group_id"), F.lit(""))
    w = (
        Window.partitionBy("group_key")
        .orderBy("ts", "seq")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    numbered = events.withColumn("group_key", group).select(
        "*",
        F.sum(F.when(F.col("event") == "generation_started", 1).otherwise(0))
        .over(w)
        .alias("gen_index"),
    )
    starts = (
        numbered.where(F.col("event") == "rebalance_started")
        .groupBy("group_key", (F.col("gen_index") + 1).alias("gen_index"))
        .agg(
            F.min("ts").alias("started"),
            F.count(F.lit(1)).alias("triggers"),
            F.min_by("reason", "ts").alias("reason"),
        )
    )
    generations = numbered.where(F.col("event") == "generation_started").select(
        "group_key",
        "gen_index",
        "group_id",
        "generation",
        F.col("ts").alias("join_completed"),
        "members",
    )
    stored = (
        events.where(F.col("event") == "assignment_stored")
        .withColumn("group_key", group)
        .select("group_key", "generation", F.col("ts").alias("stored_ts"))
    )
    with_start = generations.join(starts, ["group_key", "gen_index"], "left")
    with_stored = (
        with_start.join(stored, ["group_key", "generation"], "left")
        .where(F.col("stored_ts").isNull() | (F.col("stored_ts") >= F.col("join_completed")))
        .groupBy(*with_start.columns)
        .agg(F.min("stored_ts").alias("stored"))
    )
    started = F.coalesce(F.col("started"), F.col("join_completed"))
    return with_stored.select(
        F.lit("coordinator").alias("source"),
        "group_id",
        "generation",
        started.alias("started"),
        "join_completed",
        "stored",
        (F.col("stored") - started).alias("duration"),
        F.coalesce(F.col("triggers"), F.lit(0)).alias("triggers"),
        "reason",
        F.col("members").cast("long").alias("members"),
    )


def _from_members(control: DataFrame) -> DataFrame:
    joined = control.where(F.col("event") == "joined")
    seen = control.where(
        F.col("event").isin("joined", "assigned") & F.col("generation").isNotNull()
    )
    firsts = joined.groupBy("generation").agg(
        F.min("ts").alias("started"), F.countDistinct("proc").alias("members")
    )
    lasts = seen.groupBy("generation").agg(F.max("ts").alias("stored"))
    return firsts.join(lasts, "generation", "left").select(
        F.lit("members").alias("source"),
        F.lit(None).cast("string").alias("group_id"),
        "generation",
        "started",
        F.lit(None).cast("double").alias("join_completed"),
        "stored",
        (F.col("stored") - F.col("started")).alias("duration"),
        F.lit(0).cast("long").alias("triggers"),
        F.lit(None).cast("string").alias("reason"),
        F.col("members").cast("long").alias("members"),
    )
