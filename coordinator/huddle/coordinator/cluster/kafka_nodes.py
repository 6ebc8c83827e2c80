"""The Kafka listeners of a cluster's nodes: each node's Kafka address and broker id.

Keys under the cluster's prefix ``P``:

- ``P/kafka/<node id>``: the node's advertised Kafka address (``--kafka-advertise``, or
  where its Kafka listener listens), under its lease. It is written before
  ``P/nodes/<node id>``, so a node that reads the nodes and then these keys finds the
  Kafka address of every node it found.
- ``P/addresses/<address>`` holds the Kafka address too (the node advertising it): two
  nodes cannot advertise one address, on either listener.

A Kafka broker id is a 32-bit integer and a huddle node id a name: ``broker_id`` maps one
to the other the same way on every node (a node id that is a number is that number, as
Kafka's ``broker.id``; another name, its CRC-32 in 31 bits), so it stays the same across
a node's restarts. A node whose broker id another live node's already is refuses to start.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Final, Protocol
from urllib.parse import quote

from huddle.coordinator.cluster.store import EtcdStore, Lease
from huddle.protocol.addresses import parse_address

_INT31: Final = 0x7FFFFFFF

Broker = tuple[int, str, int]  # Kafka's node id, host, port


def broker_id(node_id: str) -> int:
    """The Kafka broker id of the huddle node ``node_id``."""
    if node_id.isascii() and node_id.isdecimal() and int(node_id) <= _INT31:
        return int(node_id)
    return zlib.crc32(node_id.encode()) & _INT31


def key(prefix: str, node_id: str) -> bytes:
    return f"{prefix}/kafka/{node_id}".encode()


async def read(store: EtcdStore, prefix: str) -> dict[str, str]:
    """Every registered node's Kafka address, by node id."""
    found = await store.get_prefix(f"{prefix}/kafka/".encode())
    return {
        name.decode().rsplit("/", 1)[-1]: entry.value.decode(errors="replace")
        for name, entry in found.items()
    }


async def claim(store: EtcdStore, prefix: str, node_id: str, address: str, lease: Lease) -> str:
    """Register ``address`` as ``node_id``'s Kafka address under ``lease``: "" when done,
    else why it cannot be (the caller revokes the lease and refuses to start)."""
    mine = broker_id(node_id)
    for other, _ in (await read(store, prefix)).items():
        if other != node_id and broker_id(other) == mine:
            return (
                f"node {other} has Kafka broker id {mine} too (derived from the node id): "
                "choose another --node-id"
            )
    if await store.claim(key(prefix, node_id), address.encode(), lease) is None:
        return f"a live node is already registered as {node_id}"
    taken = f"{prefix}/addresses/{quote(address, safe='')}".encode()
    if await store.claim(taken, node_id.encode(), lease) is None:
        holder = await store.get(taken)
        other = holder.value.decode(errors="replace") if holder is not None else "another"
        return f"node {other} already advertises {address}: each node needs its own address"
    return ""


class KafkaView(Protocol):
    """What ``ClusterKafkaNodes`` reads of the node (``ClusterNode`` is one)."""

    node_id: str
    kafka_addresses: dict[str, str]


class ClusterKafkaNodes:
    """The cluster's Kafka brokers as this node last read them from etcd: what the Kafka
    listener answers Metadata and FindCoordinator with (``huddle.coordinator.kafka.nodes``)."""

    def __init__(self, node: KafkaView, advertised: tuple[str, int]) -> None:
        self._node = node
        self.me: Broker = (broker_id(node.node_id), *advertised)
        self._seen: Mapping[str, str] | None = None
        self._live: tuple[Broker, ...] = (self.me,)

    def live(self) -> Sequence[Broker]:
        """Every live node with a Kafka listener, by broker id; this node alone before it
        has read any."""
        addresses = self._node.kafka_addresses
        if addresses is not self._seen:
            self._seen = addresses
            brokers = []
            for node_id, address in addresses.items():
                try:
                    host, port = parse_address(address)
                except ValueError:
                    continue
                brokers.append((broker_id(node_id), host, port))
            self._live = tuple(sorted(brokers)) or (self.me,)
        return self._live

    def of(self, node_id: str) -> Broker | None:
        """The Kafka broker of the huddle node ``node_id``: None when it has no Kafka
        listener (or this node has not read it yet)."""
        if node_id == self._node.node_id:
            return self.me
        address = self._node.kafka_addresses.get(node_id)
        if address is None:
            return None
        try:
            host, port = parse_address(address)
        except ValueError:
            return None
        return broker_id(node_id), host, port
