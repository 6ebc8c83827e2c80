"""Which broker leads each partition, when the listener's node is one of several.

Every partition has one leader that every node names alike (so every client agrees):
among the live brokers, the one whose score for the partition is highest (rendezvous
hashing). The score mixes a 64-bit hash of the topic's name (BLAKE2b), the partition's
index and the broker's id (SplitMix64's finaliser), so the answer depends only on those
and the live brokers, not on the order they were read in. When a broker dies, only the
partitions it led move (each to the next highest score); when one joins, it takes about
one partition in N+1 from the others, and no other partition moves.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Final

_MASK: Final = (1 << 64) - 1
_GOLDEN: Final = 0x9E3779B97F4A7C15
_BROKER: Final = 0xC2B2AE3D27D4EB4F
_MIX1: Final = 0xBF58476D1CE4E5B9
_MIX2: Final = 0x94D049BB133111EB


def _seed(topic: str) -> int:
    digest = hashlib.blake2b(topic.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@lru_cache(maxsize=512)  # a table per topic and set of live brokers
def table(topic: str, count: int, brokers: tuple[int, ...]) -> tuple[int, ...]:
    """The leader of each of ``topic``'s ``count`` partitions among ``brokers`` (their
    ids; at least one)."""
    if len(brokers) == 1:
        return brokers * count
    seed = _seed(topic)
    keyed = [((b * _BROKER) & _MASK, b) for b in brokers]
    leaders = []
    for partition in range(count):
        base = seed ^ ((partition * _GOLDEN) & _MASK)
        best = (-1, -1)
        for key, broker in keyed:  # SplitMix64's finaliser, inlined: this runs N x P times
            x = base ^ key
            x = ((x ^ (x >> 30)) * _MIX1) & _MASK
            x = ((x ^ (x >> 27)) * _MIX2) & _MASK
            scored = (x ^ (x >> 31), broker)
            if scored > best:
                best = scored
        leaders.append(best[1])
    return tuple(leaders)
