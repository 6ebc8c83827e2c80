"""The assertion tests of a group reach for: it settles with every partition owned once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import anyio

from huddle.client.member import Member
from huddle.client.member_core import MemberState
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import HuddleError

POLL_S = 0.02


class NotSettledError(HuddleError, AssertionError):
    """The group did not settle in time; says who owned what at the deadline."""


def settled(members: Iterable[Member], expected: frozenset[TopicPartition]) -> bool:
    """Every member stable in one generation, and every expected partition owned by
    exactly one of them (none owned twice, none left over)."""
    members = list(members)
    if not members or any(m.state is not MemberState.STABLE for m in members):
        return False
    if len({m.generation for m in members}) != 1:
        return False
    owned = [tp for m in members for tp in m.assignment]
    return len(owned) == len(set(owned)) and set(owned) == expected


async def wait_settled(
    members: Iterable[Member],
    partitions: Mapping[str, int],
    within: float = 10.0,
    *,
    poll_s: float = POLL_S,
) -> None:
    """Wait until the members settle with every partition of ``partitions`` (topic ->
    count) owned exactly once; NotSettledError after ``within`` seconds. A member that
    failed (the coordinator refused it for good, say) will never settle: its
    ``MemberFailedError`` is raised at once. The members are looked at every ``poll_s``
    seconds (a benchmark timing the settling asks for a finer grain)."""
    group = list(members)
    expected = frozenset(TopicPartition(t, p) for t, n in partitions.items() for p in range(n))
    with anyio.move_on_after(within):
        # members change state each on its own, with nothing to wait on for all of them
        while not settled(group, expected):
            for m in group:
                if m.failure is not None:
                    raise m.failure
            await anyio.sleep(poll_s)
        return
    owners = [
        f"{m.member_id or '(no member id)'} {m.state.value}: {sorted(m.assignment)}" for m in group
    ]
    raise NotSettledError(
        f"the group did not settle within {within:g} s with {len(expected)} partitions "
        f"owned once; owned: {'; '.join(owners)}"
    )
