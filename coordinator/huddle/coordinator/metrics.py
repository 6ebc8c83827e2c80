"""The coordinator's Prometheus metrics (``huddle serve --metrics-port``).

What happens per request (heartbeats, commits, errors answered, notices pushed) is counted
in plain integers by the server and read only when Prometheus scrapes (``collect``), so a
heartbeat costs a few dictionary increments, not a metric lock. What happens per rebalance
(its reason, its duration, the join and sync phases) and per journal write is observed into
histograms as it happens. The sans-IO core reports rebalances through the
``RebalanceObserver`` calls, with its own clock.

Names, all under ``huddle_``:

- ``connections``, ``groups{state}``, ``members`` (gauges, read at scrape);
- ``rebalances_total{reason}``, ``rebalance_duration_seconds``,
  ``join_phase_seconds``, ``sync_phase_seconds``;
- ``heartbeats_total{listener}``, ``commits_total{listener}`` (OffsetCommit requests),
  ``requests_total{type,listener}`` (``listener``: ``huddle``, or ``kafka`` for the Kafka
  listener's requests to the core), ``errors_total{code}`` (answers carrying an error code),
  ``notices_total{type}``;
- ``journal_write_seconds`` (a batch of changes written to the data dir);
- ``shards_owned`` (a cluster node);
- ``security_store_healthy`` (1, or 0 while the users and ACLs store cannot be read or
  used and the last good ones are kept) and ``security_store_failures_total`` (with
  ``--sasl`` or ``--authorizer``);
- ``cluster_lease_refresh_age_seconds``, ``cluster_reconcile_age_seconds`` (a cluster node:
  seconds since it last refreshed its etcd lease, and since it last reconciled its shards;
  NaN before the first), ``cluster_task_restarts_total{task,why}`` (one of its loops started
  again: ``died`` or ``stalled``);
- the consumer-protocol groups' (either wire's): ``consumer_groups{state}``,
  ``consumer_group_members``, ``consumer_group_rebalances_total``,
  ``consumer_members_fenced_total{reason}`` (``huddle.coordinator.consumer_metrics``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from huddle.coordinator import consumer_metrics
from huddle.coordinator.consumer_metrics import ConsumerMetricsSource
from huddle.protocol.errors import error_name
from huddle.protocol.messages import NodeLiveness, Reply

if TYPE_CHECKING:
    from huddle.coordinator.core import Coordinator
    from huddle.coordinator.effects import Outgoing

# Rebalances last milliseconds to minutes (a member's rebalance timeout).
_PHASE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_WRITE_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1)
_MAX_TRACKED = 100_000  # groups in the middle of a rebalance, at most (a bound, not a limit)


class CoordinatorMetrics(Collector):
    """Counts and observes; ``registry`` is what ``/metrics`` serves."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.core: Coordinator | None = None
        self.connections: Callable[[], int] = lambda: 0
        self.shards: Callable[[], int] | None = None  # a cluster node's owned shards
        # the users and ACLs store: whether it is healthy, and how many reads of it failed
        self.security_store: Callable[[], tuple[bool, int]] | None = None
        self.liveness: Callable[[], NodeLiveness] | None = None  # a cluster node's
        self.restarts: Callable[[], dict[tuple[str, str], int]] | None = None  # (task, why)
        self.consumer: ConsumerMetricsSource | None = None  # the server's ConsumerService
        # by listener: every request handled (counted per slice of a connection's input)
        self.calls: Counter[str] = Counter()
        # (listener, request class) -> handled, but heartbeats
        self.requests: Counter[tuple[str, type]] = Counter()
        self.errors: Counter[int] = Counter()
        self.notices: Counter[str] = Counter()
        self.rebalances: Counter[str] = Counter()
        self._started: dict[str, tuple[float, float | None]] = {}  # group -> (began, synced)
        self.rebalance_seconds = Histogram(
            "huddle_rebalance_duration_seconds",
            "From a group's rebalance starting to it being Stable again",
            buckets=_PHASE_BUCKETS,
            registry=self.registry,
        )
        self.join_seconds = Histogram(
            "huddle_join_phase_seconds",
            "A rebalance's join phase: until the new generation forms",
            buckets=_PHASE_BUCKETS,
            registry=self.registry,
        )
        self.sync_seconds = Histogram(
            "huddle_sync_phase_seconds",
            "A rebalance's sync phase: from the new generation to the leader's assignment",
            buckets=_PHASE_BUCKETS,
            registry=self.registry,
        )
        self.write_seconds = Histogram(
            "huddle_journal_write_seconds",
            "Writing one batch of changes to the data dir (fsynced with --fsync)",
            buckets=_WRITE_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(self)

    # --- what the server counts ---------------------------------------------------------

    def produced(self, out: Iterable[Outgoing]) -> None:
        """Frames the core produced: error answers and notices are counted."""
        for _, frame in out:
            if type(frame) is Reply:
                code = frame.response.error_code
                if code:
                    self.errors[code] += 1
            else:
                self.notices[type(frame).__name__] += 1

    # --- RebalanceObserver: what the core reports, on its clock (ms) ---------------------

    def rebalance_started(self, group_id: str, reason: str, now: float) -> None:
        if group_id in self._started:
            return  # one already under way: the same rebalance goes on
        if len(self._started) >= _MAX_TRACKED:
            self._started.clear()
        self._started[group_id] = (now, None)
        self.rebalances[reason.split(":", 1)[0].strip() or "unknown"] += 1

    def join_completed(self, group_id: str, now: float) -> None:
        began = self._started.get(group_id)
        if began is not None:
            self._started[group_id] = (began[0], now)
            self.join_seconds.observe(max(now - began[0], 0.0) / 1000)

    def rebalance_completed(self, group_id: str, now: float) -> None:
        began = self._started.pop(group_id, None)
        if began is None:
            return
        start, synced = began
        self.rebalance_seconds.observe(max(now - start, 0.0) / 1000)
        if synced is not None:
            self.sync_seconds.observe(max(now - synced, 0.0) / 1000)

    def journal_written(self, seconds: float) -> None:
        self.write_seconds.observe(seconds)

    # --- Collector: read at scrape -------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        yield _gauge("huddle_connections", "Open client connections", self.connections())
        states = GaugeMetricFamily("huddle_groups", "Groups by state", labels=["state"])
        members = 0
        by_state: Counter[str] = Counter()
        if self.core is not None:
            for group in list(self.core.groups.values()):
                by_state[group.state.value] += 1
                members += group.size
        for state in ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"):
            states.add_metric([state], by_state.get(state, 0))
        yield states
        yield _gauge("huddle_members", "Members of every group", members)
        if self.consumer is not None:
            yield from consumer_metrics.collect(self.consumer)
        if self.shards is not None:
            yield _gauge("huddle_shards_owned", "Shards this cluster node serves", self.shards())
        if self.security_store is not None:
            healthy, failures = self.security_store()
            yield _gauge(
                "huddle_security_store_healthy",
                "1 while the users and ACLs in use are the store's; 0 while it cannot be read "
                "or used (the last good ones are kept)",
                int(healthy),
            )
            yield _counter(
                "huddle_security_store_failures",
                "Reads of the users and ACLs store that failed or found it unusable",
                failures,
            )
        if self.liveness is not None:
            yield from _liveness(self.liveness())
        if self.restarts is not None:
            restarts = CounterMetricFamily(
                "huddle_cluster_task_restarts",
                "A cluster node's loop started again, by task and why (died, stalled)",
                labels=["task", "why"],
            )
            for (task, why), count in sorted(list(self.restarts().items())):
                restarts.add_metric([task, why], count)
            yield restarts
        yield from self._requests()
        errors = {error_name(code): n for code, n in list(self.errors.items())}
        yield _labelled("huddle_errors", "Answers carrying an error code", "code", errors)
        yield _labelled("huddle_notices", "Notices pushed to members", "type", self.notices)
        yield _labelled(
            "huddle_rebalances", "Rebalances started, by reason", "reason", self.rebalances
        )

    def _requests(self) -> Iterator[Metric]:
        """Requests handled, by listener: heartbeats are the calls that are not others."""
        by_listener: dict[str, dict[str, int]] = {"huddle": {}}
        for (listener, kind), n in list(self.requests.items()):
            by_listener.setdefault(listener, {})[_tag(kind)] = n
        for listener in list(self.calls):
            by_listener.setdefault(listener, {})
        label = ["listener"]
        heartbeats = CounterMetricFamily("huddle_heartbeats", "Heartbeats answered", labels=label)
        commits = CounterMetricFamily("huddle_commits", "OffsetCommit requests", labels=label)
        requests = CounterMetricFamily(
            "huddle_requests", "Requests handled, by type", labels=["type", "listener"]
        )
        for listener, counts in sorted(by_listener.items()):
            beats = max(self.calls[listener] - sum(counts.values()), 0)
            heartbeats.add_metric([listener], beats)
            commits.add_metric([listener], counts.get("offset_commit", 0))
            for tag, n in sorted({**counts, "heartbeat": beats}.items()):
                requests.add_metric([tag, listener], n)
        yield heartbeats
        yield commits
        yield requests

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected lazily: nothing to check at registration


def _liveness(live: NodeLiveness) -> Iterator[Metric]:
    nan = float("nan")
    refreshed, reconciled = live.lease_refreshed_s_ago, live.reconciled_s_ago
    yield _gauge(
        "huddle_cluster_lease_refresh_age_seconds",
        "Seconds since this cluster node last refreshed its etcd lease (NaN: not yet)",
        nan if refreshed is None else refreshed,
    )
    yield _gauge(
        "huddle_cluster_reconcile_age_seconds",
        "Seconds since this cluster node last reconciled its shards with etcd (NaN: not yet)",
        nan if reconciled is None else reconciled,
    )


def _tag(kind: type) -> str:
    """A request class's wire tag (``heartbeat``, ``offset_commit``, ...)."""
    config = getattr(kind, "__struct_config__", None)
    return str(getattr(config, "tag", kind.__name__))


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


def _counter(name: str, text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, text, value=value)


def _labelled(
    name: str, text: str, label: str, counts: Counter[str] | dict[str, int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, text, labels=[label])
    for key, value in sorted(list(counts.items())):  # a copy: the loop adds meanwhile
        family.add_metric([str(key)], value)
    return family


def serve_metrics(metrics: CoordinatorMetrics, host: str, port: int) -> tuple[object, int]:
    """``/metrics`` over HTTP on ``host:port`` (0: any free port), in a daemon thread;
    returns the server (``shutdown()`` stops it) and the port it listens on."""
    server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    assert isinstance(thread, threading.Thread)
    return server, int(server.server_port)
