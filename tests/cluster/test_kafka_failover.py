"""Real Kafka consumers on a three-node cluster over one real etcd: the node coordinating
their group is killed with SIGKILL, the group moves to another node, and the consumers
carry on in their generation with the partitions they had (no rebalance), committing
through the new coordinator; the partitions the dead node led are led by the others."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Final

import pytest

from huddle.chaos.kafka_workers import brokers, launch
from huddle.chaos.kafka_workers.options import DriverOptions
from huddle.chaos.kafka_workers.running import Drivers, partitions_of
from huddle.chaos.procs import HOST, spawn, stop, wait_listening
from huddle.client import Admin
from huddle.coordinator.kafka.apis import Api
from huddle.protocol.addresses import free_port
from huddle.protocol.admin_messages import DescribedGroup
from tests.cluster.test_failover import node_flags
from tests.etcd import Etcd, etcd
from tests.kafka.raw import RawKafka
from tests.kafka_clients.conftest import require_client

__all__ = ["etcd"]  # the fixture

NODES: Final = 3
PARTITIONS: Final = 6
WAIT_S: Final = 60.0
SESSION_MS: Final = 10_000  # the new coordinator must hear from the members within it


class Node:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], port: int, kafka: int) -> None:
        self.name = name
        self.proc = proc
        self.port = port
        self.kafka = kafka


@contextmanager
def kafka_cluster(etcd: Etcd, log_dir: Path) -> Iterator[list[Node]]:
    """Three ``huddle serve --cluster`` nodes, each with a Kafka listener; stopped by PID."""
    with ExitStack() as stack:
        nodes = []
        for i in range(1, NODES + 1):
            port, kafka = free_port(), free_port()
            argv = [sys.executable, "-m", "huddle", "serve", "--host", HOST, "--port", str(port)]
            argv += ["--kafka-port", str(kafka), "--node-id", str(i), "--log-format", "json"]
            argv += ["--initial-rebalance-delay-ms", "0"]
            argv += node_flags(f"{etcd.host}:{etcd.port}")
            proc = spawn(argv, stdout=log_dir / f"node-{i}.out", stderr=log_dir / f"node-{i}.log")
            stack.callback(stop, proc)
            wait_listening(proc, kafka, WAIT_S)
            nodes.append(Node(str(i), proc, port, kafka))
        yield nodes


async def _call(port: int, api: int, version: int, **fields: Any) -> Any:
    async with RawKafka(port) as conn:
        return await conn.call(api, version, 1, **fields)


def kafka_call(port: int, api: int, version: int, **fields: Any) -> Any | None:
    """One Kafka request to the listener on ``port``; None if it cannot be had."""
    try:
        return asyncio.run(_call(port, api, version, **fields))
    except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError):
        return None


def coordinator(port: int, group: str) -> int | None:
    """The Kafka port the listener on ``port`` names as ``group``'s coordinator."""
    found = kafka_call(port, Api.FIND_COORDINATOR, 1, key=group, key_type=0)
    return found.port if found is not None and found.error_code == 0 else None


def metadata(port: int, topic: str) -> Any | None:
    return kafka_call(
        port,
        Api.METADATA,
        12,
        topics=[{"name": topic}],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def leaders(port: int, topic: str) -> tuple[frozenset[int], tuple[int, ...]] | None:
    """The brokers the listener on ``port`` names, and the leader of each partition."""
    answer = metadata(port, topic)
    if answer is None or not answer.topics or answer.topics[0].error_code:
        return None
    led = tuple(
        p.leader_id for p in sorted(answer.topics[0].partitions, key=lambda p: p.partition_index)
    )
    return frozenset(b.node_id for b in answer.brokers), led


def describe(nodes: list[Node], group: str) -> DescribedGroup:
    async def ask() -> DescribedGroup:
        bootstrap = ",".join(f"{HOST}:{n.port}" for n in nodes)
        async with Admin(bootstrap) as admin:
            described = await admin.describe_group(group)
        return described

    return asyncio.run(ask())


@pytest.mark.e2e
@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka", "aiokafka"])
def test_the_coordinator_of_kafka_consumers_killed_they_keep_their_partitions(
    etcd: Etcd, tmp_path: Path, client: str
) -> None:
    require_client(client)
    require_client("kafka-python")  # the topic is made and written with its clients
    topic, group = f"t-{os.getpid()}", f"g-{client}"
    with kafka_cluster(etcd, tmp_path / "nodes") as nodes, Drivers(tmp_path / "drivers") as drv:
        ports = {n.kafka: n for n in nodes}
        bootstrap = ",".join(f"{HOST}:{n.kafka}" for n in nodes)
        brokers.create_topic(bootstrap, topic, PARTITIONS)
        every = frozenset(int(n.name) for n in nodes)  # the node ids are the broker ids

        def agreed() -> tuple[int, ...] | None:
            seen = {leaders(n.kafka, topic) for n in nodes}
            (view,) = seen if len(seen) == 1 else (None,)
            return view[1] if view is not None and view[0] == every else None

        before = drv.wait(agreed, WAIT_S, "every node names the 3 brokers and the same leaders")
        assert set(before) <= every
        options = DriverOptions(
            bootstrap=bootstrap,
            group=group,
            topic=topic,
            strategy=launch.CLIENTS[client].eager,
            session_ms=SESSION_MS,
            heartbeat_ms=500,
            commit=True,
            max_seconds=240.0,
        )
        members = [drv.start(name, client, options) for name in ("m1", "m2")]
        every_partition = partitions_of(topic, PARTITIONS)
        drv.wait(lambda: drv.balanced(("m1", "m2"), every_partition), WAIT_S, "the group forms")
        had = {m.name: m.owned for m in members}
        described = describe(nodes, group)
        assert len(described.members) == 2

        joined = {m.name: m.last("joined") for m in members}
        owner = drv.wait(lambda: coordinator(nodes[0].kafka, group), WAIT_S, "a coordinator")
        killed_at = time.monotonic()
        ports[owner].proc.send_signal(signal.SIGKILL)  # by its PID
        ports[owner].proc.wait(timeout=WAIT_S)
        survivors = [n for n in nodes if n.kafka != owner]

        def moved() -> int | None:
            found = coordinator(survivors[0].kafka, group)
            return found if found is not None and found != owner else None

        drv.wait(moved, WAIT_S, "another node coordinates the group")
        alive = frozenset(int(n.name) for n in survivors)

        def agreed_again() -> tuple[int, ...] | None:
            seen = {leaders(n.kafka, topic) for n in survivors}
            (view,) = seen if len(seen) == 1 else (None,)
            return view[1] if view is not None and view[0] == alive else None

        after = drv.wait(agreed_again, WAIT_S, "the survivors name themselves as the brokers")
        # only the dead node's partitions moved
        dead = int(ports[owner].name)
        assert all(b == a for a, b in zip(before, after, strict=True) if a != dead)
        # records written now are read and committed through the new coordinator, in the
        # members' generation: a member that had been dropped would fail to commit
        brokers.produce(",".join(f"{HOST}:{n.kafka}" for n in survivors), topic, PARTITIONS, 3)

        def committed() -> bool | None:
            done = {
                (t, p)
                for m in members
                for e in m.of("committed")
                if not e.get("error")
                for t, p, o in e["offsets"]
                if o >= 3
            }
            return len(done) == PARTITIONS or None

        drv.wait(committed, WAIT_S, "every partition's records committed after the failover")
        assert {m.name: m.owned for m in members} == had
        for m in members:  # no rebalance: nothing revoked, lost, assigned or joined since
            since = [e for e in m.events if e["mono"] >= killed_at]
            changes = ("revoked", "lost", "assigned", "joined")
            assert [e for e in since if e["event"] in changes] == [], m.name
            assert m.last("joined") == joined[m.name]
        again = describe(survivors, group)
        assert again.generation_id == described.generation_id
        assert sorted(x.member_id for x in again.members) == sorted(
            x.member_id for x in described.members
        )
