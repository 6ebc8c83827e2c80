"""The restore-from-commit safety check on hand-made logs: a restore must rebuild a task's
state up to the committed offset, from where its local state starts (``from_offset``):
a state ahead of the commit counts records twice, one that replays too few leaves a gap.

Times are ``T0`` plus multiples of 1/16 s (``tests.pipeline.test_pipeline``). member-1
owns ``t-0`` and ``t-1``, processes them from 1.0 to 3.0 s (up to 330), commits 330 and
revokes both; member-2 gets them at 3.25 and restores each up to 330.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from huddle.pipeline.analysis import analyse
from tests.pipeline.test_pipeline import Log, spark

__all__ = ["spark"]  # the fixture
pytestmark = pytest.mark.spark

BOTH = [["t", 0], ["t", 1]]


def restore(log: Log, proc: str, member: str, at: float, part: int, **fields: Any) -> None:
    log.event(proc, at, "restore_started", member_id=member, generation=1, topic="t",
              partition=part, seconds=fields["records"] / 125, **fields)  # fmt: skip


def handover_log(run_dir: Path, settings: dict[str, Any], restores: dict[int, Any]) -> Log:
    log = Log(run_dir)
    log.event("chaos", 0.0, "run_started", scenario="bounce", protocol="cooperative-sticky",
              members=2, partitions=2, settings=settings)  # fmt: skip
    log.event("chaos", 1.0, "steady", generation=1, members=2, settled=True)
    m1, m2 = "member-1", "member-2"
    for pid, proc in enumerate((m1, m2)):
        log.event(proc, 0.0, "process_started", pid=pid, role="member", protocol="x")
    log.event(m1, 0.25, "assigned", member_id="a", generation=1, partitions=BOTH)
    for part in (0, 1):
        restore(log, m1, "a", 0.25, part, offset=0, from_offset=0, records=0)
        log.event(m1, 0.25, "restored", member_id="a", topic="t", partition=part)
        assert log.ticks(m1, "a", "t", part, 1.0, 3.0, 0) == 330
        log.commit(m1, "a", 3.03125, part, 330)
    log.event(m1, 3.0625, "revoked", member_id="a", generation=1, partitions=BOTH)
    log.event(m2, 3.25, "assigned", member_id="b", generation=2, partitions=BOTH)
    for part, (from_offset, records) in restores.items():
        restore(log, m2, "b", 3.25, part, offset=330, from_offset=from_offset, records=records)
        done = 3.25 + records / 128
        log.event(m2, done, "restored", member_id="b", topic="t", partition=part)
        log.ticks(m2, "b", "t", part, done, 6.0, 330)
    log.event("chaos", 6.0, "scenario_finished")
    return log


def restore_violations(spark: SparkSession, log: Log) -> dict[int, tuple[int, dict[str, Any]]]:
    analysis = analyse(spark, log.write(), gap_ms=100.0)
    return {
        v["partition"]: (v["records"], json.loads(v["evidence"]))
        for v in analysis.violations
        if v["type"] == "restore_not_from_commit"
    }


def test_a_restore_from_a_state_ahead_of_the_commit_or_short_of_it_is_a_violation(
    spark: SparkSession, tmp_path: Path
) -> None:
    # t-0: local state at 400, ahead of the commit (330): nothing replayed, 330-399 counted
    # twice; t-1: local state at 100 replays 50 records of the 230 up to 330: 180 missed
    log = handover_log(tmp_path / "a", {"state_records": None}, {0: (400, 0), 1: (100, 50)})
    found = restore_violations(spark, log)
    assert {p: records for p, (records, _) in found.items()} == {0: 70, 1: 180}
    assert (found[0][1]["from_offset"], found[0][1]["committed"]) == (400, 330)
    assert (found[1][1]["from_offset"], found[1][1]["records"]) == (100, 50)
    # a state of the last 50 records: 50 replayed rebuild it whatever came before
    bounded = handover_log(tmp_path / "b", {"state_records": 50}, {0: (330, 0), 1: (100, 50)})
    assert restore_violations(spark, bounded) == {}


def killed_owner_log(run_dir: Path, restored_to: int, *, killed: bool) -> Log:
    """member-1 processes ``t-0`` up to 330, logs a commit of 170, and is SIGKILLed at 3.125
    (or, ``killed`` false, just stops writing): a commit of 330 may have been stored
    without its line. member-2 restores up to ``restored_to`` at 4.0."""
    log = Log(run_dir)
    log.event("chaos", 0.0, "run_started", scenario="death", protocol="cooperative-sticky",
              members=2, partitions=1, settings={})  # fmt: skip
    log.event("chaos", 1.0, "steady", generation=1, members=2, settled=True)
    m1, m2 = "member-1", "member-2"
    for pid, proc in enumerate((m1, m2)):
        log.event(proc, 0.0, "process_started", pid=pid, role="member", protocol="x")
    log.event(m1, 0.25, "assigned", member_id="a", generation=1, partitions=[["t", 0]])
    restore(log, m1, "a", 0.25, 0, offset=0, from_offset=0, records=0)
    assert log.ticks(m1, "a", "t", 0, 1.0, 3.0, 0) == 330
    log.commit(m1, "a", 2.0, 0, 170)
    if killed:
        log.event("chaos", 3.125, "fault", action="kill", target=m1, detail="SIGKILL")
    log.event(m2, 4.0, "assigned", member_id="b", generation=2, partitions=[["t", 0]])
    restore(log, m2, "b", 4.0, 0, offset=restored_to, from_offset=0, records=restored_to)
    log.ticks(m2, "b", "t", 0, 6.0, 8.0, restored_to)
    log.event("chaos", 8.0, "scenario_finished")
    return log


def test_a_restore_up_to_a_commit_a_killed_owner_did_not_log_is_not_a_violation(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The ``committed`` line is written after the commit returns: a SIGKILL in between
    leaves the log one commit behind the coordinator. The next owner's restore up to what
    the killed owner had processed is accepted; beyond it, or without a kill, it is not."""
    found = restore_violations(spark, killed_owner_log(tmp_path / "a", 330, killed=True))
    assert found == {}
    beyond = restore_violations(spark, killed_owner_log(tmp_path / "b", 400, killed=True))
    assert beyond[0][0] == 230  # 400 against the logged 170
    assert beyond[0][1]["killed_until"] == 330
    alive = restore_violations(spark, killed_owner_log(tmp_path / "c", 330, killed=False))
    assert alive[0][0] == 160
