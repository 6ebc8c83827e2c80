"""Three ``huddle serve --cluster`` processes on one real etcd: groups are found through any
node, and the node owning a busy cooperative group is killed with SIGKILL."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from huddle.client import Admin, Member
from huddle.client.connection import connect
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse
from tests.etcd import Etcd, etcd
from tests.helpers import Recorder, eventually, serve_process, settled, wait_until

__all__ = ["etcd"]  # the fixture

TTL_S = 2
SHARDS = 6
PREFIX = "/failover"
GROUP = "orders"
PARTITIONS = frozenset(TopicPartition("t", p) for p in range(6))

Node = tuple[asyncio.subprocess.Process, int, list[dict[str, Any]]]


def node_flags(endpoints: str) -> list[str]:
    """``huddle serve`` flags of a test cluster node on ``endpoints`` (HOST:PORT,...)."""
    return [
        "--cluster",
        f"etcd://{endpoints}",
        "--shards",
        str(SHARDS),
        "--lease-ttl-s",
        str(TTL_S),
        "--cluster-prefix",
        PREFIX,
    ]


@asynccontextmanager
async def cluster(etcd: Etcd, count: int) -> AsyncIterator[list[Node]]:
    async with AsyncExitStack() as stack:
        flags = node_flags(f"{etcd.host}:{etcd.port}")
        nodes = [await stack.enter_async_context(serve_process(*flags)) for _ in range(count)]
        yield nodes


async def coordinator_port(bootstrap: str, group_id: str) -> int | None:
    """The port of the node any node names as ``group_id``'s coordinator, if one does."""
    async with connect(bootstrap.split(",")[0], notices=False) as conn:
        answer = await conn.request(FindCoordinatorRequest(group_id=group_id))
    if isinstance(answer, FindCoordinatorResponse) and answer.error_code == 0:
        return answer.port
    return None


def static_member(bootstrap: str, group: str, instance: str, listener: Recorder) -> Member:
    """A cooperative static member with a 10 s session, heartbeating every 300 ms."""
    return Member(
        bootstrap,
        group_id=group,
        topics=["t"],
        instance_id=instance,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=300,
        listener=listener,
    )


async def commit_all(members: Sequence[Member], offset: int) -> bool:
    """Whether every member's commit of ``offset`` for what it owns is acknowledged."""
    try:
        for m in members:
            await m.commit({tp: offset for tp in m.assignment})
    except Exception:
        return False
    return True


async def owner_of(bootstrap: str, group: str) -> int:
    """The port of ``group``'s coordinator, once a node owns its shard (a shard moving
    between nodes has none for a moment)."""
    found: list[int] = []

    async def owned() -> bool:
        port = await coordinator_port(bootstrap, group)
        if port is not None:
            found.append(port)
        return port is not None

    await eventually(owned, what=f"a node owns {group}'s shard")
    return found[-1]


@pytest.mark.e2e
async def test_the_owner_of_a_busy_cooperative_group_killed_the_group_carries_on(
    etcd: Etcd,
) -> None:
    async with cluster(etcd, 3) as nodes, AsyncExitStack() as stack:
        ports = {port: process for process, port, _ in nodes}
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)

        async def found() -> bool:
            return await coordinator_port(bootstrap, GROUP) is not None

        await eventually(found, what="a node owns the group's shard")
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", len(PARTITIONS))
        listeners = [Recorder() for _ in range(3)]
        members = [
            await stack.enter_async_context(
                static_member(bootstrap, GROUP, f"worker-{i}", listeners[i])
            )
            for i in range(3)
        ]
        await wait_until(lambda: settled(members, PARTITIONS), what="the group settles")
        generation = members[0].generation
        owned = [m.assignment for m in members]
        for m in members:
            await m.commit({tp: 100 for tp in m.assignment})  # acknowledged
        owner = await owner_of(bootstrap, GROUP)
        for listener in listeners:
            listener.clear()

        ports[owner].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        survivors = ",".join(f"127.0.0.1:{p}" for p in ports if p != owner)

        async def served_elsewhere() -> bool:
            moved = await coordinator_port(survivors, GROUP)
            if moved is None or moved == owner:
                return False
            return await commit_all(members, 200)

        await eventually(served_elsewhere, wait_s=TTL_S + 15, what="another node serves it")
        served_after = time.monotonic() - killed_at
        # no rebalance: the same generation, the same partitions, no callback at all
        assert [m.generation for m in members] == [generation] * 3
        assert [m.assignment for m in members] == owned
        assert [listener.calls for listener in listeners] == [[], [], []]
        # every acknowledged commit survived, and the group was served again in time
        committed = await members[0].committed(PARTITIONS)
        assert committed == dict.fromkeys(PARTITIONS, 200)
        # the target is the lease TTL + 1 s (bench/failover.py measures it); a second more
        # here for a loaded CI machine
        assert served_after < TTL_S + 2, f"served again after {served_after:.1f} s"
