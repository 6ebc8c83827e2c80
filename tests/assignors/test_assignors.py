"""Assignors on hand-written groups: Kafka's documented examples, ownership conflicts,
members leaving and joining. Properties over random groups: test_assignors_properties.py.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from huddle.client.assignors import (
    ASSIGNORS,
    CooperativeStickyAssignor,
    MemberAssignment,
    MemberSubscription,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    StickyAssignor,
)
from huddle.client.leader import AssignmentError, check_cooperative
from huddle.protocol.embedded import TopicPartition
from tests.builders import group, tps
from tests.builders import subscription as member


def assigned(result: Mapping[str, MemberAssignment]) -> dict[str, frozenset[TopicPartition]]:
    return {member_id: a.partitions for member_id, a in result.items()}


# --- the registry --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cls", "protocols"),
    [
        ("range", RangeAssignor, (RebalanceProtocol.EAGER,)),
        ("roundrobin", RoundRobinAssignor, (RebalanceProtocol.EAGER,)),
        ("sticky", StickyAssignor, (RebalanceProtocol.EAGER,)),
        (
            "cooperative-sticky",
            CooperativeStickyAssignor,
            (RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE),
        ),
    ],
)
def test_every_assignor_is_created_by_name(
    name: str, cls: type, protocols: tuple[RebalanceProtocol, ...]
) -> None:
    assignor = ASSIGNORS.create(name)
    assert type(assignor) is cls
    assert assignor.supported_protocols == protocols


def test_an_unknown_name_lists_the_known_ones() -> None:
    known = "cooperative-deferred, cooperative-sticky, high-availability, range, roundrobin, sticky"
    with pytest.raises(ValueError, match=known):
        ASSIGNORS.create("nope")


# --- range and roundrobin: Kafka's javadoc examples ----------------------------------------

TWO_BY_THREE = {"t0": 3, "t1": 3}
C0_C1 = group(member("C0", ["t0", "t1"]), member("C1", ["t0", "t1"]))


def test_range_gives_the_first_member_the_longer_range_of_each_topic() -> None:
    result = RangeAssignor().assign(TWO_BY_THREE, C0_C1)
    assert assigned(result) == {"C0": tps("t0-0 t0-1 t1-0 t1-1"), "C1": tps("t0-2 t1-2")}


def test_roundrobin_deals_over_all_topics_in_turn() -> None:
    result = RoundRobinAssignor().assign(TWO_BY_THREE, C0_C1)
    assert assigned(result) == {"C0": tps("t0-0 t0-2 t1-1"), "C1": tps("t0-1 t1-0 t1-2")}


def test_roundrobin_skips_members_not_subscribed_to_the_topic() -> None:
    # Kafka's javadoc: t0, t1, t2 with 1, 2, 3 partitions; C0 reads t0, C1 t0-t1, C2 all.
    subs = group(member("C0", ["t0"]), member("C1", ["t0", "t1"]), member("C2", ["t0", "t1", "t2"]))
    result = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs)
    assert assigned(result) == {
        "C0": tps("t0-0"),
        "C1": tps("t1-0"),
        "C2": tps("t1-1 t2-0 t2-1 t2-2"),
    }


def test_range_splits_each_topic_over_its_own_subscribers() -> None:
    subs = group(member("a", ["t0", "t1"]), member("b", ["t0"]), member("c", ["t1"]))
    result = RangeAssignor().assign({"t0": 5, "t1": 2}, subs)
    assert assigned(result) == {
        "a": tps("t0-0 t0-1 t0-2 t1-0"),
        "b": tps("t0-3 t0-4"),
        "c": tps("t1-1"),
    }


@pytest.mark.parametrize("cls", [RangeAssignor, RoundRobinAssignor])
def test_members_are_ordered_by_id_not_by_arrival(cls: type[RangeAssignor]) -> None:
    later_first = group(member("m2", ["t"]), member("m10", ["t"]), member("m1", ["t"]))
    result = cls().assign({"t": 3}, later_first)
    # String order: "m1" < "m10" < "m2".
    assert assigned(result) == {"m1": tps("t-0"), "m10": tps("t-1"), "m2": tps("t-2")}


@pytest.mark.parametrize("cls", [RangeAssignor, RoundRobinAssignor])
def test_a_restarted_static_member_keeps_its_place(cls: type[RangeAssignor]) -> None:
    before = group(member("id-1", ["t"], instance="b"), member("id-2", ["t"], instance="a"))
    after = group(member("id-9", ["t"], instance="b"), member("id-2", ["t"], instance="a"))
    first = assigned(cls().assign({"t": 4}, before))
    second = assigned(cls().assign({"t": 4}, after))
    assert first["id-1"] == second["id-9"]
    assert first["id-2"] == second["id-2"]


ALL = [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]


@pytest.mark.parametrize("cls", ALL)
def test_topics_that_do_not_exist_or_nobody_reads_are_assigned_to_nobody(
    cls: type[RangeAssignor],
) -> None:
    subs = group(member("a", ["t", "ghost"]), member("b", []))
    result = cls().assign({"t": 2, "unread": 4}, subs)
    assert assigned(result) == {"a": tps("t-0 t-1"), "b": frozenset()}


@pytest.mark.parametrize("cls", ALL)
def test_an_empty_group_gets_an_empty_assignment(cls: type[RangeAssignor]) -> None:
    assert cls().assign({"t": 2}, {}) == {}


# --- sticky: claims ------------------------------------------------------------------------

STICKY = [StickyAssignor, CooperativeStickyAssignor]


@pytest.mark.parametrize("cls", STICKY)
def test_members_keep_what_they_owned_when_it_is_balanced(cls: type[StickyAssignor]) -> None:
    subs = group(
        member("a", ["t"], owned="t-3 t-0", generation=4),
        member("b", ["t"], owned="t-1 t-2", generation=4),
    )
    result = cls().assign({"t": 4}, subs)
    assert assigned(result) == {"a": tps("t-0 t-3"), "b": tps("t-1 t-2")}
    assert all(not a.revoked for a in result.values())


def test_a_partition_claimed_twice_in_one_generation_moves_only_once_both_revoked() -> None:
    # Both claim t-1 in generation 5: neither owns it by right, so both revoke it and nobody
    # gets it this round (Kafka's partitionsTransferringOwnership); the follow-up places it.
    subs = group(
        member("a", ["t"], owned="t-0 t-1", generation=5),
        member("b", ["t"], owned="t-1", generation=5),
    )
    result = CooperativeStickyAssignor().assign({"t": 2}, subs)
    assert result == {
        "a": MemberAssignment(partitions=tps("t-0"), revoked=tps("t-1")),
        "b": MemberAssignment(partitions=frozenset(), revoked=tps("t-1")),
    }
    check_cooperative(subs, result)
    follow_up = group(
        member("a", ["t"], owned="t-0", generation=6),
        member("b", ["t"], owned="", generation=6),
    )
    assert assigned(CooperativeStickyAssignor().assign({"t": 2}, follow_up)) == {
        "a": tps("t-0"),
        "b": tps("t-1"),
    }


def test_the_leaders_check_refuses_a_tied_partition_handed_to_anyone() -> None:
    subs = group(
        member("a", ["t"], owned="t-0 t-1", generation=5),
        member("b", ["t"], owned="t-1", generation=5),
        member("c", ["t"], owned="", generation=5),
    )
    for taker in ("a", "b", "c"):
        result = {m: MemberAssignment() for m in subs}
        result[taker] = MemberAssignment(partitions=tps("t-1"))
        with pytest.raises(AssignmentError, match="still claim"):
            check_cooperative(subs, result)


def test_the_leaders_check_refuses_a_revocation_the_member_cannot_carry_out() -> None:
    # Told to revoke what its join did not claim, or to revoke and keep one partition: the
    # member could not act on it, and a rejoin would only bring the same answer back.
    subs = group(member("a", ["t"], owned="t-0", generation=5), member("b", ["t"]))
    unclaimed = {
        "a": MemberAssignment(partitions=tps("t-0"), revoked=tps("t-1")),
        "b": MemberAssignment(partitions=tps("t-1")),
    }
    with pytest.raises(AssignmentError, match="which it does not claim"):
        check_cooperative(subs, unclaimed)
    both = {
        "a": MemberAssignment(partitions=tps("t-0"), revoked=tps("t-0")),
        "b": MemberAssignment(partitions=tps("t-1")),
    }
    with pytest.raises(AssignmentError, match="revoke and keep"):
        check_cooperative(subs, both)


def test_a_doubled_claim_is_not_kept_by_either_claimant() -> None:
    # a and b both say they hold t-0..t-1 in generation 3, c owned nothing: balance puts one
    # partition on each member, and a and b have no right to more than balance allows.
    subs = group(
        member("a", ["t"], owned="t-0 t-1", generation=3),
        member("b", ["t"], owned="t-0 t-1", generation=3),
        member("c", ["t"], owned="t-2", generation=3),
    )
    result = assigned(StickyAssignor().assign({"t": 3}, subs))
    assert result["c"] == tps("t-2")
    assert sorted(result["a"] | result["b"]) == sorted(tps("t-0 t-1"))
    assert len(result["a"]) == len(result["b"]) == 1


def test_the_higher_generation_wins_a_claim() -> None:
    # b's claim on t-1 is stale (generation 2 against a's 3): a owns t-1 by right, so
    # giving it to b means revoking it from a first.
    subs = group(
        member("a", ["t"], owned="t-0 t-1", generation=3),
        member("b", ["t"], owned="t-1", generation=2),
    )
    result = CooperativeStickyAssignor().assign({"t": 2}, subs)
    assert result == {  # b revokes its stale claim too: it may still be working on t-1
        "a": MemberAssignment(partitions=tps("t-0"), revoked=tps("t-1")),
        "b": MemberAssignment(partitions=frozenset(), revoked=tps("t-1")),
    }


def test_a_claim_without_a_generation_loses_to_one_with() -> None:
    subs = group(
        member("a", ["t"], owned="t-0", generation=-1),
        member("b", ["t"], owned="t-0", generation=1),
    )
    result = assigned(StickyAssignor().assign({"t": 2}, subs))
    assert result == {"a": tps("t-1"), "b": tps("t-0")}


def test_claims_on_unknown_partitions_or_unsubscribed_topics_are_not_kept() -> None:
    # a dropped t1 from its subscription; t-5 no longer exists; gone was deleted.
    subs = group(
        member("a", ["t"], owned="t-0 t-5 t1-0 gone-0", generation=2),
        member("b", ["t", "t1"], owned="t-1", generation=2),
    )
    result = StickyAssignor().assign({"t": 2, "t1": 1}, subs)
    assert assigned(result) == {"a": tps("t-0"), "b": tps("t-1 t1-0")}


def test_cooperative_revokes_a_partition_its_owner_no_longer_subscribes_to_first() -> None:
    # a still claims t1-0 after dropping t1: it may still be working on it, so b gets it
    # only once a has revoked it.
    subs = group(
        member("a", ["t"], owned="t-0 t-5 t1-0 gone-0", generation=2),
        member("b", ["t", "t1"], owned="t-1", generation=2),
    )
    result = CooperativeStickyAssignor().assign({"t": 2, "t1": 1}, subs)
    assert result == {  # a gives up every claim it does not keep (t-5 and gone-0 are gone)
        "a": MemberAssignment(partitions=tps("t-0"), revoked=tps("t1-0 t-5 gone-0")),
        "b": MemberAssignment(partitions=tps("t-1")),
    }


# --- cooperative-sticky: a member joins ----------------------------------------------------


def test_cooperative_hands_over_in_two_rounds() -> None:
    subs = group(
        member("a", ["t"], owned="t-0 t-1 t-2 t-3", generation=1),
        member("b", ["t"]),
    )
    first = CooperativeStickyAssignor().assign({"t": 4}, subs)
    # b's share is revoked from a but given to nobody yet: a is still processing it.
    assert first == {
        "a": MemberAssignment(partitions=tps("t-0 t-1"), revoked=tps("t-2 t-3")),
        "b": MemberAssignment(partitions=frozenset()),
    }
    # a revoked, both rejoin with what they own now.
    again = group(
        member("a", ["t"], owned="t-0 t-1", generation=2),
        member("b", ["t"], generation=2),
    )
    second = CooperativeStickyAssignor().assign({"t": 4}, again)
    assert second == {
        "a": MemberAssignment(partitions=tps("t-0 t-1")),
        "b": MemberAssignment(partitions=tps("t-2 t-3")),
    }


def test_eager_sticky_moves_the_same_partitions_at_once() -> None:
    subs = group(
        member("a", ["t"], owned="t-0 t-1 t-2 t-3", generation=1),
        member("b", ["t"]),
    )
    result = StickyAssignor().assign({"t": 4}, subs)
    assert result == {
        "a": MemberAssignment(partitions=tps("t-0 t-1")),
        "b": MemberAssignment(partitions=tps("t-2 t-3")),
    }


# --- eager sticky: members leave and join --------------------------------------------------

SIX_TOPICS = {f"t{i}": 7 for i in range(6)}
NAMES = [f"m{i}" for i in range(5)]


def settled(names: list[str]) -> dict[str, frozenset[TopicPartition]]:
    subs = {name: member(name, SIX_TOPICS) for name in names}
    return assigned(StickyAssignor().assign(SIX_TOPICS, subs))


def rejoin(
    before: Mapping[str, frozenset[TopicPartition]], names: list[str]
) -> dict[str, frozenset[TopicPartition]]:
    subs = {
        name: MemberSubscription(
            member_id=name,
            topics=frozenset(SIX_TOPICS),
            owned=before.get(name, frozenset()),
            generation=1 if name in before else -1,
        )
        for name in names
    }
    return assigned(StickyAssignor().assign(SIX_TOPICS, subs))


def test_when_a_member_leaves_only_its_partitions_move() -> None:
    before = settled(NAMES)
    after = rejoin(before, NAMES[1:])
    for name in NAMES[1:]:
        assert before[name] <= after[name]
    spread = {name: len(after[name] - before[name]) for name in NAMES[1:]}
    assert sum(spread.values()) == len(before["m0"])
    sizes = [len(p) for p in after.values()]
    assert max(sizes) - min(sizes) <= 1


def test_when_a_member_joins_it_gets_a_fair_share_and_the_rest_stay() -> None:
    before = settled(NAMES)
    after = rejoin(before, [*NAMES, "new"])
    total = sum(SIX_TOPICS.values())
    assert len(after["new"]) in (total // 6, total // 6 + 1)
    for name in NAMES:
        assert after[name] <= before[name]
        # Each old member gives up only what its lower share requires.
        assert len(after[name]) in (total // 6, total // 6 + 1)
    sizes = [len(p) for p in after.values()]
    assert max(sizes) - min(sizes) <= 1


# --- sticky with unequal subscriptions -----------------------------------------------------


def test_unequal_join_takes_from_each_member_only_what_balance_requires() -> None:
    owned_t0 = " ".join(f"t0-{p}" for p in range(10))
    owned_t1 = " ".join(f"t1-{p}" for p in range(10))
    subs = group(
        member("a", ["t0", "t1"], owned=owned_t0, generation=1),
        member("b", ["t0", "t1"]),
        member("c", ["t0", "t1"], owned=owned_t1, generation=1),
        member("d", ["t2"], owned="t2-0 t2-1 t2-2", generation=1),
    )
    result = assigned(StickyAssignor().assign({"t0": 10, "t1": 10, "t2": 3}, subs))
    assert result["a"] <= tps(owned_t0)
    assert result["c"] <= tps(owned_t1)
    assert result["d"] == tps("t2-0 t2-1 t2-2")
    assert sorted(len(result[m]) for m in "abc") == [6, 7, 7]


def test_unowned_partitions_even_out_the_load_before_claims_move() -> None:
    # d can only read t1, so it takes c's t1-0; b (new) evens out with unowned partitions
    # and a keeps both of its claims.
    subs = group(
        member("a", ["t0", "t2"], owned="t0-2 t2-0", generation=1),
        member("b", ["t0", "t1", "t2"]),
        member("c", ["t0", "t1", "t2"], owned="t1-0", generation=1),
        member("d", ["t1"]),
    )
    result = assigned(StickyAssignor().assign({"t0": 4, "t1": 1, "t2": 2}, subs))
    assert result["a"] == tps("t0-2 t2-0")
    assert result["d"] == tps("t1-0")
    assert sorted(len(p) for p in result.values()) == [1, 2, 2, 2]


@pytest.mark.parametrize("cls", STICKY)
def test_a_claim_stays_where_unowned_partitions_can_pass_along_instead(
    cls: type[StickyAssignor],
) -> None:
    # Placing the unowned partitions leaves d two below a, which claims three of t1, the
    # one topic they share; b and c, one above d, hold unowned t0 partitions. One of them
    # passes one on to d, and a keeps its claims (rather than one moving to d: in a
    # cooperative group a revocation and another round).
    subs = group(
        member("a", ["t1"], owned="t1-0 t1-1 t1-2", generation=1),
        member("b", ["t0"], owned="t0-0", generation=1),
        member("c", ["t0"]),
        member("d", ["t0", "t1"]),
        member("e", []),
    )
    result = cls().assign({"t0": 4, "t1": 4}, subs)
    assert result["a"].partitions == tps("t1-0 t1-1 t1-2")
    assert result["b"].partitions >= tps("t0-0")
    assert all(not a.revoked for a in result.values())
    assert sorted(len(a.partitions) for a in result.values()) == [0, 1, 2, 2, 3]
