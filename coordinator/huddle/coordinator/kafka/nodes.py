"""The brokers a Kafka listener names: its own node alone, or a cluster's nodes.

Without ``--cluster`` the listener is broker 0, every partition's leader and every
group's coordinator. In a cluster the server gives the wire a ``KafkaNodes``
(``huddle.coordinator.cluster.kafka_nodes.ClusterKafkaNodes``): the live nodes with a
Kafka listener, each with its broker id, as this node last read them from etcd.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

Broker = tuple[int, str, int]  # Kafka's node id, advertised host, port


class KafkaNodes(Protocol):
    @property
    def me(self) -> Broker:
        """This node's broker."""

    def live(self) -> Sequence[Broker]:
        """Every live broker, by id (this node's among them)."""

    def of(self, node_id: str) -> Broker | None:
        """The broker of the huddle node ``node_id`` (a group's coordinator), if known."""
