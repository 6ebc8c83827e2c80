"""The six safety checks. Each yields violation rows ``type, topic, partition, ts, proc,
member_id, records, evidence`` (``evidence``: JSON of the rows that show it).

1. ``overlap``: islands (see ``coverage``) of two different processes on one partition
   whose time intervals overlap (open intervals: a handover that touches is fine). One row
   per overlapping pair of islands.
2. ``unowned``: a processed event outside every ownership interval of that process and
   member id for that partition (interval ends inclusive). One row per event.
3. ``commit_backwards``: an accepted commit whose offset is lower than the previous accepted
   commit of that partition (ordered by time). One row per such commit.
4. ``lost``: offsets below a partition's highest processed offset that nobody processed.
   One row per gap; ``records`` is the gap's size.
5. ``duplicate_below_commit``: a processed event that re-processes offsets already
   processed (by anyone, earlier in time) and starts below the partition's last accepted
   committed offset at that moment (committed offset = next offset to process; resuming at
   it is at-least-once and allowed). One row per event; ``records`` counts the re-processed
   offsets below the commit.
6. ``restore_not_from_commit``: a stateful task that restored its state up to another
   offset than the partition's last accepted committed offset at the moment its restore
   started (0 before any commit), or whose local state did not end up at that offset: a
   state ahead of it (``from_offset`` above ``offset``: records counted twice), or one
   that replayed fewer records than lay between them (a gap; with ``state_records`` in the
   run's settings, a state of the last N records needs at most N). After the partition's
   previous owner was killed, a restore up to an offset above its last logged commit is
   accepted up to what that owner had processed: its last commit may have been stored
   without its ``committed`` line. One row per restore; ``records`` is how far off it was.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

VIOLATION_TYPES = (
    "overlap",
    "unowned",
    "commit_backwards",
    "lost",
    "duplicate_below_commit",
    "restore_not_from_commit",
)
VIOLATION_COLUMNS = (
    "type",
    "topic",
    "partition",
    "ts",
    "proc",
    "member_id",
    "records",
    "evidence",
)


def _violation(
    df: DataFrame,
    kind: str,
    ts: Column,
    proc: Column,
    member_id: Column,
    records: Column,
    evidence: Column,
) -> DataFrame:
    return df.select(
        F.lit(kind).alias("type"),
        F.col("topic"),
        F.col("partition"),
        ts.cast("double").alias("ts"),
        proc.cast("string").alias("proc"),
        member_id.cast("string").alias("member_id"),
        records.cast("long").alias("records"),
        F.to_json(evidence).alias("evidence"),
    )


def overlaps(islands: DataFrame) -> DataFrame:
    a, b = islands.alias("a"), islands.alias("b")
    cond = (
        (F.col("a.topic") == F.col("b.topic"))
        & (F.col("a.partition") == F.col("b.partition"))
        & (F.col("a.proc") < F.col("b.proc"))
        & (F.col("a.start") < F.col("b.end"))
        & (F.col("b.start") < F.col("a.end"))
    )
    pairs = a.join(b, cond).select(
        F.col("a.topic").alias("topic"),
        F.col("a.partition").alias("partition"),
        F.struct(*[F.col(f"a.{c}").alias(c) for c in _ISLAND_FIELDS]).alias("a"),
        F.struct(*[F.col(f"b.{c}").alias(c) for c in _ISLAND_FIELDS]).alias("b"),
        F.greatest(F.col("a.start"), F.col("b.start")).alias("overlap_start"),
        F.least(F.col("a.end"), F.col("b.end")).alias("overlap_end"),
    )
    return _violation(
        pairs,
        "overlap",
        F.col("overlap_start"),
        F.concat_ws(",", F.col("a.proc"), F.col("b.proc")),
        F.concat_ws(",", F.col("a.member_id"), F.col("b.member_id")),
        F.lit(None),
        F.struct("a", "b", "overlap_start", "overlap_end"),
    )


_ISLAND_FIELDS = ("proc", "member_id", "start", "end", "events", "first_offset", "end_offset")


def unowned(processed: DataFrame, ownership: DataFrame) -> DataFrame:
    owned = F.broadcast(ownership.select("proc", "member_id", "topic", "partition", "start", "end"))
    p, o = processed.alias("p"), owned.alias("o")
    cond = (
        (F.col("p.proc") == F.col("o.proc"))
        & (F.col("p.member_id").eqNullSafe(F.col("o.member_id")))
        & (F.col("p.topic") == F.col("o.topic"))
        & (F.col("p.partition") == F.col("o.partition"))
        & (F.col("p.ts") >= F.col("o.start"))
        & (F.col("p.ts") <= F.col("o.end"))
    )
    outside = p.join(o, cond, "left_anti")
    return _violation(
        outside,
        "unowned",
        F.col("ts"),
        F.col("proc"),
        F.col("member_id"),
        F.col("count"),
        F.struct("ts", "proc", "member_id", "generation", "offset", "count"),
    )


def commits(control: DataFrame) -> DataFrame:
    return control.where((F.col("event") == "committed") & F.col("accepted")).select(
        "ts", "seq", "proc", "member_id", "generation", "topic", "partition", "offset"
    )


def commit_backwards(accepted: DataFrame) -> DataFrame:
    w = Window.partitionBy("topic", "partition").orderBy("ts", "seq")
    prev = F.struct(
        *[F.lag(c).over(w).alias(c) for c in ("ts", "proc", "member_id", "generation", "offset")]
    )
    cur = F.struct("ts", "proc", "member_id", "generation", "offset")
    steps = accepted.select("*", prev.alias("previous"), cur.alias("commit"))
    backwards = steps.where(F.col("offset") < F.col("previous.offset"))
    return _violation(
        backwards,
        "commit_backwards",
        F.col("ts"),
        F.col("proc"),
        F.col("member_id"),
        F.col("previous.offset") - F.col("offset"),
        F.struct("previous", "commit"),
    )


def offset_union(runs: DataFrame) -> DataFrame:
    """Per partition: ``records`` (all processings), ``distinct_records``, ``lost_records``,
    ``highest_end`` - from the offset runs, by a sweep over offsets."""
    w = (
        Window.partitionBy("topic", "partition")
        .orderBy("start_offset", "end_offset")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    reach = F.coalesce(F.max("end_offset").over(w), F.lit(0))
    swept = runs.select("*", reach.alias("reach"))
    new = F.greatest(
        F.col("end_offset") - F.greatest(F.col("start_offset"), F.col("reach")), F.lit(0)
    )
    hole = F.greatest(F.col("start_offset") - F.col("reach"), F.lit(0))
    return swept.groupBy("topic", "partition").agg(
        F.sum("records").alias("records"),
        F.sum(new).alias("distinct_records"),
        F.sum(hole).alias("lost_records"),
        F.max("end_offset").alias("highest_end"),
    )


def lost(runs: DataFrame) -> DataFrame:
    w = Window.partitionBy("topic", "partition").orderBy("start_offset", "end_offset")
    before = w.rowsBetween(Window.unboundedPreceding, -1)
    swept = runs.select(
        "*",
        F.coalesce(F.max("end_offset").over(before), F.lit(0)).alias("reach"),
        F.struct(
            *[F.lag(c).over(w).alias(c) for c in ("proc", "start_offset", "end_offset", "end")]
        ).alias("before"),
    )
    holes = swept.where(F.col("start_offset") > F.col("reach"))
    return _violation(
        holes,
        "lost",
        F.col("start"),
        F.lit(None),
        F.lit(None),
        F.col("start_offset") - F.col("reach"),
        F.struct(
            F.col("reach").alias("first_lost"),
            (F.col("start_offset") - 1).alias("last_lost"),
            F.col("before"),
            F.struct("proc", "start_offset", "end_offset", "start").alias("after"),
        ),
    )


_EVENT_KEYS = ("ts", "seq", "proc", "member_id", "generation", "topic", "partition")
_WHO = ("ts", "proc", "member_id", "generation")  # an event's own keys, in evidence


def _timeline() -> WindowSpec:
    """A partition's events and its accepted commits in time order, a commit first on a
    tie (a function: a window spec needs a running Spark context)."""
    return Window.partitionBy("topic", "partition").orderBy("ts", "order", "seq")


def _beside_commits(rows: DataFrame, accepted: DataFrame, *columns: str) -> DataFrame:
    """``rows`` (``order`` 1, with ``columns``) and the accepted commits (``order`` 0, their
    offset as ``commit_offset``) in one frame, with ``committed``: each partition's last
    accepted commit at each row (null before any)."""
    both = rows.select(
        *_EVENT_KEYS,
        *columns,
        F.lit(None).cast("long").alias("commit_offset"),
        F.lit(1).alias("order"),
    ).unionByName(
        accepted.select(
            *_EVENT_KEYS, F.col("offset").alias("commit_offset"), F.lit(0).alias("order")
        ),
        allowMissingColumns=True,
    )
    upto = _timeline().rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return both.select("*", F.last("commit_offset", ignorenulls=True).over(upto).alias("committed"))


def duplicates_below_commit(processed: DataFrame, accepted: DataFrame) -> DataFrame:
    before = _timeline().rowsBetween(Window.unboundedPreceding, -1)
    swept = _beside_commits(processed, accepted, "offset", "count").select(
        "*",
        F.max(F.col("offset") + F.col("count")).over(before).alias("processed_until"),
    )
    bad = swept.where(
        F.col("offset").isNotNull()
        & (F.col("offset") < F.col("processed_until"))
        & (F.col("offset") < F.col("committed"))
    )
    below = F.least(F.col("offset") + F.col("count"), F.col("committed"), F.col("processed_until"))
    return _violation(
        bad,
        "duplicate_below_commit",
        F.col("ts"),
        F.col("proc"),
        F.col("member_id"),
        below - F.col("offset"),
        F.struct(*_WHO, "offset", "count", "committed", "processed_until"),
    )


def state_records(control: DataFrame) -> int | None:
    """A partition's state in records (the run's ``state_records`` setting; None: all)."""
    row = (
        control.where(F.col("event") == "run_started")
        .orderBy("ts")
        .select(F.get_json_object("settings", "$.state_records").cast("long").alias("n"))
        .first()
    )
    return None if row is None or row["n"] is None else int(row["n"])


_RESTORE = ("ts", "seq", "proc", "topic", "partition")  # one restore_started


def killed_owners(control: DataFrame, processed: DataFrame) -> DataFrame:
    """Per restore (``_RESTORE``): ``killed_until``, how far the partition's previous owner
    (the last process that processed it) had processed it, when that process was killed
    after its last record and before the restore; no row otherwise. A commit it made just
    before the kill may be missing from the log (the coordinator stored it, the
    ``committed`` line was never written), but it cannot be above what it processed."""
    restores = control.where(F.col("event") == "restore_started").select(*_RESTORE)
    last = (
        restores.alias("r")
        .join(
            processed.alias("p"),
            (F.col("r.topic") == F.col("p.topic"))
            & (F.col("r.partition") == F.col("p.partition"))
            & (F.col("p.ts") < F.col("r.ts")),
        )
        .groupBy(*[F.col(f"r.{k}").alias(k) for k in _RESTORE])
        .agg(
            F.max(
                F.struct(
                    F.col("p.ts").alias("at"),
                    F.col("p.proc").alias("owner"),
                    (F.col("p.offset") + F.col("p.count")).alias("until"),
                )
            ).alias("last")
        )
    )
    kills = control.where((F.col("event") == "fault") & (F.col("action") == "kill")).select(
        F.col("target").alias("owner"), F.col("ts").alias("killed")
    )
    return (
        last.join(
            kills,
            (F.col("last.owner") == kills["owner"])
            & (kills["killed"] >= F.col("last.at"))
            & (kills["killed"] <= last["ts"]),
        )
        .groupBy(*[last[k] for k in _RESTORE])
        .agg(F.max("last.until").alias("killed_until"))
    )


def restores_not_from_commit(
    control: DataFrame, accepted: DataFrame, processed: DataFrame, bound: int | None = None
) -> DataFrame:
    """Restores not rebuilt up to the commit (``bound``: a state's size in records). A
    restore up to an offset above the last logged commit is accepted after its previous
    owner was killed, up to what that owner had processed (``killed_owners``)."""
    restores = control.where(F.col("event") == "restore_started")
    swept = (
        _beside_commits(restores, accepted, "offset", "from_offset", "records")
        .withColumn("committed", F.coalesce(F.col("committed"), F.lit(0)))
        .join(killed_owners(control, processed), list(_RESTORE), "left")
    )
    unlogged = (F.col("offset") > F.col("committed")) & (F.col("offset") <= F.col("killed_until"))
    start = F.coalesce(F.col("from_offset"), F.col("offset"))
    needed = F.greatest(F.col("offset") - start, F.lit(0))
    if bound is not None:
        needed = F.least(needed, F.lit(bound))
    off = F.greatest(
        F.when(unlogged, 0).otherwise(F.abs(F.col("offset") - F.col("committed"))),
        start - F.col("offset"),  # ahead: counted twice
        needed - F.coalesce(F.col("records"), needed),  # a gap: missed
    )
    bad = swept.where((F.col("order") == 1) & (off > 0))
    return _violation(
        bad,
        "restore_not_from_commit",
        F.col("ts"),
        F.col("proc"),
        F.col("member_id"),
        off,
        F.struct(*_WHO, "offset", "committed", "from_offset", "records", "killed_until"),
    )


def violations(
    processed: DataFrame,
    islands: DataFrame,
    runs: DataFrame,
    ownership: DataFrame,
    control: DataFrame,
) -> DataFrame:
    accepted = commits(control)
    return (
        overlaps(islands)
        .unionByName(unowned(processed, ownership))
        .unionByName(commit_backwards(accepted))
        .unionByName(lost(runs))
        .unionByName(duplicates_below_commit(processed, accepted))
        .unionByName(restores_not_from_commit(control, accepted, processed, state_records(control)))
    )
