"""The deterministic simulator: reproducible runs, its faults, its checks and its CLI."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import closing

import pytest

from huddle.sim import PROTOCOLS, SimConfig, simulate
from huddle.sim.cli import replay_command, run_many
from huddle.sim.faults import KINDS, plan_faults
from huddle.sim.world import World, config_for

FEW = SimConfig(members=4, partitions=8, faults=6)
CI_SEEDS = 200


def test_a_seed_runs_the_same_twice_step_for_step() -> None:
    first = simulate(7, FEW)
    second = simulate(7, FEW)
    assert (first.steps, first.sim_ms, first.digest) == (second.steps, second.sim_ms, second.digest)
    assert simulate(8, FEW).digest != first.digest


@pytest.mark.e2e
def test_a_seed_runs_the_same_in_another_process_whatever_its_hash_seed() -> None:
    """Replaying a seed from the command line must give the run that failed, violation and
    all: string hashing (and so set order) differs between processes unless nothing
    depends on it."""
    code = (
        "from huddle.sim import PROTOCOLS, SimConfig, simulate\n"
        "for p in PROTOCOLS:\n"
        "    for plant in ((), ('leader-check-skipped',)):\n"
        "        o = simulate(3, SimConfig(protocol=p, plant=plant))\n"
        "        print(o.steps, o.digest, o.violation)\n"
    )
    runs = set()
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        runs.add(done.stdout)
    assert len(runs) == 1
    assert "cooperative-rounds" in runs.pop()  # the planted bug is found, alike in both


def test_the_fault_plan_is_the_seeds_and_keeping_some_faults_keeps_them_as_they_were() -> None:
    plan = plan_faults(3, 20, members=8, partitions=32, session_ms=3_000, rebalance_ms=10_000)
    assert plan == plan_faults(
        3, 20, members=8, partitions=32, session_ms=3_000, rebalance_ms=10_000
    )
    assert len(plan) == 20
    assert {f.kind for f in plan} <= set(KINDS)
    assert [f.at for f in plan] == sorted(f.at for f in plan)
    world = World(3, SimConfig(), keep=[2, 5])
    assert world.faults == [plan[2], plan[5]]


def test_every_fault_kind_is_injected_and_the_group_converges_after() -> None:
    outcome = simulate(0, SimConfig(protocol="cooperative-sticky", faults=30))
    assert outcome.violation is None, outcome.violation
    assert set(outcome.faults) == set(KINDS)
    assert outcome.converged_after_ms is not None
    assert outcome.converged_after_ms <= SimConfig().liveness_bound_ms()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_few_hundred_seeds_keep_every_invariant(protocol: str) -> None:
    """CI's share of ``huddle sim run``: 200 seeds of 8 members, 32 partitions and 20
    faults each, in two processes."""
    outcomes = list(run_many(config_for(protocol), 0, CI_SEEDS, jobs=2))
    assert len(outcomes) == CI_SEEDS
    failed = [(o.seed, o.violation) for o in outcomes if o.violation is not None]
    assert failed == []
    assert sum(sum(o.faults.values()) for o in outcomes) == CI_SEEDS * 20


# seeds within which each planted bug is found (bench/sim.py measures the first seed)
PLANTED = {
    "commit-fencing-off": ("cooperative-sticky", 40, "commits"),
    "leader-check-skipped": ("cooperative-sticky", 20, "cooperative-rounds"),
    "session-from-receive-time": ("cooperative-sticky", 200, "exclusive-ownership"),
    "heartbeats-paused-in-callbacks": ("cooperative-sticky", 20, "availability"),
    # the tie goes to one claimant, and the leader's own check refuses the round
    "tie-handed-out": ("cooperative-sticky", 20, "member-failed"),
    "consumer-released-unchecked": ("consumer", 5, "exclusive-ownership"),
    "consumer-fenced-keeps": ("consumer", 10, "fenced-owns-nothing"),
}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_a_planted_bug_is_found_with_its_seed(bug: str) -> None:
    protocol, within, invariant = PLANTED[bug]
    config = config_for(protocol, plant=(bug,))
    with closing(run_many(config, 0, within, jobs=2)) as outcomes:  # its pool ends here
        found = next((o for o in outcomes if o.violation is not None), None)
    assert found is not None, f"{bug} went unnoticed in {within} seeds"
    assert found.violation is not None
    assert found.violation.invariant == invariant
    again = simulate(found.seed, config)  # the printed seed replays it
    assert again.violation == found.violation
    assert simulate(found.seed, config_for(protocol)).violation is None


@pytest.mark.parametrize(
    ("seed", "config", "keep"),
    [
        # a member given back a partition it had revoked went on from its old position
        # instead of the committed offset, and committed an offset going back
        (924, SimConfig(protocol="range"), None),
        # the group emptied with no offsets and was deleted, then made again at generation
        # 0; a member frozen meanwhile woke in the old life's generation 1, and the checker
        # called that a member ahead of its group and a generation going back
        (5197, SimConfig(protocol="range", members=3, partitions=2, faults=60), [1, 3, 5]),
        (
            10506,
            SimConfig(protocol="cooperative-sticky", members=3, partitions=4, faults=40),
            [0, 1, 4],
        ),
        # a false claim copied the generation of a member from before a coordinator
        # restart (generations began again) and so beat the real owner's claim
        (10267, SimConfig(protocol="high-availability", members=3, partitions=4, faults=40), None),
        # a session that ran out while a member was frozen was handled, when the connection
        # turned out lost, before the callbacks the loss had cut off (on_partitions_lost for
        # partitions whose on_partitions_assigned was still owed); the runtime's lock orders
        # them the other way
        (530, SimConfig(protocol="high-availability"), [0, 2, 3, 4, 5, 6, 8, 12, 13]),
    ],
)
def test_seeds_that_once_showed_a_fault_of_the_simulator_itself(
    seed: int, config: SimConfig, keep: list[int] | None
) -> None:
    assert simulate(seed, config, keep=keep).violation is None


def test_replay_prints_every_step_and_the_outcome() -> None:
    from huddle.cli import main

    out = io.StringIO()
    sys_stdout = sys.stdout
    sys.stdout = out
    try:
        code = main(["sim", "replay", "7", "--members", "4", "--partitions", "8", "--faults", "6"])
    finally:
        sys.stdout = sys_stdout
    text = out.getvalue()
    assert code == 0
    assert "JoinGroupRequest" in text
    assert "on_partitions_assigned" in text
    assert f"digest {simulate(7, FEW).digest}" in text
    assert "no violation" in text


def test_the_replay_command_names_what_differs_from_the_defaults() -> None:
    config = SimConfig(protocol="range", members=4, plant=("tie-handed-out",))
    assert replay_command(5, config, [1, 3]) == (
        "huddle sim replay 5 --protocol range --members 4 --plant tie-handed-out --keep 1,3"
    )
