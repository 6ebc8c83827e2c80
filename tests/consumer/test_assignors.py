"""The consumer protocol's server-side assignors, ``uniform`` and ``range``: known answers, and
properties over random groups (every partition once, balance, and for ``uniform`` that only
what balance requires moves)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from huddle.coordinator.consumer.assignors import (
    ASSIGNORS,
    AssignorError,
    MemberSpec,
    spec_of,
)
from huddle.coordinator.consumer.messages import Assignment

Target = Mapping[str, Assignment]


def assign(
    name: str,
    partitions: Mapping[str, int],
    subscriptions: Mapping[str, frozenset[str]],
    previous: Target | None = None,
    instances: Mapping[str, str] | None = None,
) -> Target:
    members = {
        m: MemberSpec(m, topics, (previous or {}).get(m, {}), instance_id=(instances or {}).get(m))
        for m, topics in subscriptions.items()
    }
    return ASSIGNORS[name].assign(spec_of(members, partitions)).assignments


def owners(result: Target) -> dict[tuple[str, int], str]:
    found: dict[tuple[str, int], str] = {}
    for member_id, assignment in result.items():
        for topic, ps in assignment.items():
            for p in ps:
                assert (topic, p) not in found, f"{topic}-{p} assigned twice"
                found[topic, p] = member_id
    return found


def sizes(result: Target) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def every(partitions: Mapping[str, int], topics: frozenset[str]) -> set[tuple[str, int]]:
    return {(t, p) for t in topics for p in range(partitions[t])}


def test_uniform_first_assignment_is_runs_in_member_order() -> None:
    result = assign("uniform", {"a": 7}, dict.fromkeys(("m1", "m2", "m3"), frozenset({"a"})))
    assert result == {
        "m1": {"a": frozenset({0, 1, 2})},
        "m2": {"a": frozenset({3, 4})},
        "m3": {"a": frozenset({5, 6})},
    }


def test_uniform_join_moves_one_partition_to_the_newcomer() -> None:
    subs = dict.fromkeys(("m1", "m2", "m3"), frozenset({"a"}))
    first = assign("uniform", {"a": 7}, subs)
    after = assign("uniform", {"a": 7}, {**subs, "m4": frozenset({"a"})}, first)
    assert after == {
        "m1": {"a": frozenset({0, 1})},
        "m2": {"a": frozenset({3, 4})},
        "m3": {"a": frozenset({5, 6})},
        "m4": {"a": frozenset({2})},
    }


def test_uniform_unequal_subscriptions_are_balanced_where_they_can_be() -> None:
    result = assign(
        "uniform", {"a": 4, "b": 4}, {"m1": frozenset({"a"}), "m2": frozenset({"a", "b"})}
    )
    assert result == {"m1": {"a": frozenset(range(4))}, "m2": {"b": frozenset(range(4))}}


def test_range_puts_static_members_first_then_member_ids() -> None:
    result = assign(
        "range",
        {"a": 5, "b": 2},
        {"m1": frozenset({"a", "b"}), "m2": frozenset({"a"})},
        instances={"m2": "i2"},
    )
    assert result == {
        "m2": {"a": frozenset({0, 1, 2})},
        "m1": {"a": frozenset({3, 4}), "b": frozenset({0, 1})},
    }


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_a_topic_without_metadata_is_an_assignor_error(name: str) -> None:
    with pytest.raises(AssignorError):
        assign(name, {"a": 1}, {"m1": frozenset({"zz"})})


def required_moves(before: Mapping[str, int], members: int, total: int) -> int:
    """The fewest partitions that must change member to go from ``before`` (partitions each
    member keeps a claim on) to a balanced assignment of ``total`` over ``members``."""
    floor, extra = divmod(total, members)
    counts = sorted([*before.values(), *[0] * (members - len(before))], reverse=True)
    kept = sum(min(c, floor + (1 if i < extra else 0)) for i, c in enumerate(counts))
    return total - kept


@settings(max_examples=150, deadline=None)
@given(
    partitions=st.dictionaries(st.sampled_from("abcde"), st.integers(0, 12), min_size=1),
    first=st.integers(1, 7),
    joining=st.integers(0, 4),
    leaving=st.integers(0, 4),
)
def test_uniform_homogeneous_moves_only_what_balance_requires(
    partitions: dict[str, int], first: int, joining: int, leaving: int
) -> None:
    topics = frozenset(partitions)
    old = [f"m{i}" for i in range(first)]
    before = assign("uniform", partitions, dict.fromkeys(old, topics))
    assert set(owners(before)) == every(partitions, topics)
    staying = old[min(leaving, first - 1) :]
    now = staying + [f"n{i}" for i in range(joining)]
    after = assign("uniform", partitions, dict.fromkeys(now, topics), before)
    placed = owners(after)
    assert set(placed) == every(partitions, topics)
    counts = sizes(after)
    assert max(counts.values()) - min(counts.values()) <= 1
    was = owners(before)
    moved = sum(1 for tp, m in placed.items() if was.get(tp) != m)
    kept_claims = {m: n for m, n in sizes(before).items() if m in staying}
    assert moved == required_moves(kept_claims, len(now), sum(partitions.values()))


@settings(max_examples=150, deadline=None)
@given(
    partitions=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 9), min_size=1),
    data=st.data(),
)
def test_uniform_unequal_subscriptions_end_balanced(
    partitions: dict[str, int], data: st.DataObject
) -> None:
    names = sorted(partitions)
    subscribe = st.frozensets(st.sampled_from(names), min_size=1)
    subs = data.draw(
        st.dictionaries(st.sampled_from(["m1", "m2", "m3", "m4", "m5"]), subscribe, min_size=1)
    )
    result = assign("uniform", partitions, subs)
    wanted = set().union(*(every(partitions, t) for t in subs.values()))
    placed = owners(result)
    assert set(placed) == wanted
    for (topic, _), member_id in placed.items():
        assert topic in subs[member_id]
    load = sizes(result)
    for heavy, assignment in result.items():
        for topic, ps in assignment.items():
            if ps:
                lighter = [m for m, t in subs.items() if topic in t and load[m] <= load[heavy] - 2]
                assert lighter == [], f"{heavy} could give {topic} to {lighter}"
    again = assign("uniform", partitions, subs, result)
    assert again == result  # fed back, nothing moves


@settings(max_examples=100, deadline=None)
@given(
    partitions=st.dictionaries(st.sampled_from("abcd"), st.integers(0, 9), min_size=1),
    members=st.integers(1, 6),
)
def test_range_gives_each_subscriber_a_run_of_each_topic(
    partitions: dict[str, int], members: int
) -> None:
    topics = frozenset(partitions)
    result = assign("range", partitions, {f"m{i}": topics for i in range(members)})
    assert set(owners(result)) == every(partitions, topics)
    for assignment in result.values():
        for topic, ps in assignment.items():
            assert ps == frozenset(range(min(ps), max(ps) + 1))
            share = partitions[topic] // members
            assert share <= len(ps) <= share + 1
