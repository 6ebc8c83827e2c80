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
from huddle.cli import parse_args
from huddle.client.admin import Admin
from huddle.client.events import CommitFailedError
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode
from tests.helpers import fast_server_config, running_server

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


LIFTED = ("coordinator-restart", "coordinator-failover", "etcd-faults", "network-faults")


@pytest.mark.parametrize("protocol", ["consumer", "consumer-deferred", "consumer-paced"])
def test_huddles_consumer_member_runs_the_coordinator_cluster_and_network_scenarios(
    tmp_path: Path, protocol: str
) -> None:
    """It reconnects after a lost connection, a coordinator restart and a failover, at its
    epoch: the scenarios that kill, fail over or cut the coordinator are no longer refused,
    nor ``--stateful``; a cluster's nodes get the consumer protocol's timers as the single
    coordinator does (a classic run's get none)."""
    settings = _settings(tmp_path, protocol=protocol)
    for scenario in LIFTED:
        clients.check(settings, built_in(scenario, SHAPE))
    clients.check(_settings(tmp_path, protocol=protocol, stateful=True), built_in("zombie", SHAPE))
    assert clients.node_flags(settings) == clients.consumer_flags(settings)
    assert "--consumer-session-timeout-ms" in clients.node_flags(settings)
    assert clients.node_flags(_settings(tmp_path, protocol="cooperative-sticky")) == []


def test_a_running_coordinator_is_refused_when_the_protocol_asks_a_server_assignor(
    tmp_path: Path,
) -> None:
    """A running coordinator's default server assignor is its own, and huddle's member asks
    for none: ``consumer-deferred`` is refused with ``--bootstrap`` (``consumer`` is not)."""
    running = {"bootstrap": "127.0.0.1:9"}
    clients.check(_settings(tmp_path, **running), built_in("rolling-bounce", SHAPE))
    with pytest.raises(
        ScenarioError, match=r"makes deferred its default.*--client confluent-kafka"
    ):
        clients.check(
            _settings(tmp_path, protocol="consumer-deferred", **running),
            built_in("rolling-bounce", SHAPE),
        )


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


class _Member:
    """A consumer member whose commits the coordinator answers ``refusal`` (or takes)."""

    member_id = "m-1"
    generation = 4  # its member epoch
    assignment = frozenset({TopicPartition("t", 0)})

    def __init__(self, refusal: Exception | None = None) -> None:
        self.refusal = refusal
        self.commits: list[dict[TopicPartition, int]] = []

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.commits.append(dict(offsets))
        if self.refusal is not None:
            raise self.refusal


def _worker(tmp_path: Path, events: EventLog, member: _Member) -> Worker:
    args = WorkerSettings(
        bootstrap="127.0.0.1:9", name="m", run_dir=str(tmp_path), protocol="consumer"
    )
    worker = Worker(args, events)
    worker.member = member  # type: ignore[assignment]
    return worker


@pytest.mark.parametrize(
    ("refusal", "accepted"),
    [(None, True), (CommitFailedError(ErrorCode.STALE_MEMBER_EPOCH, "epoch 5 now"), False)],
)
async def test_a_consumer_workers_commit_goes_through_its_member_at_its_epoch(
    tmp_path: Path, refusal: Exception | None, accepted: bool
) -> None:
    """The worker commits through ``Member.commit`` (the coordinator checks the member
    epoch), not on a connection of its own: a commit refused for a stale epoch is written
    as refused and does not count as the task's committed offset."""
    member = _Member(refusal)
    tp = TopicPartition("t", 0)
    with EventLog(tmp_path / "m.jsonl", "m") as events:
        worker = _worker(tmp_path, events, member)
        await worker.commit({tp: 5})
    assert member.commits == [{tp: 5}]
    [line] = [r for r in read_events(tmp_path / "m.jsonl") if r["event"] == ev.COMMITTED]
    assert (line["accepted"], line["generation"], line["offset"]) == (accepted, 4, 5)
    if refusal is not None:
        assert "STALE_MEMBER_EPOCH" in str(line["error"])
    assert worker.workload.latest.get(tp) == (5 if accepted else None)


async def test_a_consumer_worker_resumes_from_what_its_member_committed(
    tmp_path: Path,
) -> None:
    """Against a real coordinator: the worker's commits are taken at the member's epoch and
    its next assignment resumes from them (``Member.committed``)."""
    async with running_server(fast_server_config()) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with Admin(bootstrap) as admin:
            await admin.create_topic("chaos", 2)
        args = WorkerSettings(
            bootstrap=bootstrap, name="m", run_dir=str(tmp_path), protocol="consumer"
        )
        tps = frozenset(TopicPartition("chaos", p) for p in range(2))
        with EventLog(tmp_path / "m.jsonl", "m") as events:
            worker = Worker(args, events)
            async with worker.make_member() as member:
                await member.wait_stable(10.0)
                assert member.assignment == tps
                await worker.commit({TopicPartition("chaos", 0): 11, TopicPartition("chaos", 1): 7})
                resume = await worker._resume_offsets(tps)
                epoch = member.generation
        assert resume == {TopicPartition("chaos", 0): 11, TopicPartition("chaos", 1): 7}
        commits = [r for r in read_events(tmp_path / "m.jsonl") if r["event"] == ev.COMMITTED]
        # then the leave's revocation commits the tasks' own positions
        assert [(r["offset"], r["accepted"], r["generation"]) for r in commits[:2]] == [
            (11, True, epoch),
            (7, True, epoch),
        ]
