"""What moved: ownership handovers, state restores, and why processing stopped.

*Handovers.* Each ownership interval (``ownership``) of a partition that follows another
one is a handover. A member is its process name (``member-3``: what keeps its local state
across a restart, whatever its member id), so a handover is a *move* when the partition
went to another process than the one that owned it last, a *return* when it went back to
that same process (a bounced static member, the partitions Design II held for a member
that came back, and also an eager rebalance that revokes a partition and gives it straight
back). A partition's first owner is not a handover, nor is an ``assigned`` that repeats a
partition the process still owned.

*Restores* (stateful runs, ``restore_started``/``restored`` events): one per task given to
a member, from its ``restore_started`` to its ``restored``, or, for a restore that never
finished, to the member's next revocation, loss or assignment of that partition, or the
end of that process incarnation. Standby and warm-up replicas catching up in the
background are not restores: they do not stop processing. The records a restore
*replayed* are all of its ``records`` when it finished; when it was cut short, those its
``restore_stopped`` event says; for a member killed mid-restore (which writes nothing
more), those it replayed up to its last event at its restore's pace (``records`` in
``seconds``); none when the log does not say.

*A member killed mid-restore*: the pipeline knows of it until its last event, so its
restore counts as restoring until then, and the rest of it, until another member owns the
partition, counts as unowned.

*Why processing stopped*, per partition and within the availability window: *unowned*, no
member owned it (the gaps in the union of its ownership intervals, in the members' own
view: a killed member stops owning at its last event); *restoring*, its owner was
restoring its state (the union of its restores); *stopped*, the union of both, each
instant counted once. Of the unowned time, *held* is the part while a partition waited for
the process that owned it to come back (it went back to the same process after that
process restarted: Design II's hold, a static member's bounce); the rest was between
owners (a move, or an eager rebalance that revoked it and gave it straight back).

Handovers and restores count when they start within the window (the whole run when there
is none: nothing was processed).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from huddle.pipeline.availability import MeasureWindow, outages

HANDOVER_COLUMNS = ("topic", "partition", "start", "proc", "previous_proc", "kind")


def _steps(owned: DataFrame) -> DataFrame:
    """Each ownership interval beside the one before it of its partition: its ``proc``,
    ``incarnation``, ``end`` and ``end_reason`` as ``previous_*``."""
    w = Window.partitionBy("topic", "partition").orderBy("start", "proc", "incarnation")
    before = ("proc", "incarnation", "end", "end_reason")
    return owned.select(
        "topic",
        "partition",
        "start",
        "proc",
        "incarnation",
        *[F.lag(c).over(w).alias(f"previous_{c}") for c in before],
    )


def handovers(owned: DataFrame) -> DataFrame:
    """``topic, partition, start, proc, previous_proc, kind``: ``kind`` ``moved`` or
    ``returned``, one row per ownership interval that follows another of the partition."""
    steps = _steps(owned)
    same = F.col("proc") == F.col("previous_proc")
    still_owned = same & (F.col("previous_end_reason") == "reassigned")
    return steps.where(F.col("previous_proc").isNotNull() & ~still_owned).select(
        "topic",
        "partition",
        "start",
        "proc",
        "previous_proc",
        F.when(same, F.lit("returned")).otherwise(F.lit("moved")).alias("kind"),
    )


def restores(control: DataFrame, owned: DataFrame) -> DataFrame:
    """``proc, member_id, topic, partition, start, end, seconds, offset, from_offset,
    records, replayed, finished``: one row per ``restore_started`` event. It ends at the
    process's next ``restored`` of the partition, unless the ownership interval it is in
    (``owned``) ended first (``finished`` false). ``records``: what it had to replay;
    ``replayed``: what it did (the module's docstring)."""
    marks = control.where(
        F.col("event").isin("restore_started", "restored", "restore_stopped")
    ).select(
        "proc",
        "ts",
        "seq",
        "event",
        "topic",
        "partition",
        "member_id",
        "offset",
        "from_offset",
        "records",
        F.col("seconds").alias("planned_seconds"),
    )
    w = Window.partitionBy("proc", "topic", "partition").orderBy("ts", "seq")
    after = F.lead("event").over(w)
    started = marks.select(
        "*",
        F.when(after == "restored", F.lead("ts").over(w)).alias("done"),
        F.when(after == "restore_stopped", F.lead("records").over(w)).alias("cut_records"),
    ).where(F.col("event") == "restore_started")
    r = started.alias("r")
    o = F.broadcast(owned.select("proc", "topic", "partition", "start", "end")).alias("o")
    within = (
        (F.col("r.proc") == F.col("o.proc"))
        & (F.col("r.topic") == F.col("o.topic"))
        & (F.col("r.partition") == F.col("o.partition"))
        & (F.col("r.ts") >= F.col("o.start"))
        & (F.col("r.ts") <= F.col("o.end"))
    )
    latest = Window.partitionBy("r.proc", "r.topic", "r.partition", "r.seq").orderBy(
        F.col("o.start").desc_nulls_last()
    )
    joined = r.join(o, within, "left").select(
        "r.*", F.col("o.end").alias("owned_until"), F.row_number().over(latest).alias("rank")
    )
    finished = F.col("done").isNotNull() & (
        F.col("owned_until").isNull() | (F.col("done") <= F.col("owned_until"))
    )
    end = F.when(finished, F.col("done")).otherwise(F.coalesce("owned_until", "ts"))
    return joined.where(F.col("rank") == 1).select(
        "proc",
        "member_id",
        "topic",
        "partition",
        F.col("ts").alias("start"),
        end.alias("end"),
        (end - F.col("ts")).alias("seconds"),
        "offset",
        "from_offset",
        "records",
        _replayed(finished, end - F.col("ts")).alias("replayed"),
        finished.alias("finished"),
    )


def _replayed(finished: Column, elapsed: Column) -> Column:
    """The records a restore replayed: all when it finished, else what its
    ``restore_stopped`` says, else (killed) its pace over ``elapsed``, else none."""
    records, planned = F.col("records"), F.col("planned_seconds")
    paced = F.floor(records * F.least(elapsed / planned, F.lit(1.0))).cast("long")
    return (
        F.when(finished | (records == 0), records)
        .when(F.col("cut_records").isNotNull(), F.col("cut_records"))
        .when(planned > 0, paced)
        .otherwise(F.lit(0).cast("long"))
    )


def _in_window(df: DataFrame, window: MeasureWindow | None) -> DataFrame:
    if window is None:
        return df
    return df.where((F.col("start") >= window.start) & (F.col("start") <= window.end))


def union_seconds(intervals: DataFrame, window: MeasureWindow) -> DataFrame:
    """``topic, partition, seconds``: the length of the union of ``intervals`` (``topic,
    partition, start, end``) within ``window``, each instant counted once."""
    w0, w1 = F.lit(window.start), F.lit(window.end)
    clipped = intervals.select(
        "topic",
        "partition",
        F.greatest(F.col("start"), w0).alias("start"),
        F.least(F.col("end"), w1).alias("end"),
    ).where(F.col("start") < F.col("end"))
    before = (
        Window.partitionBy("topic", "partition")
        .orderBy("start", "end")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    reach = F.coalesce(F.max("end").over(before), w0)
    new: Column = F.greatest(F.col("end") - F.greatest(F.col("start"), reach), F.lit(0.0))
    swept = clipped.select("topic", "partition", new.alias("new"))
    return swept.groupBy("topic", "partition").agg(F.sum("new").alias("seconds"))


def held_for_their_process(owned: DataFrame) -> DataFrame:
    """``topic, partition, start, end``: from the end of each ownership interval to the
    start of the next one of its partition when that goes back to the same process, in a
    later incarnation (the process went away and came back)."""
    steps = _steps(owned)
    back = (F.col("proc") == F.col("previous_proc")) & (
        F.col("incarnation") != F.col("previous_incarnation")
    )
    return steps.where(back & (F.col("start") > F.col("previous_end"))).select(
        "topic", "partition", F.col("previous_end").alias("start"), F.col("start").alias("end")
    )


def stopped(
    owned: DataFrame, restore_rows: DataFrame, partitions: DataFrame, window: MeasureWindow
) -> DataFrame:
    """``topic, partition, unowned_seconds, restoring_seconds, stopped_seconds,
    held_seconds`` for every partition the run knows of."""
    unowned = outages(owned.select("topic", "partition", "start", "end"), partitions, window)
    gaps = unowned.select("topic", "partition", "start", "end")
    restoring = restore_rows.select("topic", "partition", "start", "end")
    either = gaps.unionByName(restoring)
    held = held_for_their_process(owned)

    def seconds(intervals: DataFrame) -> DataFrame:
        return union_seconds(intervals, window).withColumnRenamed("seconds", "s")

    # unowned and held: |U| + |H| - |U or H|
    held_unowned = (
        seconds(gaps)
        .withColumnRenamed("s", "u")
        .join(seconds(held).withColumnRenamed("s", "h"), ["topic", "partition"])
        .join(seconds(gaps.unionByName(held)), ["topic", "partition"])
        .select("topic", "partition", (F.col("u") + F.col("h") - F.col("s")).alias("s"))
    )
    figures = [
        (unowned.groupBy("topic", "partition").agg(F.sum("duration").alias("s")), "unowned"),
        (seconds(restoring), "restoring"),
        (seconds(either), "stopped"),
        (held_unowned, "held"),
    ]
    table = partitions.select("topic", "partition")
    for df, name in figures:
        table = table.join(
            df.select("topic", "partition", F.col("s").alias(f"{name}_seconds")),
            ["topic", "partition"],
            "left",
        )
    return table.select(
        "topic",
        "partition",
        *[F.coalesce(F.col(f"{n}_seconds"), F.lit(0.0)).alias(f"{n}_seconds") for _, n in figures],
    )


def moves_in_window(
    owned: DataFrame, restore_rows: DataFrame, window: MeasureWindow | None
) -> tuple[DataFrame, DataFrame]:
    """The handovers and the restores that started within ``window``."""
    return _in_window(handovers(owned), window), _in_window(restore_rows, window)
