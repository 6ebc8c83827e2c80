"""Kafka Streams' high-availability assignment (KIP-441) for partitions as tasks.

Members report the lag of their local state per task. Actives only go to members that are
caught up (within ``acceptable_recovery_lag``, or running the task now), so a rebalance
never stalls a task on a long restore. Where balance wants a task on a member that is not
caught up, the active stays put and that member gets a *warm-up* replica (at most
``max_warmup_replicas`` in a round); every member is then told to rebalance again after
``probing_rebalance_interval_ms`` (a *probing* rebalance), which moves the active once the
warm-up reports it has caught up. ``num_standby_replicas`` standbys per stateful task keep
state warm on other members for fail-over.

Moves are cooperative: an active leaving its owner is left out for a round; the owner
revokes it and rejoins, and the follow-up rebalance hands it over. A balanced assignment
fed back as ownership with the same lags comes back unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from huddle.client.assignors.base import (
    ASSIGNORS,
    Assignor,
    GroupAssignment,
    MemberAssignment,
    MemberSubscription,
    RebalanceProtocol,
)
from huddle.client.assignors.high_availability.place import Placement, place
from huddle.client.assignors.high_availability.target import balanced_target
from huddle.client.assignors.high_availability.view import View, build_view
from huddle.client.checks import require_number
from huddle.protocol.embedded import TopicPartition


@ASSIGNORS.register
class HighAvailabilityAssignor(Assignor):
    name = "high-availability"
    supported_protocols = (RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE)
    needs_huddle_format = True  # task lags, standbys and warm-ups

    def __init__(
        self,
        *,
        acceptable_recovery_lag: int = 10_000,
        num_standby_replicas: int = 0,
        max_warmup_replicas: int = 2,
        probing_rebalance_interval_ms: int = 600_000,
        balance_factor: int = 1,
    ) -> None:
        require_number(
            "acceptable_recovery_lag", acceptable_recovery_lag, positive=False, whole=True
        )
        require_number("num_standby_replicas", num_standby_replicas, positive=False, whole=True)
        require_number("max_warmup_replicas", max_warmup_replicas, positive=True, whole=True)
        require_number(
            "probing_rebalance_interval_ms",
            probing_rebalance_interval_ms,
            positive=True,
            whole=True,
        )
        require_number("balance_factor", balance_factor, positive=True, whole=True)
        self.balance_factor = balance_factor
        self.acceptable_recovery_lag = acceptable_recovery_lag
        self.num_standby_replicas = num_standby_replicas
        self.max_warmup_replicas = max_warmup_replicas
        self.probing_rebalance_interval_ms = probing_rebalance_interval_ms

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> GroupAssignment:
        if not subscriptions:
            return {}
        lag = self.acceptable_recovery_lag
        view = build_view(partitions_per_topic, subscriptions, lag, self.claim_rules)
        target = balanced_target(view, self.balance_factor)
        placement = place(view, target, self.num_standby_replicas, self.max_warmup_replicas)
        delay = self.probing_rebalance_interval_ms if placement.warming else 0
        return _assignments(view, placement, delay)


def _assignments(view: View, placement: Placement, delay: int) -> GroupAssignment:
    """An active goes out only once nobody else may still run it: a task claimed by another
    member is left out this round (unless the active owns it by right), and every claim
    that is not kept is revoked."""
    running: list[list[int]] = [[] for _ in range(view.members)]
    for pid, member in enumerate(placement.active):
        others = [m for m in view.claimants[pid] if m != member]
        if not others or view.owner[pid] == member:
            running[member].append(pid)
    tasks = view.tasks
    result: GroupAssignment = {}
    for member, (member_id, sub) in enumerate(zip(view.order, view.subs, strict=True)):
        partitions: frozenset[TopicPartition] = frozenset(map(tasks.__getitem__, running[member]))
        if partitions == sub.owned:
            partitions = sub.owned
        result[member_id] = MemberAssignment(
            partitions=partitions,
            revoked=sub.owned - partitions,
            scheduled_rebalance_delay_ms=delay,
            standby=frozenset(map(tasks.__getitem__, placement.standby[member])),
            warmup=frozenset(map(tasks.__getitem__, placement.warmup[member])),
        )
    return result
