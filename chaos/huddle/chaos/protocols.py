"""The protocol a chaos run exercises: an assignor name plus its options, or ``consumer``.

``consumer`` is KIP-848's consumer group protocol: no assignor of the members' own, the
coordinator assigns (its server-side assignor, ``uniform`` unless the members ask for
another) and reconciles each member with ConsumerGroupHeartbeat. Its members are real
Kafka consumers (confluent-kafka, ``group.protocol=consumer``) on the Kafka listener.
"""

from __future__ import annotations

from dataclasses import dataclass

import huddle.client.assignors  # noqa: F401 - registers the built-in assignors
from huddle.chaos.kafka_workers.options import CONSUMER_PROTOCOL
from huddle.client.assignors import ASSIGNORS, Assignor, DeferredAssignor, HighAvailabilityAssignor


@dataclass(frozen=True, slots=True)
class ProtocolOptions:
    delay_ms: int | None = None  # cooperative-deferred: scheduled rebalance max delay
    acceptable_recovery_lag: int | None = None  # high-availability
    num_standby_replicas: int | None = None  # high-availability
    probing_interval_ms: int | None = None  # high-availability
    max_warmup_replicas: int | None = None  # high-availability


def protocol_names() -> list[str]:
    """huddle's assignors and ``consumer``."""
    return sorted([*ASSIGNORS.by_name, CONSUMER_PROTOCOL])


def build_assignor(name: str, options: ProtocolOptions) -> Assignor:
    """The assignor ``name`` configured with ``options``; ValueError for an unknown name."""
    if name == "cooperative-deferred" and options.delay_ms is not None:
        return DeferredAssignor(scheduled_rebalance_max_delay_ms=options.delay_ms)
    if name == "high-availability":
        ha: dict[str, int] = {}
        if options.acceptable_recovery_lag is not None:
            ha["acceptable_recovery_lag"] = options.acceptable_recovery_lag
        if options.num_standby_replicas is not None:
            ha["num_standby_replicas"] = options.num_standby_replicas
        if options.probing_interval_ms is not None:
            ha["probing_rebalance_interval_ms"] = options.probing_interval_ms
        if options.max_warmup_replicas is not None:
            ha["max_warmup_replicas"] = options.max_warmup_replicas
        return HighAvailabilityAssignor(**ha)
    return ASSIGNORS.create(name)
