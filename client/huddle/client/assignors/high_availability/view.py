"""What the high-availability assignor knows in one round: tasks, owners, claims, lags.

Tasks are partitions, numbered as in ``_layout`` (pid order is (topic, partition) order);
members are numbered by ``member_order``. A member is *caught up* on a task when it runs
it now (lists it in ``owned``) or reports a lag of at most ``acceptable_lag`` for it.
A task is *stateful* when some member reports a lag for it; nobody needs to warm up
for a stateless task.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from huddle.client.assignors._claims import Ownership, resolve
from huddle.client.assignors._layout import Layout
from huddle.client.assignors._order import member_order
from huddle.client.assignors._rules import CLAIM_RULES, ClaimRules
from huddle.client.assignors.base import MemberSubscription
from huddle.protocol.embedded import TopicPartition

NO_STATE = sys.maxsize
"""The rank of a member without local state for a task: behind every reported lag."""


@dataclass(slots=True)
class View:
    order: list[str]
    subs: list[MemberSubscription]
    layout: Layout
    ownership: Ownership
    tasks: list[TopicPartition]
    """pid -> the task."""
    topic_of: list[int]
    interests: list[frozenset[int]]
    """member -> indexes (into ``layout.topics``) of the topics it subscribes to."""
    owner: list[int]
    """pid -> the member that owns it by right (winning claim, subscribed); -1: none."""
    claimants: list[list[int]]
    """pid -> every member that lists it in ``owned`` (any generation), ascending."""
    lags: list[dict[int, int]]
    """member -> pid -> reported lag."""
    stateful: list[bool]
    acceptable_lag: int

    @property
    def members(self) -> int:
        return len(self.order)

    def eligible(self, member: int, pid: int) -> bool:
        return self.topic_of[pid] in self.interests[member]

    def caught_up(self, member: int, pid: int) -> bool:
        if member in self.claimants[pid]:
            return True
        lag = self.lags[member].get(pid)
        return lag is not None and lag <= self.acceptable_lag

    def rank(self, member: int, pid: int) -> int:
        """How far ``member`` is from taking ``pid`` over: 0 when it could at once."""
        if not self.stateful[pid] or self.caught_up(member, pid):
            return 0
        return self.lags[member].get(pid, NO_STATE)


def build_view(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, MemberSubscription],
    acceptable_lag: int,
    rules: ClaimRules = CLAIM_RULES,
) -> View:
    order = member_order(subscriptions)
    subs = [subscriptions[member] for member in order]
    layout = Layout(partitions_per_topic, frozenset().union(*(sub.topics for sub in subs)))
    ownership = resolve(layout, subs, rules)
    index = {topic: i for i, topic in enumerate(layout.topics)}
    total = layout.total
    owner = [-1] * total
    for member, pids in enumerate(ownership.owned):
        for pid in pids:
            owner[pid] = member
    claimants: list[list[int]] = [[] for _ in range(total)]
    lags: list[dict[int, int]] = []
    stateful = [False] * total
    for member, sub in enumerate(subs):
        for tp in sorted(sub.owned):
            claimed = _pid(layout, tp)
            if claimed is not None:
                claimants[claimed].append(member)
        mine: dict[int, int] = {}
        for tp, lag in sub.lags.items():
            known = _pid(layout, tp)
            if known is not None:
                mine[known] = lag
                stateful[known] = True
        lags.append(mine)
    return View(
        order=order,
        subs=subs,
        layout=layout,
        ownership=ownership,
        tasks=layout.complete(list(ownership.objects)),
        topic_of=layout.topic_of(),
        interests=[frozenset(index[t] for t in sub.topics if t in index) for sub in subs],
        owner=owner,
        claimants=claimants,
        lags=lags,
        stateful=stateful,
        acceptable_lag=acceptable_lag,
    )


def _pid(layout: Layout, tp: TopicPartition) -> int | None:
    start = layout.start.get(tp.topic)
    if start is None or not 0 <= tp.partition < layout.count[tp.topic]:
        return None
    return start + tp.partition
