"""Scenarios as data, the workload's arithmetic, and the fault proxy's faults."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import anyio
import pytest

from huddle.chaos.events import FAULT_ACTIONS
from huddle.chaos.proxy import fault_proxy
from huddle.chaos.scenarios import (
    BUILT_IN,
    ETCD_FAULT_ACTIONS,
    ETCD_FAULTS,
    ScenarioError,
    Shape,
    built_in,
    load,
)
from huddle.chaos.workload import Workload
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.embedded import TopicPartition
from tests.helpers import wait_until

TP = TopicPartition("t", 0)


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_every_built_in_scenario_fits_inside_its_run(name: str) -> None:
    scenario = built_in(name, Shape(duration=10, members=3, seed=1))
    assert scenario.name == name
    assert scenario.description
    assert all(0 <= step.at < 10 for step in scenario.steps)
    assert scenario.ordered() == sorted(scenario.steps, key=lambda s: s.at)


def test_random_kills_depend_on_the_seed_only() -> None:
    a = built_in("random-kills", Shape(20, 4, seed=7))
    assert a == built_in("random-kills", Shape(20, 4, seed=7))
    assert a != built_in("random-kills", Shape(20, 4, seed=8))
    assert {s.action for s in a.steps} == {"kill", "start"}


def test_scenario_from_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    steps = [{"at": 2, "action": "kill", "target": "member-1"}, {"at": 1, "action": "net_stall"}]
    path.write_text(json.dumps({"static": True, "steps": steps}))
    scenario = load(path)
    assert scenario.name == "mine"
    assert scenario.static
    assert [s.action for s in scenario.ordered()] == ["net_stall", "kill"]


@pytest.mark.parametrize(
    "text",
    ["nope", '{"steps": [{"at": 1, "action": "explode"}]}', '[{"action": "kill"}]', "{}"],
)
def test_a_bad_scenario_file_is_one_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ScenarioError):
        load(path)


def test_unknown_scenario_names_the_known_ones() -> None:
    with pytest.raises(ScenarioError, match="process-death"):
        built_in("nope", Shape(10, 3))


def test_fault_actions_of_steps_are_event_actions() -> None:
    member_faults = {"kill", "sigterm", "sigstop", "sigcont", "start"}
    assert member_faults <= FAULT_ACTIONS


def test_workload_processes_at_its_rate_from_the_resume_offset() -> None:
    w = Workload(rate=100)
    w.assign(TP, 40, now=0.0)
    batches = w.tick(0.0) + w.tick(0.5) + w.tick(1.0)
    # records are waiting: the first is processed at once, then 100 per second
    assert [(b.offset, b.count) for b in batches] == [(40, 1), (41, 50), (91, 50)]
    assert w.release(frozenset({TP})) == {TP: 141}
    assert w.tick(2.0) == []


def test_stateful_workload_restores_its_lag_before_processing() -> None:
    w = Workload(rate=100, stateful=True, restore_rate=100)
    w.local[TP] = 100
    assert w.assign(TP, 300, now=0.0) == 2.0  # 200 records behind at 100/s
    assert w.tick(1.0) == []
    assert w.lags() == {TP: 200}
    assert w.newly_restored(2.0) == [TP]
    assert w.lags() == {TP: 0}
    assert [(b.offset, b.count) for b in w.tick(2.5)] == [(300, 51)]


def test_bounded_state_takes_the_same_time_to_rebuild_however_far_a_partition_has_come() -> None:
    w = Workload(rate=50, stateful=True, restore_rate=100, state_records=200)
    # a member that never had the partition rebuilds its last 200 records, not 10,000
    assert w.restore_records(TP, 10_000) == 200
    assert w.assign(TP, 10_000, now=0.0) == 2.0
    assert w.newly_restored(2.0) == [TP]
    other = TopicPartition("t", 1)
    w.local[other] = 9_950  # a member that had it 50 records ago rebuilds only those
    assert w.restore_seconds(other, 10_000) == 0.5
    assert Workload(rate=50, restore_rate=100, state_records=200).restore_seconds(TP, 500) == 0


def test_a_restore_cut_short_says_how_many_records_it_replayed_and_keeps_none() -> None:
    w = Workload(rate=50, stateful=True, restore_rate=100, state_records=200)
    other = TopicPartition("t", 1)
    w.local[other] = 10_000
    assert w.assign(TP, 10_000, now=1.0) == 2.0
    w.assign(other, 10_000, now=1.0)  # its state is there: nothing to restore
    assert w.cut_restores(frozenset({TP, other}), now=1.5) == {TP: 50}
    assert w.release(frozenset({TP, other})) == {TP: 10_000, other: 10_000}
    assert w.lags() == {other: 0}  # the 50 records replayed are not kept
    w.assign(TP, 10_000, now=5.0)
    assert w.cut_restores(frozenset({TP}), now=7.0) == {}  # finished at 7.0


def test_the_state_kept_is_the_state_at_the_commit_and_a_state_ahead_is_rebuilt() -> None:
    """Processing goes on while a commit is under way: the state kept on disk is the one at
    the accepted commit, so a member killed after it restores from there; a state ahead of
    the commit (records applied, not committed) is not taken as restored: it is rebuilt."""
    w = Workload(rate=100, stateful=True, restore_rate=100)
    w.assign(TP, 0, now=0.0)
    w.tick(0.0)
    w.tick(1.0)  # processed up to 101
    w.accepted({TP: 101})
    w.tick(2.0)  # up to 201, not committed
    assert w.local[TP] == 201
    assert w.checkpoint() == {TP: 101}
    after_kill = Workload(rate=100, stateful=True, restore_rate=100, local=w.checkpoint())
    assert after_kill.state_from(TP, 101) == 101
    assert after_kill.assign(TP, 101, now=5.0) == 0.0  # its state is at the commit
    ahead = Workload(rate=100, stateful=True, restore_rate=100, local={TP: 201})
    assert ahead.state_from(TP, 101) == 0  # records 101-200 would count twice
    assert ahead.assign(TP, 101, now=5.0) == 1.01  # rebuilt up to the commit


def test_bounded_state_bounds_the_reported_lag_and_a_warm_up_catches_up_within_it() -> None:
    w = Workload(rate=50, stateful=True, restore_rate=100, state_records=200)
    w.replicas = frozenset({TP})
    w.latest[TP] = 10_000
    w.local[TP] = 0
    assert w.lags() == {TP: 200}  # what a member without it must rebuild
    w.catch_up(1.0)
    assert w.local[TP] == 9_900  # from the window's start, 100 records a second
    assert w.lags() == {TP: 100}
    w.catch_up(5.0)
    assert w.lags() == {TP: 0}


async def test_proxy_partition_refuses_and_heal_lets_members_back(
    server: CoordinatorServer,
) -> None:
    async with fault_proxy("127.0.0.1", server.port) as proxy:
        stream = await anyio.connect_tcp("127.0.0.1", proxy.port)
        await wait_until(lambda: proxy.connections > 0, what="the proxied connection")
        await proxy.partition()
        with anyio.fail_after(5), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await stream.receive()  # the open connection was dropped
        await stream.aclose()
        refused = await anyio.connect_tcp("127.0.0.1", proxy.port)
        with anyio.fail_after(5), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await refused.receive()  # accepted, then closed at once
        await refused.aclose()
        proxy.heal()
        assert not proxy.partitioned
        healed = await anyio.connect_tcp("127.0.0.1", proxy.port)
        await wait_until(lambda: proxy.connections > 0, what="a connection after healing")
        await healed.aclose()


def test_chaos_run_proxy_flag_defaults_to_the_scenario() -> None:
    from huddle.cli import parse_args

    assert parse_args(["chaos", "run", "rolling-bounce"]).proxy is None
    assert parse_args(["chaos", "run", "rolling-bounce", "--proxy"]).proxy is True
    assert parse_args(["chaos", "run", "network-faults", "--no-proxy"]).proxy is False


def test_chaos_run_refuses_network_faults_without_the_proxy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import huddle.chaos.cli
    from huddle.cli import main

    # the command points logging at its run dir's harness.log; not this test process's
    monkeypatch.setattr(huddle.chaos.cli, "configure_logging", lambda *a, **k: None)

    code = main(["chaos", "run", "network-faults", "--no-proxy", "--run-dir", str(tmp_path)])
    assert code == 2
    assert "needs the proxy" in capsys.readouterr().err


def test_the_etcd_fault_campaign_heals_each_fault_before_the_next() -> None:
    scenario = built_in("etcd-faults", Shape(300, 3, seed=4))
    assert scenario.cluster
    steps = scenario.ordered()
    assert {s.action for s in steps} <= FAULT_ACTIONS
    faults = [s for s in steps if s.action in ETCD_FAULT_ACTIONS]
    assert len(faults) >= 24  # dozens in a row
    assert {s.action for s in faults} == ETCD_FAULT_ACTIONS
    heals = {fault: heal for fault, heal, _, _ in ETCD_FAULTS}
    for step, after in itertools.pairwise(steps):  # one fault at a time
        if step.action in ETCD_FAULT_ACTIONS and heals[step.action] is not None:
            assert (after.action, after.target) == (heals[step.action], step.target)


def test_high_availability_options_reach_the_assignor() -> None:
    from huddle.chaos.protocols import ProtocolOptions, build_assignor
    from huddle.client.assignors import HighAvailabilityAssignor

    options = ProtocolOptions(max_warmup_replicas=8, num_standby_replicas=1)
    assignor = build_assignor("high-availability", options)
    assert isinstance(assignor, HighAvailabilityAssignor)
    assert (assignor.max_warmup_replicas, assignor.num_standby_replicas) == (8, 1)
