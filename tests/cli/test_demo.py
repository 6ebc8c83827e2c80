"""The demo's real-client run: which run it adds, or the line that says why it adds none."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from huddle.cli import demo


def test_the_demo_adds_a_short_kill_run_of_real_kafka_consumers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "missing", lambda client: None)
    runs, notes = demo.kafka_run("kafka-python", tmp_path)
    assert notes == []
    [(label, settings, scenario)] = runs
    assert "kafka-python" in label
    assert (settings.client, settings.protocol, settings.run_dir) == (
        "kafka-python",
        "cooperative-sticky",
        tmp_path / "kafka-python",
    )
    assert settings.duration <= 15  # the demo's time: this run adds well under a minute
    assert [s.action for s in scenario.steps] == ["kill", "start"]


def test_a_kafka_client_not_installed_is_left_out_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "missing", lambda client: f"{client} is not installed")
    assert demo.kafka_run("aiokafka", tmp_path) == (
        [],
        ["no run with a real Kafka client: aiokafka is not installed"],
    )
    assert demo.kafka_run("none", tmp_path)[0] == []


def test_a_client_without_a_cooperative_protocol_runs_its_eager_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "missing", lambda client: None)
    [(_, settings, _)] = demo.kafka_run("aiokafka", tmp_path)[0]
    assert settings.protocol == "range"


def demo_args(tmp_path: Path) -> argparse.Namespace:
    from huddle.cli import parse_args

    return parse_args(["demo", "--run-dir", str(tmp_path)])


def test_the_demo_runs_each_protocol_where_its_design_should_show(tmp_path: Path) -> None:
    runs = demo.plan(demo_args(tmp_path), tmp_path)
    pairs = [(scenario.name, settings.protocol, scenario.static) for _, settings, scenario in runs]
    assert pairs == [
        ("rolling-bounce", "range", False),
        ("rolling-bounce", "cooperative-sticky", False),
        ("rolling-bounce", "cooperative-deferred", False),
        ("static-bounce", "cooperative-sticky", True),  # static membership, KIP-345
        ("scale-up", "cooperative-sticky", False),
        ("scale-up", "high-availability", False),  # KIP-441's warm-ups and probing
        ("process-death", "cooperative-sticky", False),
        ("process-death", "high-availability", False),  # and its standby
    ]
    dirs = [settings.run_dir for _, settings, _ in runs]
    assert len(set(dirs)) == len(dirs)
    assert all(d.parent == tmp_path for d in dirs)
    # every run has state, and a move costs the same 2 s of rebuilding in each
    assert {(s.stateful, s.rate, s.restore_rate, s.state_records) for _, s, _ in runs} == {
        (True, 50.0, 125.0, 250)
    }
    options = {s.protocol: s.options for _, s, _ in runs}
    ha = options["high-availability"]
    assert ha.num_standby_replicas == 1
    assert (ha.probing_interval_ms or 0) < 15_000 / 5  # warm-ups checked within the run
    assert (ha.acceptable_recovery_lag or 0) < 250  # a member without the state is not caught up
    # Design II holds a bounced member's partitions longer than the bounce lasts
    [(_, deferred, bounce)] = [r for r in runs if r[1].protocol == "cooperative-deferred"]
    stopped = {s.target: s.at for s in bounce.steps if s.action == "sigterm"}
    down = [s.at - stopped[s.target] for s in bounce.steps if s.action == "start"]
    assert len(down) == 4
    assert (deferred.options.delay_ms or 0) / 1000 > max(down) + 5  # and its start-up


def test_the_demo_fits_its_time(tmp_path: Path) -> None:
    """About 5 minutes on two cores: the runs' own time is at most half of it (the rest is
    start-up and stopping, a few seconds a run, the Kafka-client run and the report)."""
    runs = demo.plan(demo_args(tmp_path), tmp_path)
    assert sum(settings.duration for _, settings, _ in runs) <= 150
    assert all(settings.members <= 4 for _, settings, _ in runs)  # 8 at most after scale-up


def test_the_page_says_what_restoring_a_partition_costs() -> None:
    said = " ".join(demo.intro())
    assert "a partition's state takes 2 s to rebuild on a member that did not have it" in said
    assert "last 250 records (5 s of input at 50 records/s)" in said
    assert "holds a departed member's partitions up to 10 s" in said
    assert "1 standby per partition" in said
    assert "each member is started again 0.3 s after it stopped" in said


def test_the_demo_compares_the_consumer_protocol_with_cooperative_of_the_same_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "missing", lambda client: None)
    runs, notes = demo.consumer_runs(True, tmp_path)
    assert notes == []
    assert [(s.client, s.protocol, sc.name) for _, s, sc in runs] == [
        ("confluent-kafka", "cooperative-sticky", "rolling-bounce"),
        ("confluent-kafka", "consumer", "rolling-bounce"),
    ]
    assert len({s.run_dir for _, s, _ in runs}) == 2
    assert all(s.duration <= 15 for _, s, _ in runs)  # the demo's time: under a minute each
    assert demo_args(tmp_path).consumer_protocol is True
    assert demo.consumer_runs(False, tmp_path) == (
        [],
        ["no run of the consumer protocol (--no-consumer-protocol)"],
    )
    monkeypatch.setattr(demo, "missing", lambda client: f"{client} is not installed")
    assert demo.consumer_runs(True, tmp_path)[1] == [
        "no run of the consumer protocol: confluent-kafka is not installed"
    ]
