"""Restores on a hand-made event log with known answers: a finished restore, one cut short
by a revocation (its ``restore_stopped`` says what it replayed), one cut short by its
member's death (it writes nothing more), and warm-ups that are not restores.

Times are ``T0`` plus multiples of 1/16 s (``tests.pipeline.test_pipeline``). A partition's
state is 250 records, rebuilt at 125 records/s: 2 s. member-1 owns ``t-0``, ``t-1`` and
``t-2`` from 0.25 s, processes them from 1.0 to 3.0 s, commits 330 and revokes all three at
3.0625; at 3.25 each goes to a member without its state, which starts a 2 s restore:

- ``t-0``, member-2: finishes at 5.25 and processes (250 records replayed);
- ``t-1``, member-3: revoked at 3.75, 0.5 s into it (62 records replayed, as its
  ``restore_stopped`` says); member-1 gets it back at 4.0 and resumes (its state is there);
- ``t-2``, member-4: its last event is at 4.25, then it is SIGKILLed, 1 s into its
  restore (125 records replayed at its pace); member-1 gets ``t-2`` back at 5.0.

member-4 is also given warm-up replicas (no events: a warm-up catches up in the
background and never stops processing).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from huddle.pipeline.report import write_report
from tests.pipeline.test_pipeline import NO_VIOLATIONS, T0, Log, run, spark

__all__ = ["spark"]  # the fixture
pytestmark = pytest.mark.spark

STATE = 250  # records
REBUILD_S = 2.0  # at 125 records/s


def restores_log(run_dir: Path) -> Log:
    log = Log(run_dir)
    log.event("chaos", 0.0, "run_started", scenario="bounce", protocol="range", members=4)
    log.event("chaos", 1.0, "steady", generation=1, members=4, settled=True)
    m1 = "member-1"
    parts = [["t", 0], ["t", 1], ["t", 2]]
    log.event(m1, 0.0, "process_started", pid=1, role="member", protocol="range")
    log.event(m1, 0.25, "assigned", member_id="a", generation=1, partitions=parts)

    def restore(proc: str, member: str, at: float, part: int, records: int) -> None:
        offset = 0 if at < 1 else 330  # the committed offset
        log.event(proc, at, "restore_started", member_id=member, generation=2, topic="t",
                  partition=part, offset=offset, from_offset=max(offset - records, 0),
                  records=records, seconds=records / 125)  # fmt: skip

    for part in (0, 1, 2):
        restore(m1, "a", 0.25, part, 0)
        log.event(m1, 0.25, "restored", member_id="a", topic="t", partition=part)
        assert log.ticks(m1, "a", "t", part, 1.0, 3.0, 0) == 330
        log.commit(m1, "a", 3.03125, part, 330)
    log.event(m1, 3.0625, "revoked", member_id="a", generation=1, partitions=parts)
    for part, proc in enumerate(("member-2", "member-3", "member-4")):
        member = proc[-1]
        log.event(proc, 0.0, "process_started", pid=2 + part, role="member", protocol="range")
        log.event(proc, 3.25, "assigned", member_id=member, generation=2, partitions=[parts[part]])
        restore(proc, member, 3.25, part, STATE)
    # t-0: restored on member-2 after 2 s
    log.event("member-2", 5.25, "restored", member_id="2", topic="t", partition=0)
    log.ticks("member-2", "2", "t", 0, 5.25, 8.0, 330)
    # t-1: revoked from member-3 0.5 s into its restore; back to member-1
    log.event("member-3", 3.75, "revoked", member_id="3", generation=2, partitions=[parts[1]])
    log.event("member-3", 3.75, "restore_stopped", member_id="3", topic="t", partition=1,
              offset=330, records=62)  # fmt: skip
    log.event(m1, 4.0, "assigned", member_id="a", generation=3, partitions=[parts[1]])
    restore(m1, "a", 4.0, 1, 0)
    log.event(m1, 4.0, "restored", member_id="a", topic="t", partition=1)
    log.ticks(m1, "a", "t", 1, 4.0, 8.0, 330)
    # t-2: member-4 (warming up t-0 and t-1 too: no events) dies 1 s into its restore
    log.event("member-4", 4.25, "joined", member_id="4", generation=3, leader=False)
    log.event("chaos", 4.5, "fault", action="kill", target="member-4")
    log.event(m1, 5.0, "assigned", member_id="a", generation=4, partitions=[parts[2]])
    restore(m1, "a", 5.0, 2, 0)
    log.event(m1, 5.0, "restored", member_id="a", topic="t", partition=2)
    log.ticks(m1, "a", "t", 2, 5.0, 8.0, 330)
    log.event("chaos", 8.0, "scenario_finished")
    return log


def test_records_restored_counts_what_was_replayed_not_what_was_planned(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A finished restore counts all its records, one cut by a revocation what its
    ``restore_stopped`` says, one cut by its member's death what it replayed up to its last
    event at its pace; 750 records were planned, 437 replayed."""
    analysis, summary = run(spark, restores_log(tmp_path / "restores"))
    assert (summary.window.start, summary.window.end) == (T0 + 1.0, T0 + 8.0)
    assert summary.records_restored == 250 + 62 + 125
    rebuilt = [r for r in analysis.restores if r["records"]]
    assert [(r["proc"], r["records"], r["replayed"], r["finished"]) for r in rebuilt] == [
        ("member-2", STATE, STATE, True),
        ("member-3", STATE, 62, False),
        ("member-4", STATE, 125, False),
    ]
    assert (summary.restores, summary.restores_cut) == (3, 2)
    assert summary.restore_seconds == REBUILD_S + 0.5 + 1.0
    assert summary.violations == NO_VIOLATIONS
    write_report(analysis)
    text = (analysis.run_dir / "report" / "report.md").read_text()
    assert "| state records restored (replayed) | 437 |" in text
    assert "| restores cut short, of those with state to rebuild | 2 of 3 |" in text


def test_a_member_killed_mid_restore_restores_until_its_last_event_then_it_is_unowned(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``t-2``'s restore on member-4 counts as restoring until member-4's last event (3.25 to
    4.25), and the rest, until member-1 owns it again at 5.0, as unowned; warm-ups write
    no restore and stop nothing."""
    _, summary = run(spark, restores_log(tmp_path / "killed"))
    t2 = summary.per_partition["t-2"]
    assert (t2.restoring_seconds, t2.unowned_seconds) == (1.0, 0.1875 + 0.75)
    t1 = summary.per_partition["t-1"]  # cut by a revocation: 3.25-3.75, then unowned to 4.0
    assert (t1.restoring_seconds, t1.unowned_seconds) == (0.5, 0.1875 + 0.25)
    t0 = summary.per_partition["t-0"]
    assert (t0.restoring_seconds, t0.unowned_seconds) == (REBUILD_S, 0.1875)
    assert summary.restoring_partition_seconds == 3.5
    assert summary.stopped_partition_seconds == 3.5 + 0.1875 * 3 + 0.25 + 0.75
    assert (summary.partitions_moved, summary.partitions_returned) == (5, 0)
