"""What a sticky plan says about each member, and the round-robin deal that fills it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from huddle.protocol.errors import InvalidArgumentError


@dataclass(slots=True)
class Plan:
    """Per member (by number): pids it keeps from its valid claims, pids it is newly given,
    pids of its valid claims it gives up. ``kept + dealt`` is its target assignment.

    A plan never deals a member a partition it released, so ``released`` is exactly what
    the member loses."""

    kept: list[list[int]]
    dealt: list[list[int]]
    released: list[list[int]]


def deal(pool: Sequence[int], needs: Sequence[int]) -> list[list[int]]:
    """Deal ``pool`` in order, one pid per round to each taker that still needs one.

    Taker ``i`` takes ``needs[i]`` pids; the needs sum to ``len(pool)``. Returns each
    taker's pids. Rounds with the same set of takers are dealt with strided slices rather
    than one pid at a time.
    """
    if sum(needs) != len(pool):
        raise InvalidArgumentError(f"needs add up to {sum(needs)}, the pool holds {len(pool)}")
    hands: list[list[int]] = [[] for _ in needs]
    active = [i for i, need in enumerate(needs) if need > 0]
    done = 0
    position = 0
    for level in sorted({needs[i] for i in active}):
        width = len(active)
        span = pool[position : position + (level - done) * width]
        for rank, i in enumerate(active):
            hands[i].extend(span[rank::width])
        position += len(span)
        done = level
        active = [i for i in active if needs[i] > level]
    return hands
