"""Which previous ownership claims the sticky assignors honour.

Claims on topics that no longer exist (or that nobody subscribes to) and on partition
indexes out of range are dropped. Of the remaining claims on one partition the highest
generation wins; two claims tied at the highest generation cancel out: neither member
keeps the partition, and a cooperative round gives it to nobody until both have revoked it
(it is contested, not unowned). Generation -1 (no generation) is lower than every real one.

A winning claim on a topic the claimant no longer subscribes to is *stray*: the member
cannot keep it, but it may still be working on it, so a cooperative round revokes it
from that member before anyone else gets it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from huddle.client.assignors._layout import Layout
from huddle.client.assignors._rules import CLAIM_RULES, ClaimRules
from huddle.client.assignors._rules import NOBODY as NOBODY  # the deferred modules use it
from huddle.client.assignors.base import MemberSubscription
from huddle.protocol.embedded import TopicPartition

_NEVER = -(1 << 62)  # below every generation, -1 included


@dataclass(slots=True)
class Ownership:
    """Members are numbered by their position in the sequence given to ``resolve``."""

    owner: list[int]
    """pid -> number of the member whose claim won (stray or not); negative if none."""
    owned: list[list[int]]
    """member -> the pids it owns by right and may keep (subscribed), ascending."""
    stray: list[list[int]]
    """member -> the pids it owns by right on topics it no longer subscribes to."""
    objects: list[TopicPartition | None]
    """pid -> the object some member sent for it, if any."""
    intact: list[bool]
    """member -> every claim it sent is in ``owned`` (its set can be reused as is)."""

    def up_for_grabs(self) -> list[int]:
        """The pids no member may keep: unowned, contested or stray; ascending."""
        free = [pid for pid, owner in enumerate(self.owner) if owner < 0]
        if any(self.stray):
            free.extend(pid for pids in self.stray for pid in pids)
            free.sort()
        return free


def resolve(
    layout: Layout, members: Sequence[MemberSubscription], rules: ClaimRules = CLAIM_RULES
) -> Ownership:
    total = layout.total
    owner = [NOBODY] * total
    best = [_NEVER] * total
    objects: list[TopicPartition | None] = [None] * total
    claims: list[tuple[list[int], list[int]]] = []
    # topic -> (first pid, partition count, subscribed), one dict per distinct subscription
    spans: dict[frozenset[str], dict[str, tuple[int, int, bool]]] = {}
    for number, sub in enumerate(members):
        where = spans.get(sub.topics)
        if where is None:
            where = spans[sub.topics] = {
                topic: (layout.start[topic], layout.count[topic], topic in sub.topics)
                for topic in layout.topics
            }
        generation = sub.generation
        kept: list[int] = []
        strays: list[int] = []
        for tp in sub.owned:
            span = where.get(tp[0])
            if span is None or not 0 <= tp[1] < span[1]:
                continue
            pid = span[0] + tp[1]
            (kept if span[2] else strays).append(pid)
            objects[pid] = tp
            held = best[pid]
            if generation > held:
                best[pid] = generation
                owner[pid] = number
            elif generation == held:
                owner[pid] = rules.tie(owner[pid])
        claims.append((kept, strays))
    owned: list[list[int]] = []
    stray: list[list[int]] = []
    intact: list[bool] = []
    for number, (sub, (kept, strays)) in enumerate(zip(members, claims, strict=True)):
        mine = [pid for pid in kept if owner[pid] == number]
        mine.sort()
        owned.append(mine)
        stray.append(sorted(pid for pid in strays if owner[pid] == number))
        intact.append(len(mine) == len(sub.owned))
    return Ownership(owner=owner, owned=owned, stray=stray, objects=objects, intact=intact)
