"""Planted bugs are faulty parts the simulator gives its members and its coordinator, never
switches production code consults: the correct parts are every owner's default, and a run's
parts follow what it plants."""

from __future__ import annotations

import pytest

from huddle.client.assignors._claims import resolve
from huddle.client.assignors._layout import Layout
from huddle.client.assignors.base import MemberSubscription
from huddle.client.assignors.sticky import CooperativeStickyAssignor
from huddle.client.heartbeat import LIVENESS
from huddle.client.leader import check_cooperative
from huddle.coordinator.group import Group
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode
from huddle.sim.faulty_offsets import planted_commit_fence
from huddle.sim.planted import FaultyClaims, member_parts, no_round_check, planting

TP = TopicPartition("t", 0)


def tied_claims() -> list[MemberSubscription]:
    """Two members claim one partition in the same generation."""
    return [
        MemberSubscription("a", frozenset({"t"}), owned=frozenset({TP}), generation=3),
        MemberSubscription("b", frozenset({"t"}), owned=frozenset({TP}), generation=3),
    ]


def test_tied_claims_cancel_out_unless_the_faulty_rules_are_given() -> None:
    layout = Layout({"t": 1}, frozenset({"t"}))
    assert resolve(layout, tied_claims()).owned == [[], []]  # contested: nobody keeps it
    faulty = FaultyClaims(hand_out_ties=True, withhold=True)
    assert resolve(layout, tied_claims(), faulty).owned == [[0], []]  # the first claimant


def test_a_cooperative_round_withholds_a_claimed_partition_unless_told_not_to() -> None:
    subs = {s.member_id: s for s in tied_claims()}
    assignor = CooperativeStickyAssignor()
    handed = {m for m, a in assignor.assign({"t": 1}, subs).items() if TP in a.partitions}
    assert handed == set()  # withheld until both claimants revoked it
    assignor.claim_rules = FaultyClaims(hand_out_ties=False, withhold=False)
    handed = {m for m, a in assignor.assign({"t": 1}, subs).items() if TP in a.partitions}
    assert len(handed) == 1  # moves in one round, while another member still claims it


@pytest.mark.parametrize(
    ("plant", "ties", "withheld", "receipt", "paused", "checked"),
    [
        ((), None, None, None, None, True),
        (("tie-handed-out",), True, True, None, None, True),
        (("leader-check-skipped",), False, False, None, None, False),
        (("session-from-receive-time",), None, None, True, False, True),
        (("heartbeats-paused-in-callbacks",), None, None, False, True, True),
    ],
)
def test_a_run_s_member_parts_follow_what_it_plants(
    plant: tuple[str, ...],
    ties: bool | None,
    withheld: bool | None,
    receipt: bool | None,
    paused: bool | None,
    checked: bool,
) -> None:
    parts = member_parts(plant)
    rules = parts.claim_rules
    if ties is None:
        assert rules is None  # the assignor's own, correct rules
    else:
        assert isinstance(rules, FaultyClaims)
        assert (rules.tie(0) == 0, rules.dealt([0], [0]) == []) == (ties, withheld)
    liveness = parts.liveness
    if receipt is None:
        assert liveness is None
    else:
        assert liveness is not None
        assert (liveness.session_proof(1.0, 2.0) == 2.0, liveness.paused_in_callbacks()) == (
            receipt,
            paused,
        )
    assert parts.round_check is (check_cooperative if checked else no_round_check)


def test_the_correct_parts_are_the_defaults() -> None:
    assert LIVENESS.session_proof(1.0, 2.0) == 1.0  # from the send, never the answer
    assert not LIVENESS.paused_in_callbacks()
    with pytest.raises(ValueError, match="no such planted bug"):
        member_parts(["no-such-bug"])


def stale_commit_refusal(generation: int = 1) -> ErrorCode | None:
    """What the simulator's coordinator fence says of a commit made in generation 1 of a
    group in generation 2: its refusal's code, or None if it lets it through."""
    group = Group("g")
    group.generation = 2
    refusal = planted_commit_fence(group, generation)
    return None if refusal is None else refusal.code


def test_the_coordinator_s_fence_is_faulty_only_while_a_run_plants_it() -> None:
    assert stale_commit_refusal() is ErrorCode.ILLEGAL_GENERATION  # as the core's own fence
    with planting(["tie-handed-out"]):  # a member's bug: the coordinator's fence is intact
        assert stale_commit_refusal() is ErrorCode.ILLEGAL_GENERATION
    with planting(["commit-fencing-off"]):
        assert stale_commit_refusal() is None  # any generation's commit goes through
        assert stale_commit_refusal(generation=2) is None
    assert stale_commit_refusal() is ErrorCode.ILLEGAL_GENERATION  # unplanted after the run


def test_planting_an_unknown_bug_plants_nothing() -> None:
    with pytest.raises(ValueError, match="no such planted bug"), planting(["commit-fencing-of"]):
        pass
    assert stale_commit_refusal() is ErrorCode.ILLEGAL_GENERATION
