"""The consumer group protocol (KIP-848) as a protocol of the simulator: the server's consumer
groups on the simulated coordinator, members on ``ConsumerCore``, its own invariants and
planted bugs."""

from __future__ import annotations

from contextlib import closing

import msgspec
import pytest

from huddle.client.consumer_core import ConsumerCore
from huddle.coordinator.consumer import GroupPhase
from huddle.sim import simulate
from huddle.sim.cli import replay_command, run_many
from huddle.sim.consumer_world import ConsumerWorld
from huddle.sim.faults import KINDS
from huddle.sim.invariants import ViolationFoundError
from huddle.sim.planted import FencedKeepsCore, UncheckedGroup, member_parts
from huddle.sim.world import config_for, default_kinds

CONSUMER = config_for("consumer")
SMALL = config_for("consumer", members=3, partitions=4, faults=40)


def test_a_consumer_run_converges_after_its_faults_with_every_partition_owned_once() -> None:
    outcome = simulate(0, config_for("consumer", faults=30))
    assert outcome.violation is None, outcome.violation
    assert set(outcome.faults) == set(default_kinds("consumer"))
    assert outcome.converged_after_ms is not None
    assert outcome.converged_after_ms <= CONSUMER.liveness_bound_ms()
    assert outcome.rebalances > 0  # the group epoch moved


def test_the_world_serves_the_group_with_the_server_s_consumer_groups() -> None:
    world = ConsumerWorld(2, config_for("consumer", faults=0))
    assert world.run().violation is None
    core = world.consumer.core
    assert core is not None
    group = core.groups["sim"]
    assert group.phase is GroupPhase.STABLE
    assert set(group.members) == {m.consumer.member_id for m in world.processes}
    owned = sorted(tp.partition for m in world.processes for tp in m.processing())
    assert owned == list(range(32))
    assert {m.consumer.epoch for m in world.processes} == {group.target_epoch}


def test_a_consumer_seed_runs_the_same_twice_step_for_step() -> None:
    first = simulate(5, CONSUMER)
    second = simulate(5, CONSUMER)
    assert (first.steps, first.sim_ms, first.digest) == (second.steps, second.sim_ms, second.digest)
    assert simulate(6, CONSUMER).digest != first.digest
    assert simulate(5, config_for("cooperative-sticky")).digest != first.digest


def test_a_few_dozen_seeds_of_few_members_and_many_faults_keep_every_invariant() -> None:
    outcomes = list(run_many(SMALL, 0, 40, jobs=2))
    assert [(o.seed, o.violation) for o in outcomes if o.violation is not None] == []
    assert sum(sum(o.faults.values()) for o in outcomes) == 40 * 40


def test_a_coordinator_restart_keeps_every_member_at_its_epoch() -> None:
    """The data dir keeps the consumer groups: after the coordinator's restarts nobody is
    fenced, so nobody loses its partitions."""
    lines: list[str] = []
    config = config_for("consumer", kinds=("coordinator-crash",), faults=6)
    outcome = simulate(1, config, tracer=lines.append)
    assert outcome.violation is None, outcome.violation
    assert outcome.faults["coordinator-crash"] == 6
    assert not [line for line in lines if "on_partitions_lost" in line]
    assert [line for line in lines if "disconnected" in line]  # the crashes cut them off


def test_pushed_notices_reconcile_the_group_within_a_fraction_of_a_heartbeat_interval() -> None:
    """Each join moves the group epoch; the coordinator pushes a notice to every member it
    concerns, which heartbeats at once: the last callback comes well within one heartbeat
    interval of the last member's connection."""
    lines: list[str] = []
    assert simulate(0, config_for("consumer", faults=0), tracer=lines.append).violation is None
    assert [line for line in lines if "ConsumerAssignmentChanged" in line]

    def at(line: str) -> float:
        return float(line.split("s ", 1)[0]) * 1000

    last_join = max(at(line) for line in lines if ": connected " in line)
    last_callback = max(at(line) for line in lines if ": on_partitions_" in line)
    assert last_join < last_callback < last_join + CONSUMER.heartbeat_interval_ms / 2


def test_a_consumer_run_has_every_fault_kind_slow_callbacks_too_and_replays_as_run() -> None:
    assert CONSUMER.kinds == KINDS == default_kinds("cooperative-sticky")
    assert "--kinds" not in replay_command(3, CONSUMER)
    asked = config_for("consumer", kinds=("crash", "slow-callback"))
    assert "--kinds crash,slow-callback" in replay_command(3, asked)


def test_a_revocation_slower_than_the_session_within_the_rebalance_timeout_costs_nothing() -> None:
    # found by `huddle sim run --protocol consumer --kinds <all>` while the member sent no
    # heartbeat during a callback: seed 3, shrunk to a crash (whose partitions move) and a
    # slow revocation of 7.4 s (the session is 3 s) that got it fenced; it heartbeats now
    outcome = simulate(3, config_for("consumer", kinds=KINDS), keep=[18, 19])
    assert outcome.violation is None, outcome.violation
    assert outcome.converged_after_ms is not None


def test_a_run_s_consumer_parts_follow_what_it_plants() -> None:
    assert member_parts(()).consumer_core is ConsumerCore
    assert member_parts(()).consumer_group is None
    assert member_parts(("consumer-fenced-keeps",)).consumer_core is FencedKeepsCore
    assert member_parts(("consumer-released-unchecked",)).consumer_group is UncheckedGroup


@pytest.mark.parametrize(
    ("bug", "invariant"),
    [
        ("consumer-released-unchecked", "exclusive-ownership"),
        ("consumer-fenced-keeps", "fenced-owns-nothing"),
    ],
)
def test_a_planted_consumer_bug_is_found_with_few_members_too(bug: str, invariant: str) -> None:
    config = config_for("consumer", members=3, partitions=4, faults=40, plant=(bug,))
    with closing(run_many(config, 0, 20, jobs=1)) as outcomes:
        found = next((o for o in outcomes if o.violation is not None), None)
    assert found is not None, f"{bug} went unnoticed in 20 seeds"
    assert found.violation is not None
    assert found.violation.invariant == invariant


def settled_world() -> ConsumerWorld:
    world = ConsumerWorld(2, config_for("consumer", faults=0))
    assert world.run().violation is None
    return world


def test_the_checker_reports_a_member_processing_what_its_coordinator_does_not_give_it() -> None:
    world = settled_world()
    m = world.processes[0]
    core = world.consumer.core
    assert core is not None
    group = core.groups["sim"]
    record = group.members[m.consumer.member_id]
    tp = min(m.processing())
    taken = {t: ps - {tp.partition} for t, ps in record.assigned.items()}
    group.members[record.member_id] = msgspec.structs.replace(record, assigned=taken)
    with pytest.raises(ViolationFoundError) as found:
        world.checker.check_members(world.members, {m})
    assert found.value.violation.invariant == "ownership"


def test_the_checker_reports_a_group_epoch_going_back() -> None:
    world = settled_world()
    core = world.consumer.core
    assert core is not None
    core.groups["sim"].group_epoch -= 1
    with pytest.raises(ViolationFoundError) as found:
        world.consumer.observer.consumer_changed(core)
    assert found.value.violation.invariant == "epochs"


def test_huddle_sim_run_runs_the_consumer_protocol_with_its_default_kinds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from huddle.cli import main

    assert main(["sim", "run", "--seeds", "4", "--protocol", "consumer"], {}) == 0
    out = capsys.readouterr().out
    assert "consumer              4 seeds, 0 violations" in out
    planted = ["--protocol", "consumer", "--plant", "consumer-fenced-keeps", "--seeds", "2"]
    assert main(["sim", "run", *planted], {}) == 1
    out = capsys.readouterr().out
    assert "fenced-owns-nothing" in out
    assert "replay: huddle sim replay 0 --protocol consumer --plant consumer-fenced-keeps" in out
    assert "--kinds" not in out  # the consumer protocol's default kinds need not be named
