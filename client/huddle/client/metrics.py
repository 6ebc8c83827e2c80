"""The member library's Prometheus metrics, in a registry the application passes in
(``Member(..., metrics_registry=registry)``).

Each member keeps plain numbers (``MemberStats``); one collector per registry reads them
when Prometheus scrapes, labelled by ``group`` and ``client_id``, so many members share one
registry and running costs nothing but a few assignments per rebalance. Names:

- ``huddle_member_rebalances_total``: rebalances it took part in (JoinGroups sent);
- ``huddle_member_unassigned_seconds_total``: time it owned no partition;
- ``huddle_member_partitions_owned``: partitions it owns now;
- ``huddle_member_last_rebalance_seconds``: its last rebalance, JoinGroup to SyncGroup;
- ``huddle_member_lost_total``: times it declared its partitions lost.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from huddle.protocol.errors import InvalidArgumentError


class MemberStats:
    """What one member counts; read by the collector (any thread), written by the member."""

    __slots__ = (
        "client_id",
        "group_id",
        "join_began",
        "last_rebalance_s",
        "lost",
        "owned",
        "rebalances",
        "unassigned_since",
        "unassigned_total",
    )

    def __init__(self, group_id: str, client_id: str, owned: Callable[[], int]) -> None:
        self.group_id = group_id
        self.client_id = client_id
        self.owned = owned
        self.rebalances = 0
        self.lost = 0
        self.last_rebalance_s = 0.0
        self.join_began: float | None = None
        self.unassigned_since: float | None = time.monotonic()
        self.unassigned_total = 0.0

    def joining(self) -> None:
        """A JoinGroup goes out: a rebalance begins, unless one is under way (KIP-394's
        second join, a retried join)."""
        if self.join_began is None:
            self.rebalances += 1
            self.join_began = time.monotonic()

    def synced(self) -> None:
        if self.join_began is not None:
            self.last_rebalance_s = time.monotonic() - self.join_began
            self.join_began = None

    def assignment_changed(self, owned: int) -> None:
        now = time.monotonic()
        if owned == 0 and self.unassigned_since is None:
            self.unassigned_since = now
        elif owned and self.unassigned_since is not None:
            self.unassigned_total += now - self.unassigned_since
            self.unassigned_since = None

    def unassigned_seconds(self) -> float:
        since = self.unassigned_since
        return self.unassigned_total + (time.monotonic() - since if since is not None else 0.0)


class _MemberCollector(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: list[MemberStats] = []

    def add(self, stats: MemberStats) -> None:
        """ValueError if a member of the same group with the same client id is in it: the
        two would be one series."""
        with self._lock:
            for other in self._members:
                if (other.group_id, other.client_id) == (stats.group_id, stats.client_id):
                    raise InvalidArgumentError(
                        f"a member of group {stats.group_id!r} with client_id "
                        f"{stats.client_id!r} already exports into this registry: give each "
                        "member its own client_id"
                    )
            self._members.append(stats)

    def remove(self, stats: MemberStats) -> None:
        with self._lock:
            if stats in self._members:
                self._members.remove(stats)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            members = list(self._members)
        labels = ["group", "client_id"]
        families: list[tuple[type, str, str, Callable[[MemberStats], float]]] = [
            (
                CounterMetricFamily,
                "huddle_member_rebalances",
                "Rebalances taken part in",
                lambda s: s.rebalances,
            ),
            (
                CounterMetricFamily,
                "huddle_member_unassigned_seconds",
                "Time owning no partition",
                lambda s: s.unassigned_seconds(),
            ),
            (
                GaugeMetricFamily,
                "huddle_member_partitions_owned",
                "Partitions owned now",
                lambda s: s.owned(),
            ),
            (
                GaugeMetricFamily,
                "huddle_member_last_rebalance_seconds",
                "The last rebalance, JoinGroup to SyncGroup",
                lambda s: s.last_rebalance_s,
            ),
            (
                CounterMetricFamily,
                "huddle_member_lost",
                "Times the partitions were declared lost",
                lambda s: s.lost,
            ),
        ]
        for kind, name, text, value in families:
            family = kind(name, text, labels=labels)
            for stats in members:
                family.add_metric([stats.group_id, stats.client_id], value(stats))
            yield family

    def describe(self) -> Iterator[Metric]:
        return iter(())


_collectors: weakref.WeakKeyDictionary[CollectorRegistry, _MemberCollector] = (
    weakref.WeakKeyDictionary()
)
_collectors_lock = threading.Lock()


def collector_for(registry: CollectorRegistry) -> _MemberCollector:
    """The one member collector of ``registry`` (registered with it on first use)."""
    with _collectors_lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = _collectors[registry] = _MemberCollector()
            registry.register(collector)
        return collector
