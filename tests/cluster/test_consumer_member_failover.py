"""huddle's ``Member(group_protocol="consumer")`` in a three-node cluster on one real etcd:
the node serving the group's shard is killed with SIGKILL, and the members find the node
that took the shard over and carry on there at their epochs, with their partitions and no
callback called (the consumer-protocol counterpart of ``test_failover``'s classic group)."""

from __future__ import annotations

import signal
import time
from contextlib import AsyncExitStack

import pytest

from huddle.client import Admin, Member
from tests.client.test_consumer_member import Recorder
from tests.cluster.test_failover import (
    GROUP,
    PARTITIONS,
    TTL_S,
    cluster,
    commit_all,
    coordinator_port,
    owner_of,
)
from tests.etcd import Etcd, etcd
from tests.helpers import eventually, settled, wait_until

__all__ = ["etcd"]  # the fixture


@pytest.mark.e2e
async def test_the_node_of_a_consumer_group_killed_its_members_carry_on_at_their_epochs(
    etcd: Etcd,
) -> None:
    async with cluster(etcd, 3) as nodes, AsyncExitStack() as stack:
        ports = {port: process for process, port, _ in nodes}
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)
        await owner_of(bootstrap, GROUP)
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", len(PARTITIONS))
        listeners = [Recorder() for _ in range(3)]
        members = [
            await stack.enter_async_context(
                Member(
                    bootstrap,
                    group_id=GROUP,
                    topics=["t"],
                    listener=listener,
                    group_protocol="consumer",
                )
            )
            for listener in listeners
        ]
        await wait_until(lambda: settled(members, PARTITIONS), what="the group settles")
        for m in members:
            await m.wait_stable(10)
        epochs = [m.generation for m in members]
        owned = [m.assignment for m in members]
        assert await commit_all(members, 100)
        owner = await owner_of(bootstrap, GROUP)
        for listener in listeners:
            listener.revoked.clear()
            listener.assigned.clear()

        ports[owner].send_signal(signal.SIGKILL)  # by its PID
        killed_at = time.monotonic()
        survivors = ",".join(f"127.0.0.1:{p}" for p in ports if p != owner)

        async def served_elsewhere() -> bool:
            moved = await coordinator_port(survivors, GROUP)
            if moved is None or moved == owner:
                return False
            return await commit_all(members, 200)  # accepted at their epochs, there

        await eventually(served_elsewhere, wait_s=TTL_S + 15, what="another node serves it")
        served_after = time.monotonic() - killed_at
        # no rebalance: the same epochs, the same partitions, no callback at all
        assert [m.generation for m in members] == epochs
        assert [m.assignment for m in members] == owned
        assert [(r.revoked, r.assigned, r.lost) for r in listeners] == [([], [], [])] * 3
        assert await members[0].committed(PARTITIONS) == dict.fromkeys(PARTITIONS, 200)
        assert served_after < TTL_S + 5, f"served again after {served_after:.1f} s"
