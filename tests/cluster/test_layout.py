"""Shards over live nodes: even, sticky, the same on every node."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from huddle.coordinator.cluster.layout import target_owners

node_ids = st.sets(st.sampled_from([f"n{i}" for i in range(8)]), min_size=1)


def test_a_node_joining_takes_an_even_share_and_nothing_else_moves() -> None:
    two = target_owners(12, ["a", "b"], {})
    assert sorted(two.values()).count("a") == 6
    three = target_owners(12, ["a", "b", "c"], two)
    assert [o for o in three.values()].count("c") == 4
    moved = [s for s in range(12) if three[s] != two[s]]
    assert len(moved) == 4  # exactly the new node's share
    assert all(three[s] == "c" for s in moved)


def test_a_dead_nodes_shards_go_to_the_others_and_no_other_shard_moves() -> None:
    three = target_owners(12, ["a", "b", "c"], {})
    two = target_owners(12, ["a", "c"], three)
    assert set(two.values()) == {"a", "c"}
    assert all(two[s] == three[s] for s in range(12) if three[s] != "b")


def test_no_live_node_no_owner() -> None:
    assert target_owners(4, [], {0: "a"}) == {}


@given(
    shards=st.integers(min_value=1, max_value=64),
    nodes=node_ids,
    before=node_ids,
)
def test_even_complete_and_moving_the_fewest(
    shards: int, nodes: set[str], before: set[str]
) -> None:
    current = target_owners(shards, before, {})
    after = target_owners(shards, nodes, current)
    assert set(after) == set(range(shards))  # every shard has an owner
    assert set(after.values()) <= nodes
    loads = [list(after.values()).count(n) for n in nodes]
    assert max(loads) - min(loads) <= 1  # even
    # the fewest moves: every shard of a dead node, and what live nodes hold over their
    # share, the larger shares going to the nodes that hold the most
    base, extra = divmod(shards, len(nodes))
    held = sorted((list(current.values()).count(n) for n in nodes), reverse=True)
    caps = [base + 1] * extra + [base] * (len(nodes) - extra)
    least = sum(1 for s in range(shards) if current[s] not in nodes)
    least += sum(max(0, h - c) for h, c in zip(held, caps, strict=True))
    assert sum(1 for s in range(shards) if after[s] != current[s]) == least
    assert after == target_owners(shards, sorted(nodes, reverse=True), current)  # order-free
