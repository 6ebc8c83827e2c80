"""A static member whose process ended with a revocation pending: the seeds that found a
partition left with no owner for good (3 members, 4 partitions)."""

from __future__ import annotations

import pytest

from huddle.sim import SimConfig, simulate

KINDS = ("slow-callback", "crash", "pause")


@pytest.mark.parametrize(
    ("seed", "config", "keep", "member", "new_id", "generation"),
    [
        # the leader, back in the generation that told its old process to revoke events-0
        (
            146,
            SimConfig(protocol="high-availability", members=3, partitions=4, faults=40),
            [24, 29, 35, 39],
            1,
            "m1-c1-6",
            6,
        ),
        # a follower assigned events-1, whose old process was to revoke events-2
        (
            50,
            SimConfig(
                protocol="cooperative-sticky", members=3, partitions=4, faults=30, kinds=KINDS
            ),
            [15, 21, 29],
            2,
            "m2-c1-5",
            3,
        ),
        (
            89,
            SimConfig(
                protocol="cooperative-deferred", members=3, partitions=4, faults=30, kinds=KINDS
            ),
            None,
            1,
            "m1-c1-14",
            12,
        ),
    ],
)
def test_a_restarted_static_member_starts_the_round_its_old_process_owed(
    seed: int, config: SimConfig, keep: list[int] | None, member: int, new_id: str, generation: int
) -> None:
    """The member's process crashed before it rejoined after being told to revoke a
    partition (often in a slow ``on_partitions_revoked``). Its new process came back while
    the group was Stable and, per KIP-345, got that generation's stored assignment without a
    rebalance: a revocation of something it never owned. It ignored it, so nobody started
    the follow-up round and the partition had no owner until the end of the run (liveness).
    The new process now rejoins for it, once, and the next generation hands it on."""
    lines: list[str] = []
    outcome = simulate(seed, config, keep=keep, tracer=lines.append)
    assert outcome.violation is None, outcome.violation
    back = f"member {member}: receives frame=#1 JoinGroupResponse(generation_id={generation}, "
    assert any(back in line and f"member_id={new_id}," in line for line in lines)
    follow_up = f"JoinGroupResponse(generation_id={generation + 1}, member_id={new_id},"
    assert any(f"member {member}: receives" in line and follow_up in line for line in lines)
