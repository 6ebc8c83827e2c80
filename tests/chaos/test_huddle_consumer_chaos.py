"""huddle's own members on the consumer protocol (KIP-848) in the chaos harness:
``Member(group_protocol="consumer")`` through the same scenarios and event files, the
run's session timeout and heartbeat interval given to the coordinator; and
``consumer-deferred``/``consumer-paced``, the protocol with huddle's server assignors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import pytest

from bench import handovers
from huddle.chaos import clients
from huddle.chaos import events as ev
from huddle.chaos.eventfiles import problems, read_events
from huddle.chaos.events import EventLog
from huddle.chaos.harness import RunSettings, run
from huddle.chaos.kafka_member import driver_options
from huddle.chaos.kafka_workers.confluent_driver import config
from huddle.chaos.protocols import ProtocolOptions, protocol_names
from huddle.chaos.scenarios import ScenarioError, Shape, built_in
from huddle.chaos.worker import Worker, WorkerSettings
from huddle.chaos.worker_offsets import ConsumerOffsets
from huddle.cli import parse_args
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import FencedMemberEpochError
from huddle.protocol.messages import OffsetCommitRequest, OffsetCommitResponse

SHAPE = Shape(duration=10.0, members=3)


def _settings(tmp_path: Path, **change: object) -> RunSettings:
    settings = RunSettings(run_dir=tmp_path, protocol="consumer")
    return dataclasses.replace(settings, **change)  # type: ignore[arg-type]


def _flags(settings: RunSettings) -> dict[str, str]:
    flags = clients.consumer_flags(settings)
    return dict(zip(flags[::2], flags[1::2], strict=True))


def test_the_consumer_protocols_are_chaos_protocols_of_huddles_members(tmp_path: Path) -> None:
    assert {"consumer", "consumer-deferred", "consumer-paced"} <= set(protocol_names())
    args = parse_args(["chaos", "run", "rolling-bounce", "--protocol", "consumer-deferred"])
    assert (args.client, args.protocol) == ("huddle", "consumer-deferred")
    for protocol in ("consumer", "consumer-deferred", "consumer-paced"):
        clients.check(_settings(tmp_path, protocol=protocol), built_in("rolling-bounce", SHAPE))
        assert clients.generation_word(protocol) == "epoch"
        assert clients.huddle_consumer(_settings(tmp_path, protocol=protocol))
    assert not clients.huddle_consumer(_settings(tmp_path, protocol="cooperative-sticky"))


def test_the_run_gives_the_coordinator_its_timers_and_the_asked_assignor_first(
    tmp_path: Path,
) -> None:
    flags = _flags(_settings(tmp_path, session_timeout_ms=2_000, heartbeat_interval_ms=250))
    assert flags["--consumer-session-timeout-ms"] == "2000"
    assert flags["--consumer-heartbeat-interval-ms"] == "250"
    assert flags["--consumer-assignors"] == "uniform,range,deferred,paced"
    deferred = _flags(_settings(tmp_path, protocol="consumer-deferred"))
    assert deferred["--consumer-assignors"] == "deferred,uniform,range,paced"
    assert "--consumer-deferred-hold-ms" not in deferred
    held = _settings(tmp_path, protocol="consumer-deferred", options=ProtocolOptions(delay_ms=4000))
    assert _flags(held)["--consumer-deferred-hold-ms"] == "4000"
    paced = _flags(_settings(tmp_path, protocol="consumer-paced"))
    assert paced["--consumer-assignors"].split(",")[0] == "paced"


def test_a_kafka_consumer_asks_for_the_protocols_server_assignor(tmp_path: Path) -> None:
    def conf(protocol: str) -> dict[str, object]:
        worker = WorkerSettings(
            bootstrap="127.0.0.1:9092",
            name="m",
            run_dir="r",
            client="confluent-kafka",
            protocol=protocol,
        )
        return dict(config(driver_options(worker)))

    assert conf("consumer-deferred")["group.remote.assignor"] == "deferred"
    assert conf("consumer-paced")["group.protocol"] == "consumer"
    assert "group.remote.assignor" not in conf("consumer")  # the coordinator's default


def test_the_worker_runs_a_consumer_protocol_member(tmp_path: Path) -> None:
    args = WorkerSettings(
        bootstrap="127.0.0.1:9", name="m", run_dir=str(tmp_path), protocol="consumer-deferred"
    )
    with EventLog(tmp_path / "m.jsonl", "m") as events:
        member = Worker(args, events).make_member()
    assert member.rebalance_protocol == "consumer"
    classic = msgspec.structs.replace(args, protocol="cooperative-sticky")
    with EventLog(tmp_path / "c.jsonl", "c") as events:
        assert Worker(classic, events).make_member().rebalance_protocol == "cooperative"


@pytest.mark.parametrize(
    ("scenario", "change", "why"),
    [
        ("coordinator-restart", {}, "does not reconnect to a restarted or failed-over"),
        ("coordinator-failover", {}, "does not reconnect to a restarted or failed-over"),
        ("network-faults", {}, "does not reconnect after a cut connection"),
        ("rolling-bounce", {"stateful": True}, "no standby tasks"),
        (
            "rolling-bounce",
            {"protocol": "consumer-deferred", "bootstrap": "127.0.0.1:9"},
            "makes deferred its default",
        ),
    ],
)
def test_what_huddles_consumer_member_cannot_do_yet_is_refused(
    tmp_path: Path, scenario: str, change: dict[str, object], why: str
) -> None:
    with pytest.raises(ScenarioError, match=f"{why}.*--client confluent-kafka"):
        clients.check(_settings(tmp_path, **change), built_in(scenario, SHAPE))


def _well_formed(run_dir: Path, names: tuple[str, ...]) -> list[dict[str, object]]:
    chaos = read_events(run_dir / "events" / "chaos.jsonl")
    assert [s["settled"] for s in chaos if s["event"] == ev.STEADY] == [True]
    rows = []
    for name in names:
        member = read_events(run_dir / "events" / f"{name}.jsonl")
        assert problems(member, name) == [], name
        rows += member
    commits = [r for r in rows if r["event"] == ev.COMMITTED]
    assert commits
    assert all(r["accepted"] for r in commits), [r for r in commits if not r["accepted"]][:3]
    return chaos


@pytest.mark.e2e
def test_a_killed_huddle_consumer_members_partitions_are_owned_again_after_its_session(
    tmp_path: Path,
) -> None:
    """The coordinator is told the run's 2 s session: the survivors own the killed
    member's partitions before it is started again 3 s later (the coordinator's default
    session, 45 s, would keep them unowned till then)."""
    settings = _settings(
        tmp_path, duration=10.0, session_timeout_ms=2_000, heartbeat_interval_ms=250
    )
    lines: list[str] = []
    result = run(settings, built_in("process-death", Shape(10.0, 3)), lines.append)

    assert result.outcome == "completed", lines[-5:]
    assert any("started 3 huddle members" in line for line in lines)
    assert any("group settled at epoch" in line for line in lines)
    _well_formed(tmp_path, ("member-1", "member-2", "member-3"))
    records = handovers.run_events(tmp_path)
    t = handovers.timeline(records)
    killed = handovers.kill(t)
    assert killed is not None
    assert (killed.owned > 0, killed.never) == (True, 0)
    restarted = next(
        float(f["ts"]) - float(t.faults[0]["ts"]) for f in t.faults if f["action"] == "start"
    )
    assert max(killed.seconds) < restarted
    assert handovers.twice_seconds(t) == 0.0


@pytest.mark.e2e
def test_the_deferred_server_assignor_holds_a_bounced_members_partitions(
    tmp_path: Path,
) -> None:
    """``consumer-deferred``: each bounced member's partitions wait for it (it comes back
    as a new member, which is given them) and go to no one else: no partition moves from
    one running member to another, and none is owned twice."""
    lines: list[str] = []
    result = run(
        _settings(tmp_path, protocol="consumer-deferred"),
        built_in("rolling-bounce", SHAPE),
        lines.append,
    )

    assert result.outcome == "completed", lines[-5:]
    _well_formed(tmp_path, ("member-1", "member-2", "member-3"))
    t = handovers.timeline(handovers.run_events(tmp_path))
    assert handovers.moves(t) == 0
    assert handovers.twice_seconds(t) == 0.0


class _Owner:
    assignment = frozenset({TopicPartition("t", 0)})


class _Conn:
    def __init__(self) -> None:
        self.sent: list[object] = []

    async def call(self, request: object, expect: type[object], **_: object) -> object:
        self.sent.append(request)
        return OffsetCommitResponse()


async def test_a_consumer_member_commits_only_what_it_owns() -> None:
    """Its commits are not fenced by the coordinator (no member epoch on huddle's wire's
    OffsetCommit): the worker sends none that names a partition the member does not own."""
    conn = _Conn()
    offsets = ConsumerOffsets(conn, "g", _Owner())  # type: ignore[arg-type]
    with pytest.raises(FencedMemberEpochError, match="no longer owns"):
        await offsets.commit({TopicPartition("t", 0): 5, TopicPartition("t", 1): 7})
    assert conn.sent == []
    await offsets.commit({TopicPartition("t", 0): 5})
    [request] = conn.sent
    assert isinstance(request, OffsetCommitRequest)
    assert (request.generation_id, request.member_id) == (-1, "")
    assert [(t.name, [(p.partition, p.offset) for p in t.partitions]) for t in request.topics] == [
        ("t", [(0, 5)])
    ]
