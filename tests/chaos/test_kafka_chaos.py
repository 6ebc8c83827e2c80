"""Whole chaos runs whose members are real Kafka consumers on the Kafka listener: the same
faults, the same event files as huddle's own members."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from huddle.chaos import events as ev
from huddle.chaos.eventfiles import problems, read_events
from huddle.chaos.harness import RunSettings, run
from huddle.chaos.kafka_workers import launch
from huddle.chaos.procs import pid_alive
from huddle.chaos.scenarios import Shape, built_in
from huddle.pipeline.defaults import DEFAULT_GAP_MS

pytestmark = pytest.mark.e2e  # a coordinator, a producer and real consumer processes

DURATION_S = 8.0


def require(client: str) -> None:
    reason = launch.missing(client)
    if reason is None:
        return
    if os.environ.get("HUDDLE_REQUIRE_KAFKA_CLIENTS") == "1":
        pytest.fail(f"HUDDLE_REQUIRE_KAFKA_CLIENTS=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def _spacing(records: list[dict[str, object]]) -> float:
    """The median time between a member's consecutive reads of one partition."""
    last: dict[object, float] = {}
    gaps = []
    for r in records:
        if r["event"] != ev.PROCESSED:
            continue
        ts = float(r["ts"])  # type: ignore[arg-type]
        if r["partition"] in last:
            gaps.append(ts - last[r["partition"]])
        last[r["partition"]] = ts
    return statistics.median(gaps)


@pytest.mark.parametrize(
    ("client", "protocol"),
    [
        ("kafka-python", "cooperative-sticky"),
        ("aiokafka", "range"),
        ("confluent-kafka", "cooperative-sticky"),
    ],
)
def test_a_kill_run_with_kafka_clients_writes_the_workers_events(
    tmp_path: Path, client: str, protocol: str
) -> None:
    require(client)
    settings = RunSettings(run_dir=tmp_path, client=client, protocol=protocol, duration=DURATION_S)
    lines: list[str] = []
    result = run(settings, built_in("process-death", Shape(DURATION_S, 3)), lines.append)

    assert result.outcome == "completed", lines[-5:]
    assert not [pid for pid in result.pids if pid_alive(pid)], "every child is gone"
    assert any(f"3 {client} members" in line for line in lines)
    events = tmp_path / "events"
    chaos = read_events(events / "chaos.jsonl")
    assert (chaos[0]["event"], chaos[0]["client"]) == (ev.RUN_STARTED, client)
    # every member told each generation it joined, so the harness saw the group settle
    # (kafka-python calls no listener in a generation that brings it nothing new, and
    # confluent-kafka tells a generation only in its serialized group metadata)
    steady = [r for r in chaos if r["event"] == ev.STEADY]
    assert [s["settled"] for s in steady] == [True]
    faults = [(r["action"], r["target"]) for r in chaos if r["event"] == ev.FAULT]
    assert faults == [("kill", "member-2"), ("start", "member-2")]
    for name in ("member-1", "member-2", "member-3"):
        records = read_events(events / f"{name}.jsonl")
        assert problems(records, name) == [], name
        kinds = [r["event"] for r in records]
        assert kinds.count(ev.PROCESS_STARTED) == (2 if name == "member-2" else 1), name
        assert ev.JOINED in kinds, name
        assert ev.ASSIGNED in kinds, name
        assert any(r["event"] == ev.COMMITTED and r["accepted"] for r in records), name
        # records are read as they come, not in batches spaced wider than the report's
        # gap (confluent-kafka's consume() waited up to 200 ms for a batch to fill)
        assert _spacing(records) < DEFAULT_GAP_MS / 1000, name
    survivor = read_events(events / "member-1.jsonl")
    # stopped by the harness's SIGTERM at the end: the client closed, the line was written
    assert (survivor[-1]["event"], survivor[-1]["reason"]) == (ev.PROCESS_STOPPED, "signal")
    processed = [r for r in survivor if r["event"] == ev.PROCESSED]
    assert {r["member_id"] for r in processed} <= {
        r["member_id"] for r in survivor if r["event"] == ev.ASSIGNED
    }, "every batch is stamped with a member id the member was assigned under"


def test_network_faults_reach_kafka_clients_through_the_proxy(tmp_path: Path) -> None:
    """The Kafka listener advertises the fault proxy, so the clients' connections after
    bootstrap (to the broker Metadata names) go through it too: a drop finds every member's
    connections (without the advertised address it found none), and the run stays safe
    enough to end cleanly."""
    require("kafka-python")
    settings = RunSettings(run_dir=tmp_path, client="kafka-python", duration=DURATION_S)
    lines: list[str] = []
    result = run(settings, built_in("network-faults", Shape(DURATION_S, 3)), lines.append)

    assert result.outcome == "completed", lines[-5:]
    assert any("connected to the fault proxy" in line for line in lines)
    chaos = read_events(tmp_path / "events" / "chaos.jsonl")
    assert chaos[0]["settings"]["proxy"] is True
    drops = [r["detail"] for r in chaos if r["event"] == ev.FAULT and r["action"] == "net_drop"]
    [detail] = drops
    assert int(detail.split()[1]) >= 3, detail  # "dropped N connections"
    for name in ("member-1", "member-2", "member-3"):
        records = read_events(tmp_path / "events" / f"{name}.jsonl")
        assert problems(records, name) == [], name
        assert any(r["event"] == ev.PROCESSED for r in records), name


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_kafka_consumers_keep_their_generation_through_coordinator_failover(
    tmp_path: Path, client: str
) -> None:
    """A cluster scenario with Kafka clients: three nodes, each with a Kafka listener; the
    group's node is killed, then the next one frozen past its lease. With a session longer
    than the freeze, no member joins again: the group stays in the generation it settled
    in (docs/kafka.md, "In a cluster")."""
    require(client)
    duration = 20.0
    settings = RunSettings(
        run_dir=tmp_path,
        client=client,
        protocol="range",
        duration=duration,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1_000,
    )
    lines: list[str] = []
    result = run(settings, built_in("coordinator-failover", Shape(duration, 3)), lines.append)

    assert result.outcome == "completed", lines[-5:]
    chaos = read_events(tmp_path / "events" / "chaos.jsonl")
    faults = [r for r in chaos if r["event"] == ev.FAULT]
    assert [r["action"] for r in faults] == ["owner_kill", "owner_stop", "owner_cont"]
    healed = faults[-1]["ts"]
    [steady] = [r for r in chaos if r["event"] == ev.STEADY]
    for name in ("member-1", "member-2", "member-3"):
        records = read_events(tmp_path / "events" / f"{name}.jsonl")
        assert problems(records, name) == [], name
        later = [r for r in records if r["event"] == ev.JOINED and r["ts"] > steady["ts"]]
        assert {r["generation"] for r in later} <= {steady["generation"]}, name
        # still in the group after the last fault: its commits are accepted
        assert any(
            r["event"] == ev.COMMITTED and r["accepted"] and r["ts"] > healed for r in records
        ), name
