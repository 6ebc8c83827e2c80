"""``cooperative-deferred``: Design III pacing of balancing moves, the back-off of
consecutive revoking rounds, and validity over random membership histories."""

from __future__ import annotations

import math
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from huddle.client.assignors.base import GroupAssignment
from huddle.protocol.embedded import TopicPartition
from tests.assignors.deferred_sim import Group, T, delays, revoked

# --- Design III -----------------------------------------------------------------------


def scale_out(**settings: int) -> Group:
    """A owns all 12 partitions of T; B, C and D join."""
    group = Group({"T": 12}, dict(settings))
    group.join("A", [T(n) for n in range(1, 13)])
    group.rebalance()
    for member_id in "BCD":
        group.join(member_id)
    return group


def test_moves_are_paced_k_per_round_until_balanced() -> None:
    group = scale_out(max_moves_per_round=2)
    rounds = group.settle()
    history = group.rounds[1:]
    assert len(history) == rounds
    revoking = [r for r in history if revoked(r)]
    assert len(revoking) == math.ceil(9 / 2)  # A gives up 9 partitions, 2 at a time
    moved: Counter[TopicPartition] = Counter()
    for result in history:
        gone = frozenset().union(*(a.revoked for a in result.values()))
        assert len(gone) <= 2
        assert set(revoked(result)) <= {"A"}  # only A has anything to give
        got = frozenset().union(*(a.partitions for a in result.values()))
        assert not gone & got  # revoked partitions go to nobody in the same round
        moved.update(gone)
    assert all(n == 1 for n in moved.values())  # each moving partition stops once
    assert sorted(map(len, group.owned().values())) == [3, 3, 3, 3]
    assert rounds == len(revoking) + 1  # each batch is handed over by the next round


def test_unpaced_scale_out_moves_everything_in_one_round() -> None:
    group = scale_out()
    assert group.settle() == 2
    first = group.rounds[1]
    assert len(first["A"].revoked) == 9


def test_pause_between_batches_is_scheduled() -> None:
    group = scale_out(max_moves_per_round=4, move_pause_ms=10_000)
    batch = group.rebalance()
    assert len(batch["A"].revoked) == 4
    assert batch["A"].scheduled_rebalance_delay_ms == 0  # revoking: it rejoins at once
    others = {m: a for m, a in batch.items() if m != "A"}
    assert delays(others) == {10_000}  # more to move: come back after the pause
    group.advance(1_000)
    handover = group.rebalance()  # A rejoins at once after revoking
    assert revoked(handover) == {}
    assert delays(handover) == {9_000}
    assert sum(len(a.partitions) for a in handover.values()) == 12
    group.advance(9_000)
    assert len(group.rebalance()["A"].revoked) == 4
    group.settle()
    assert sorted(map(len, group.owned().values())) == [3, 3, 3, 3]


# --- back-off -------------------------------------------------------------------------


def flap_once(group: Group) -> GroupAssignment:
    """D joins (the round that wants T4 from A), and leaves again before the hand-over."""
    group.join("D")
    result = group.rebalance()
    group.leave("D")
    group.rebalance()
    return result


def test_a_flapping_member_backs_off_revocations_exponentially() -> None:
    group = Group({"T": 4}, {"revoke_backoff_initial_ms": 1_000, "revoke_backoff_max_ms": 5_000})
    group.join("A", [T(1), T(4)])
    group.join("B", [T(2)])
    group.join("C", [T(3)])
    first = flap_once(group)
    assert revoked(first) == {"A": frozenset({T(4)})}  # nothing to back off from yet
    waits = []
    for _ in range(5):
        group.join("D")
        wait = group.rebalance()
        assert revoked(wait) == {}  # backing off: A keeps T4 for now
        (delay,) = delays(wait)
        waits.append(delay)
        group.advance(delay)
        after = group.rebalance()  # the scheduled rebalance: now it revokes
        assert revoked(after) == {"A": frozenset({T(4)})}
        group.leave("D")  # ... and D is gone again before the hand-over
        group.rebalance()
    assert waits == [1_000, 2_000, 4_000, 5_000, 5_000]


def test_a_quiet_round_resets_the_back_off() -> None:
    group = Group({"T": 6})
    group.join("A", [T(n) for n in range(1, 7)])
    group.rebalance()
    group.join("B")
    group.settle()  # revoke, then the quiet hand-over
    group.join("C")
    result = group.rebalance()
    assert revoked(result)  # at once: no back-off
    assert delays(result) == {0}


# --- validity over random histories ---------------------------------------------------

EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.integers(0, 5)),
        st.tuples(st.just("leave"), st.integers(0, 5)),
        st.tuples(st.just("wait"), st.sampled_from([1_000, 50_000, 400_000])),
        st.tuples(st.just("grow"), st.integers(1, 3)),
    ),
    max_size=12,
)


def subscribed(group: Group) -> set[TopicPartition]:
    topics = frozenset().union(*(m.topics for m in group.members.values()))
    return {
        TopicPartition(topic, p)
        for topic, count in group.partitions.items()
        if topic in topics
        for p in range(count)
    }


def check_round(group: Group, result: GroupAssignment) -> None:
    """One owner per partition; anything unassigned is being revoked or waited for."""
    counts = Counter(tp for a in result.values() for tp in a.partitions)
    assert all(n == 1 for n in counts.values())
    every = subscribed(group)
    unassigned = every - set(counts) - frozenset().union(*(a.revoked for a in result.values()))
    for a in result.values():  # the seed: a delay only where nothing is revoked
        assert not (a.revoked and a.scheduled_rebalance_delay_ms > 0)
    if unassigned and group.members:
        assert all(a.scheduled_rebalance_delay_ms > 0 for a in result.values() if not a.revoked)


@settings(max_examples=60, deadline=None)
@given(
    events=EVENTS,
    k=st.one_of(st.none(), st.integers(1, 3)),
    pause=st.sampled_from([0, 2_000]),
)
def test_every_round_is_valid_and_the_group_converges(
    events: list[tuple[str, int]], k: int | None, pause: int
) -> None:
    group = Group({"T": 8}, {"max_moves_per_round": k, "move_pause_ms": pause})
    group.join("m0")
    serial = 1
    for kind, value in events:
        if kind == "join":
            static = f"s{value}" if value % 2 else None
            if static and any(m.instance == static for m in group.members.values()):
                continue
            group.join(f"m{serial}", instance=static)
            serial += 1
        elif kind == "leave" and len(group.members) > 1:
            group.leave(sorted(group.members)[value % len(group.members)])
        elif kind == "wait":
            group.advance(value)
        elif kind == "grow":
            group.partitions["T"] += value
        check_round(group, group.rebalance())
    settled_from = len(group.rounds)
    group.settle()
    for result in group.rounds[settled_from:]:
        check_round(group, result)
    for result in group.rounds:
        assert not any(a.revoked & a.partitions for a in result.values())
    loads = [len(tps) for tps in group.owned().values()]
    assert sum(loads) == group.partitions["T"]
    assert max(loads) - min(loads) <= 1


@settings(max_examples=40, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.sampled_from(["join", "leave", "wait"]), st.integers(0, 3)), max_size=10
    ),
    k=st.one_of(st.none(), st.integers(1, 2)),
)
def test_unequal_subscriptions_stay_valid_and_settle(
    events: list[tuple[str, int]], k: int | None
) -> None:
    choices = [("T",), ("T", "U"), ("U",), ("T", "U")]
    group = Group({"T": 5, "U": 4}, {"max_moves_per_round": k})
    group.join("m0", topics=("T", "U"))
    serial = 1
    for kind, value in events:
        if kind == "join":
            group.join(f"m{serial}", topics=choices[value])
            serial += 1
        elif kind == "leave" and len(group.members) > 1:
            group.leave(sorted(group.members)[value % len(group.members)])
        elif kind == "wait":
            group.advance(value * 150_000)
        check_round(group, group.rebalance())
    settled_from = len(group.rounds)
    group.settle()
    for result in group.rounds[settled_from:]:
        check_round(group, result)
    owned = [tp for tps in group.owned().values() for tp in tps]
    assert sorted(owned) == sorted(subscribed(group))
    for member in group.members.values():
        assert all(tp.topic in member.topics for tp in member.owned)
