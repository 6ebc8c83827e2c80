"""``cooperative-deferred`` on the seed's worked examples (Designs I and II), lost
partitions held while a delay runs, static members returning, and leader changes.

T1..T4 are partitions 0..3 of one topic "T": the seed's members subscribe to "T"
("A(T,assigned:T1)"), so they are four partitions of that topic, not four topics (that
also matters for a new leader, which holds unowned partitions of topics others own).
"""

from __future__ import annotations

from huddle.client.assignors import ASSIGNORS, RebalanceProtocol
from huddle.client.assignors.deferred import DeferredAssignor
from huddle.protocol.embedded import TopicPartition
from tests.assignors.deferred_sim import Group, T, delays, newly_assigned, revoked, ts

MAX_DELAY = 300_000


def seed_group(**settings: int) -> Group:
    """A(T1), B(T2), C(T3), D(T4), after one round led by A."""
    group = Group({"T": 4}, dict(settings))
    for number, member_id in enumerate("ABCD", start=1):
        group.join(member_id, [T(number)])
    group.rebalance()
    return group


def test_created_by_name_with_defaults() -> None:
    assignor = ASSIGNORS.create("cooperative-deferred")
    assert isinstance(assignor, DeferredAssignor)
    assert assignor.supported_protocols == (RebalanceProtocol.COOPERATIVE,)
    assert assignor.max_delay_ms == MAX_DELAY


# --- the seed's worked examples -------------------------------------------------------


def test_member_joins_revoke_first_then_hand_over() -> None:
    """Designs I and II, "Member joins": A(T1,T4), B(T2), C(T3); D joins."""
    group = Group({"T": 4})
    group.join("A", ts(1, 4))
    group.join("B", ts(2))
    group.join("C", ts(3))
    group.join("D")
    first = group.rebalance()
    assert revoked(first) == {"A": ts(4)}
    assert {m: a.partitions for m, a in first.items()} == {
        "A": ts(1),
        "B": ts(2),
        "C": ts(3),
        "D": ts(),  # T4 is withheld until A has given it up
    }
    assert delays(first) == {0}
    before = group.owned()
    follow_up = group.rebalance()
    assert newly_assigned(follow_up, before) == {"D": ts(4)}
    assert revoked(follow_up) == {}
    assert delays(follow_up) == {0}


def test_design_one_member_leaves_reassigns_at_once() -> None:
    """Design I, "Member leaves" (no deferral: a maximum delay of 0): A gets T1, T4."""
    group = seed_group(scheduled_rebalance_max_delay_ms=0)
    group.leave("D")
    result = group.rebalance()
    assert {m: a.partitions for m, a in result.items()} == {"A": ts(1, 4), "B": ts(2), "C": ts(3)}
    assert revoked(result) == {}
    assert delays(result) == {0}


def test_design_two_member_leaves_waits_then_reassigns() -> None:
    """Design II, "Member leaves": nothing assigned, nothing revoked, t1 to everyone;
    after t1 T4 goes to one of them (A)."""
    group = seed_group()
    group.leave("D")
    before = group.owned()
    waiting = group.rebalance()
    assert newly_assigned(waiting, before) == {}
    assert revoked(waiting) == {}
    assert delays(waiting) == {MAX_DELAY}
    group.advance(MAX_DELAY)
    after = group.rebalance()
    assert newly_assigned(after, before) == {"A": ts(4)}
    assert revoked(after) == {}
    assert delays(after) == {0}


def test_design_two_member_bounces_gets_its_partition_back() -> None:
    """Design II, "Member bounces": D leaves; D' joins before t1, owning nothing."""
    group = seed_group()
    group.leave("D")
    group.rebalance()
    group.advance(MAX_DELAY / 2)
    group.join("D'")
    before = group.owned()
    back = group.rebalance()
    assert newly_assigned(back, before) == {"D'": ts(4)}
    assert {m: back[m].partitions for m in "ABC"} == {"A": ts(1), "B": ts(2), "C": ts(3)}
    assert revoked(back) == {}
    assert delays(back) == {0}


# --- the delay ------------------------------------------------------------------------


def test_a_round_before_expiry_keeps_the_deadline() -> None:
    group = seed_group()
    group.leave("D")
    group.rebalance()
    group.advance(100_000)
    again = group.rebalance()  # say C rejoined to change its subscription metadata
    assert delays(again) == {MAX_DELAY - 100_000}
    assert all(T(4) not in a.partitions for a in again.values())
    group.advance(MAX_DELAY - 100_000)
    assert T(4) in group.rebalance()["A"].partitions


def test_expiry_spreads_lost_partitions_least_loaded_first() -> None:
    group = Group({"T": 6})
    group.join("A", ts(1, 2))
    group.join("B", ts(3))
    group.join("C", ts(4, 5))
    group.join("D", ts(6))
    group.rebalance()
    group.leave("C", "D")
    held = group.rebalance()
    assert {m: a.partitions for m, a in held.items()} == {"A": ts(1, 2), "B": ts(3)}
    group.advance(MAX_DELAY)
    spread = group.rebalance()
    assert {m: len(a.partitions) for m, a in spread.items()} == {"A": 3, "B": 3}
    assert revoked(spread) == {}
    assert delays(spread) == {0}


def test_new_partitions_are_assigned_while_lost_ones_wait() -> None:
    group = seed_group()
    group.leave("D")
    group.rebalance()
    group.partitions["T"] = 6  # T5, T6 appear
    grown = group.rebalance()
    assigned = frozenset().union(*(a.partitions for a in grown.values()))
    assert assigned == ts(1, 2, 3, 5, 6)
    assert revoked(grown) == {}
    assert delays(grown) == {MAX_DELAY}


def test_static_member_gets_its_own_partitions_back_by_instance_id() -> None:
    group = Group({"T": 4})
    group.join("A", ts(1))
    group.join("B", ts(2))
    group.join("C", ts(3), instance="c")
    group.join("D", ts(4), instance="d")
    group.rebalance()
    group.leave("C", "D")
    group.rebalance()
    group.advance(60_000)
    group.join("D-restarted", instance="d")  # a new member id, the same instance id
    back = group.rebalance()
    assert back["D-restarted"].partitions == ts(4)  # not T3: that was c's
    assert all(T(3) not in a.partitions for a in back.values())
    assert delays(back) == {MAX_DELAY - 60_000}


# --- leader changes -------------------------------------------------------------------


def test_new_leader_from_the_group_keeps_the_running_delay() -> None:
    group = seed_group()
    group.leave("D")
    group.rebalance(leader="A")
    group.advance(100_000)
    group.leave("A")  # the leader goes too; B learned the delay from its assignment
    held = group.rebalance(leader="B")
    assert {m: a.partitions for m, a in held.items()} == {"B": ts(2), "C": ts(3)}
    assert delays(held) == {MAX_DELAY - 100_000}
    group.advance(MAX_DELAY - 100_000)
    spread = group.rebalance(leader="B")
    assert {m: a.partitions for m, a in spread.items()} in (
        {"B": ts(1, 2), "C": ts(3, 4)},
        {"B": ts(2, 4), "C": ts(1, 3)},
    )
    assert delays(spread) == {0}


def test_new_leader_learned_delay_from_the_scheduled_rebalance_field() -> None:
    """An assignment without our user data: the delay field is the running delay."""
    from huddle.client.assignors.base import MemberAssignment

    group = Group({"T": 4})
    group.join("B", ts(2))
    group.join("C", ts(3))
    group.members["B"].assignor.on_assignment(
        MemberAssignment(partitions=ts(2), scheduled_rebalance_delay_ms=5_000), 7
    )
    held = group.rebalance(leader="B")
    assert delays(held) == {5_000}
    assert {m: a.partitions for m, a in held.items()} == {"B": ts(2), "C": ts(3)}


def test_leader_new_to_the_group_assigns_at_once() -> None:
    group = seed_group()
    group.leave("D")
    group.rebalance(leader="A")
    group.leave("A")
    group.join("E")  # its instance never saw an assignment
    fresh = group.rebalance(leader="E")
    assigned = frozenset().union(*(a.partitions for a in fresh.values()))
    assert assigned == ts(1, 2, 3, 4)
    assert revoked(fresh) == {}
    assert delays(fresh) == {0}


def test_a_leader_that_leaves_is_a_lost_member_even_for_a_leader_with_a_stale_record() -> None:
    """A led once, then B led while D left and the delay expired: when B (the leader) leaves
    and A leads again, A must not trust its old record (D's T4 has moved on), and B's
    partitions are lost like any member's (the seed: "Leader exits ... treated as loss of
    member"): held, with the delay running."""
    group = seed_group()  # led by A: A's record has D(T4)
    group.leave("D")
    group.rebalance(leader="B")
    group.advance(MAX_DELAY)
    spread = group.rebalance(leader="B")  # T4 spread by B
    b_had = spread["B"].partitions
    group.leave("B")
    result = group.rebalance(leader="A")
    assigned = frozenset().union(*(a.partitions for a in result.values()))
    assert assigned == ts(1, 2, 3, 4) - b_had
    assert delays(result) == {MAX_DELAY}


def test_a_new_leader_does_not_hold_partitions_that_were_moving() -> None:
    """A revoked T3 and T4 to hand them to B and C, then left before the hand-over, and B
    leads: T3 and T4 were in flight, not lost, and go out at once; A's own T1 and T2 are
    lost and held."""
    group = Group({"T": 6})
    group.join("A", ts(1, 2, 3, 4))
    group.join("B", ts(5))
    group.join("C", ts(6))
    first = group.rebalance(leader="A")
    assert revoked(first) == {"A": ts(3, 4)}
    group.leave("A")
    follow_up = group.rebalance(leader="B")
    handed = frozenset().union(*(a.partitions for a in follow_up.values()))
    assert handed == ts(3, 4, 5, 6)
    assert delays(follow_up) == {MAX_DELAY}  # T1 and T2 are held for A


def test_a_member_owning_nothing_is_not_taken_for_a_returning_one_when_there_are_too_many() -> None:
    """Three partitions, four members: D owning nothing is just the spare member, not A
    coming back, so A's lost partition is held for A rather than handed to D."""
    group = Group({"T": 3})
    group.join("A", ts(1))
    group.join("B", ts(2))
    group.join("C", ts(3))
    group.join("D")
    group.rebalance(leader="B")
    group.leave("A")
    group.join("E")
    held = group.rebalance(leader="B")
    assert {m: a.partitions for m, a in held.items()} == {
        "B": ts(2),
        "C": ts(3),
        "D": ts(),
        "E": ts(),
    }
    assert delays(held) == {MAX_DELAY}


def test_the_leader_state_of_an_earlier_version_is_still_read() -> None:
    import msgspec

    from huddle.client.assignors.deferred.wire import decode_state, encode_state

    older = b"deferred/2:" + msgspec.msgpack.encode([5_000, {"T": 4}])
    state = decode_state(older)
    assert state is not None
    assert (state.lost_delay_ms, state.partitions, state.moving) == (5_000, {"T": 4}, [])
    now = decode_state(encode_state(7, {"T": 4}, [("T", 2)]))
    assert now is not None
    assert [tuple(tp) for tp in now.moving] == [("T", 2)]


def test_a_new_leader_does_not_hold_a_tied_partition_that_was_in_flight() -> None:
    """B and C both claim T5 in one generation: the round gives it to nobody and both
    revoke it. The leader leaves; the new leader must deal T5, not hold it as lost."""
    group = Group({"T": 6})
    group.join("L", ts(1, 2))
    group.join("B", ts(3, 4, 5))
    group.join("C", ts(5, 6))  # the same generation as B's claim: a tie
    first = group.rebalance(leader="L")
    assert all(T(5) not in a.partitions for a in first.values())
    group.leave("L")
    follow_up = group.rebalance(leader="B")
    handed = frozenset().union(*(a.partitions for a in follow_up.values()))
    assert T(5) in handed  # in flight, not lost
    assert not handed & ts(1, 2)  # L's own partitions are lost: held for it


def test_a_new_leader_does_not_hold_partitions_a_member_gave_up_before_its_join() -> None:
    """B drops topic U and revokes U0 before it joins; the leader changes in that round:
    U0 was given up by a member that is still here, not lost with a member that left."""
    group = Group({"T": 2, "U": 1})
    group.join("A", ts(1), topics=("T", "U"))
    group.join("B", [T(2), TopicPartition("U", 0)], topics=("T", "U"))
    group.join("C", topics=("T", "U"))
    group.rebalance(leader="A")
    group.settle()
    holder = next(m for m, x in group.members.items() if TopicPartition("U", 0) in x.owned)
    dropper = group.members[holder]
    dropper.topics = frozenset({"T"})  # it unsubscribes from U ...
    dropper.owned = frozenset(tp for tp in dropper.owned if tp.topic == "T")  # ... revoking U0
    leader = next(m for m in group.members if m not in (holder, "A"))  # A led so far
    result = group.rebalance(leader=leader)
    handed = frozenset().union(*(a.partitions for a in result.values()))
    assert TopicPartition("U", 0) in handed
    assert delays(result) == {0}
