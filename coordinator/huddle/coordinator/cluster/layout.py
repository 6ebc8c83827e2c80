"""Which live node should own each shard: even, and moving as few shards as it can.

Every node owns either ``floor(S / N)`` or ``ceil(S / N)`` of the ``S`` shards over ``N`` live
nodes. A shard stays with its owner while the owner is live and under its share; only the
excess moves, to the nodes furthest under theirs. The result depends only on its inputs (node
ids sorted, shards in number order), so every node computes the same layout from the same
view of etcd.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


def target_owners(
    shards: int, nodes: Collection[str], current: Mapping[int, str]
) -> dict[int, str]:
    """``current``: shard -> the node that owns it now (shards nobody owns are left out).
    Returns an owner for every shard in ``range(shards)``; empty if no node is live."""
    live = sorted(set(nodes))
    if not live or shards <= 0:
        return {}
    base, extra = divmod(shards, len(live))
    # the first ``extra`` nodes by current load (most loaded first, then by id) may hold
    # base + 1: those that already hold the most keep the most, so the fewest shards move
    held: dict[str, list[int]] = {node: [] for node in live}
    for shard in range(shards):
        owner = current.get(shard)
        if owner in held:
            held[owner].append(shard)
    by_load = sorted(live, key=lambda node: (-len(held[node]), node))
    cap = {node: base + (1 if i < extra else 0) for i, node in enumerate(by_load)}
    owners: dict[int, str] = {}
    loose: list[int] = []
    for node in live:
        kept = held[node][: cap[node]]
        for shard in kept:
            owners[shard] = node
        loose.extend(held[node][cap[node] :])
    loose.extend(s for s in range(shards) if current.get(s) not in held)
    loose.sort()
    room = [(node, cap[node] - sum(1 for o in owners.values() if o == node)) for node in live]
    for node, free in room:
        for _ in range(free):
            owners[loose.pop(0)] = node
    return owners
