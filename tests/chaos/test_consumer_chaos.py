"""The ``consumer`` protocol (KIP-848) in the chaos harness: confluent-kafka consumers with
``group.protocol=consumer`` on the Kafka listener, through the same scenarios and event
files; the run's session timeout and heartbeat interval are the coordinator's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench import handovers
from huddle.chaos import clients
from huddle.chaos import events as ev
from huddle.chaos.eventfiles import problems, read_events
from huddle.chaos.harness import RunSettings, run
from huddle.chaos.kafka_member import driver_options
from huddle.chaos.kafka_workers import brokers
from huddle.chaos.protocols import protocol_names
from huddle.chaos.scenarios import Scenario, ScenarioError, Shape, Step, built_in
from huddle.chaos.worker import WorkerSettings
from huddle.cli import parse_args
from tests.chaos.test_kafka_chaos import require

SHAPE = Shape(duration=10.0, members=3)
CLIENT = "confluent-kafka"


def _settings(tmp_path: Path, **change: object) -> RunSettings:
    settings = RunSettings(run_dir=tmp_path, client=CLIENT, protocol="consumer")
    return dataclasses.replace(settings, **change)  # type: ignore[arg-type]


def test_consumer_is_a_chaos_protocol_of_confluent_kafka(tmp_path: Path) -> None:
    assert "consumer" in protocol_names()
    args = parse_args(
        ["chaos", "run", "rolling-bounce", "--client", CLIENT, "--protocol", "consumer"]
    )
    assert (args.client, args.protocol) == (CLIENT, "consumer")
    assert clients.consumer_clients() == [CLIENT]
    worker = WorkerSettings(
        bootstrap="127.0.0.1:9092", name="m", run_dir="r", client=CLIENT, protocol="consumer"
    )
    assert driver_options(worker).strategy == "consumer"
    # no group-wide generation: the progress lines say what the members tell
    assert clients.generation_word("consumer") == "epoch"
    assert clients.generation_word("cooperative-sticky") == "generation"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"client": "huddle"}, "its members are Kafka consumers .*--client confluent-kafka"),
        ({"client": "kafka-python"}, "no protocol 'consumer'"),
    ],
)
def test_a_client_without_the_consumer_protocol_is_refused(
    tmp_path: Path, change: dict[str, object], why: str
) -> None:
    with pytest.raises(ScenarioError, match=why):
        clients.check(_settings(tmp_path, **change), built_in("rolling-bounce", SHAPE))


def test_the_runs_session_timeout_and_heartbeat_are_the_coordinators(tmp_path: Path) -> None:
    """A consumer-protocol member sends no session timeout: without these flags it would
    be fenced after the coordinator's default 45 s, not the run's."""
    flags = clients.listener_flags(
        9093, _settings(tmp_path, session_timeout_ms=2_000, heartbeat_interval_ms=250)
    )
    pairs = dict(zip(flags[::2], flags[1::2], strict=True))
    assert pairs["--consumer-session-timeout-ms"] == "2000"
    assert pairs["--consumer-heartbeat-interval-ms"] == "250"
    assert pairs["--kafka-port"] == "9093"


@pytest.mark.parametrize(
    ("change", "scenario", "why"),
    [
        ({"bootstrap": "127.0.0.1:9"}, "rolling-bounce", "needs --kafka-bootstrap"),
        (
            {"bootstrap": "127.0.0.1:9", "kafka_bootstrap": "127.0.0.1:10"},
            "network-faults",
            "the fault proxy needs the harness's own coordinator",
        ),
        ({"kafka_bootstrap": "127.0.0.1:10"}, "rolling-bounce", "with --bootstrap"),
        (
            {
                "client": "huddle",
                "protocol": "range",
                "bootstrap": "127.0.0.1:9",
                "kafka_bootstrap": "127.0.0.1:10",
            },
            "rolling-bounce",
            "for Kafka-client members",
        ),
    ],
)
def test_a_running_coordinator_is_named_with_its_kafka_listener(
    tmp_path: Path, change: dict[str, object], scenario: str, why: str
) -> None:
    with pytest.raises(ScenarioError, match=why):
        clients.check(_settings(tmp_path, **change), built_in(scenario, SHAPE))
    both = _settings(tmp_path, bootstrap="127.0.0.1:9", kafka_bootstrap="127.0.0.1:10")
    clients.check(both, built_in("rolling-bounce", SHAPE))


def _well_formed(run_dir: Path, names: tuple[str, ...]) -> list[dict[str, object]]:
    chaos = read_events(run_dir / "events" / "chaos.jsonl")
    assert [s["settled"] for s in chaos if s["event"] == ev.STEADY] == [True]
    for name in names:
        assert problems(read_events(run_dir / "events" / f"{name}.jsonl"), name) == [], name
    return chaos


@pytest.mark.e2e
def test_a_killed_consumer_protocol_members_partitions_are_owned_again_after_its_session(
    tmp_path: Path,
) -> None:
    """The harness's own coordinator, told the run's 2 s session: the survivors own the
    killed member's partitions before it is started again 3 s later (the coordinator's
    default session, 45 s, would keep them unowned till then), and no partition is owned
    by two members at once as they tell it."""
    require(CLIENT)
    duration = 10.0
    settings = _settings(
        tmp_path, duration=duration, session_timeout_ms=2_000, heartbeat_interval_ms=250
    )
    lines: list[str] = []
    result = run(settings, built_in("process-death", Shape(duration, 3)), lines.append)

    assert result.outcome == "completed", lines[-5:]
    assert any("group settled at epoch" in line for line in lines)  # no generation here
    _well_formed(tmp_path, ("member-1", "member-2", "member-3"))
    records = handovers.run_events(tmp_path)
    t = handovers.timeline(records)
    killed = handovers.kill(t)
    assert killed is not None
    assert killed.owned > 0
    assert killed.never == 0
    restarted = next(
        float(f["ts"]) - float(t.faults[0]["ts"]) for f in t.faults if f["action"] == "start"
    )
    assert max(killed.seconds) < restarted
    assert handovers.twice_seconds(t) == 0.0
    epochs = [r["generation"] for r in records if r["event"] == ev.JOINED]
    assert epochs  # member epochs, as the members tell them
    assert all(e > 0 for e in epochs)


@pytest.mark.e2e
def test_a_consumer_protocol_join_on_a_running_coordinator_stops_no_one_elses_partitions(
    tmp_path: Path,
) -> None:
    """``--bootstrap`` with ``--kafka-bootstrap``: the harness uses a running coordinator's
    Kafka listener. A member that joins takes its share from the others; nobody stops a
    partition that does not go to it."""
    require(CLIENT)
    duration = 6.0
    flags = [*clients.consumer_flags(_settings(tmp_path)), "--initial-rebalance-delay-ms", "0"]
    joins = Scenario("a-join", steps=(Step(1.5, "scale_up", value=1),))
    with brokers.huddle(tmp_path, *flags) as server:
        settings = _settings(
            tmp_path / "run",
            members=2,
            duration=duration,
            partitions=6,
            bootstrap=f"{server.host}:{server.huddle_port}",
            kafka_bootstrap=server.bootstrap,
        )
        lines: list[str] = []
        result = run(settings, joins, lines.append)

    assert result.outcome == "completed", lines[-5:]
    assert any("its Kafka listener" in line for line in lines)
    _well_formed(tmp_path / "run", ("member-1", "member-2", "member-3"))
    records = handovers.run_events(tmp_path / "run")
    t = handovers.timeline(records)
    joined = handovers.join(t, records)
    assert joined is not None
    assert joined.member == "member-3"
    assert joined.share_s is not None
    assert (joined.given, joined.disturbed) == (joined.share, 0)
    assert handovers.twice_seconds(t) == 0.0
