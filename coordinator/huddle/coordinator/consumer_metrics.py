"""Prometheus metrics of the consumer-protocol (KIP-848) groups (``--metrics-port``).

The server's ``ConsumerService`` counts, as it answers heartbeats (on either wire) and
expires members, the group epoch bumps and the members it fences; the groups and their members are
read at scrape. Names, all under ``huddle_``, as Kafka's group coordinator metrics name
them where they fit (``consumer-group-count{state}``, ``consumer-group-rebalance-count``):

- ``consumer_groups{state}`` (gauge: Empty, Assigning, Reconciling, Stable);
- ``consumer_group_members`` (gauge: members of every consumer group);
- ``consumer_group_rebalances_total`` (each group epoch bump: a member joined, left, was
  fenced or changed its subscription, or the subscribed topics changed);
- ``consumer_members_fenced_total{reason}`` (``session``: its session timed out;
  ``revocation``: it did not revoke within its rebalance timeout; ``epoch``: a heartbeat
  answered FENCED_MEMBER_EPOCH).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Final, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from huddle.coordinator.consumer import ConsumerCoordinator, GroupPhase

FENCED_BY_EPOCH: Final = "epoch"  # the reason a heartbeat answered FENCED_MEMBER_EPOCH counts


class ConsumerCounts:
    """What the consumer groups' server counts as it goes."""

    def __init__(self) -> None:
        self.rebalances = 0
        self.fenced: Counter[str] = Counter()


class ConsumerMetricsSource(Protocol):
    @property
    def core(self) -> ConsumerCoordinator: ...

    @property
    def counts(self) -> ConsumerCounts: ...


def collect(source: ConsumerMetricsSource) -> Iterator[Metric]:
    by_phase: Counter[str] = Counter()
    members = 0
    for group in list(source.core.groups.values()):
        by_phase[group.phase.value] += 1
        members += len(group.members)
    states = GaugeMetricFamily(
        "huddle_consumer_groups", "Consumer-protocol groups by state", labels=["state"]
    )
    for phase in GroupPhase:
        states.add_metric([phase.value], by_phase.get(phase.value, 0))
    yield states
    yield GaugeMetricFamily(
        "huddle_consumer_group_members", "Members of every consumer-protocol group", value=members
    )
    counts = source.counts
    yield CounterMetricFamily(
        "huddle_consumer_group_rebalances",
        "Group epoch bumps of consumer-protocol groups",
        value=counts.rebalances,
    )
    fenced = CounterMetricFamily(
        "huddle_consumer_members_fenced",
        "Consumer-protocol members fenced, by reason (session, revocation, epoch)",
        labels=["reason"],
    )
    for reason in ("session", "revocation", FENCED_BY_EPOCH):
        fenced.add_metric([reason], counts.fenced.get(reason, 0))
    yield fenced
