"""The demo's real-client run: which run it adds, or the line that says why it adds none."""

from __future__ import annotations

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
