"""``bench.handovers``: ownership as a run's members tell it, from hand-made event files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import handovers

T = "t"


def ev(ts: float, event: str, proc: str = "chaos", **fields: Any) -> dict[str, Any]:
    return {"ts": ts, "event": event, "proc": proc, **fields}


def tps(*partitions: int) -> list[list[object]]:
    return [[T, p] for p in partitions]


def run(*members: dict[str, Any], finished: float = 20.0) -> list[dict[str, Any]]:
    """A run of 2 partitions: member-1 owns both, member-2 joins at 11 s (its share: 1),
    member-1 is SIGKILLed at 14 s; the window is 10 s to ``finished``."""
    chaos = [
        ev(0.0, "run_started", partitions=2, settings={"topic": T}),
        ev(10.0, "steady", settled=True),
        ev(11.0, "fault", action="start", target="member-2"),
        ev(14.0, "fault", action="kill", target="member-1"),
        ev(finished, "scenario_finished"),
    ]
    return sorted([*chaos, *members], key=lambda r: float(r["ts"]))


COOPERATIVE = run(
    ev(0.5, "process_started", "member-1"),
    ev(1.0, "assigned", "member-1", partitions=tps(0, 1)),
    ev(11.2, "process_started", "member-2"),
    ev(11.5, "revoked", "member-1", partitions=tps(1)),
    ev(12.0, "assigned", "member-2", partitions=tps(1)),
    ev(16.5, "assigned", "member-2", partitions=tps(0)),
)


def test_unowned_time_counts_each_partition_nobody_owned_within_the_window() -> None:
    t = handovers.timeline(COOPERATIVE)
    # partition 1 between its revocation and its assignment, partition 0 from the kill on
    assert handovers.unowned_seconds(t) == pytest.approx(0.5 + 2.5)
    assert handovers.twice_seconds(t) == 0.0
    assert handovers.moves(t) == 2  # partition 1 to the new member, 0 after the kill


def test_a_partition_back_with_its_process_is_no_move() -> None:
    bounced = run(
        ev(0.5, "process_started", "member-1"),
        ev(1.0, "assigned", "member-1", partitions=tps(0, 1)),
        ev(10.5, "revoked", "member-1", partitions=tps(0, 1)),
        ev(10.6, "process_stopped", "member-1"),
        ev(10.9, "process_started", "member-1"),
        ev(11.2, "assigned", "member-1", partitions=tps(0, 1)),
    )
    t = handovers.timeline(bounced)
    assert handovers.moves(t) == 0
    assert handovers.unowned_seconds(t) == pytest.approx(2 * 0.7 + 2 * 6.0)  # and the kill


def test_a_join_is_timed_to_its_share_and_what_it_cost_the_others() -> None:
    t = handovers.timeline(COOPERATIVE)
    joined = handovers.join(t, COOPERATIVE)
    assert joined is not None
    assert (joined.member, joined.share, joined.given, joined.disturbed) == ("member-2", 1, 1, 0)
    assert joined.share_s == pytest.approx(0.8)  # from its process_started


def test_a_join_that_stops_everyones_partitions_is_counted() -> None:
    """Eager: member-1 gives up both partitions and gets one of them back."""
    eager = run(
        ev(0.5, "process_started", "member-1"),
        ev(1.0, "assigned", "member-1", partitions=tps(0, 1)),
        ev(11.2, "process_started", "member-2"),
        ev(11.5, "revoked", "member-1", partitions=tps(0, 1)),
        ev(12.0, "assigned", "member-1", partitions=tps(0)),
        ev(12.0, "assigned", "member-2", partitions=tps(1)),
    )
    joined = handovers.join(handovers.timeline(eager), eager)
    assert joined is not None
    assert (joined.given, joined.disturbed) == (1, 1)


def test_two_members_owning_a_partition_at_once_is_counted() -> None:
    early = [
        {**r, "ts": 11.4} if r["event"] == "assigned" and r["ts"] == 12.0 else r
        for r in COOPERATIVE
    ]
    t = handovers.timeline(sorted(early, key=lambda r: float(r["ts"])))
    assert handovers.twice_seconds(t) == pytest.approx(0.1)  # 11.4 s to the revoke at 11.5 s
    assert handovers.unowned_seconds(t) == pytest.approx(2.5)


def test_a_killed_members_partitions_are_timed_until_another_owns_them() -> None:
    t = handovers.timeline(COOPERATIVE)
    killed = handovers.kill(t)
    assert killed is not None
    assert (killed.victim, killed.owned, killed.never) == ("member-1", 1, 0)
    assert killed.seconds == [pytest.approx(2.5)]
    never = [r for r in COOPERATIVE if not (r["event"] == "assigned" and r["ts"] == 16.5)]
    killed = handovers.kill(handovers.timeline(never))
    assert killed is not None
    assert (killed.seconds, killed.never) == ([], 1)


def test_events_are_read_from_the_run_dir_in_time_order(tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    by_proc: dict[str, list[dict[str, Any]]] = {}
    for r in COOPERATIVE:
        by_proc.setdefault(r["proc"], []).append(r)
    for proc, records in by_proc.items():
        lines = "".join(json.dumps(r) + "\n" for r in records)
        (events / f"{proc}.jsonl").write_text(lines + '{"partial')  # a line being written
    assert handovers.run_events(tmp_path) == COOPERATIVE
    with pytest.raises(ValueError, match="run_started"):
        handovers.timeline(COOPERATIVE[1:])
