"""A coordinator node on a three-member etcd cluster: the etcd member it talks to is killed
while a group commits. The node goes on through another member, and nothing acknowledged is
lost."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from huddle.client import Admin
from tests.cluster.test_failover import SHARDS, TTL_S, node_flags, static_member
from tests.etcd import Etcd, start_etcd_cluster, stop_etcd
from tests.helpers import Recorder, eventually, serve_process, wait_until


@pytest.fixture
def etcd3(tmp_path: Path) -> Iterator[list[Etcd]]:
    members = start_etcd_cluster(tmp_path / "etcd", 3)
    try:
        yield members
    finally:
        for member in members:
            if member.process.poll() is None:
                stop_etcd(member)


@pytest.mark.e2e
async def test_an_etcd_member_killed_while_a_group_commits_loses_nothing_acknowledged(
    etcd3: list[Etcd],
) -> None:
    endpoints = ",".join(f"{e.host}:{e.port}" for e in etcd3)
    async with serve_process(*node_flags(endpoints)) as (_, port, events):
        bootstrap = f"127.0.0.1:{port}"
        await wait_until(
            lambda: sum(e["event"] == "shard_taken" for e in events) == SHARDS,
            what="the node owns every shard",
        )
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 2)
        async with static_member(bootstrap, "ledger", "ledger-0", Recorder()) as m:
            await wait_until(lambda: len(m.assignment) == 2, what="the member owns both")
            acknowledged = 0
            for offset in range(1, 21):
                await m.commit({tp: offset for tp in m.assignment})
                acknowledged = offset
            # the member the node talks to: the first that answered it (at start, the first
            # may still be electing a leader past the node's deadline)
            talked_to = [e["endpoint"] for e in events if e["event"] == "store_connected"][-1]
            first = next(e for e in etcd3 if f"{e.host}:{e.port}" == talked_to)
            first.process.send_signal(signal.SIGKILL)
            first.process.wait()
            # commits go on, each one acknowledged or not: until 5 more were acknowledged,
            # or for the lease TTL and 10 s (a write whose outcome the loss left unknown is
            # made again under a renewed epoch; a node that fenced itself meanwhile, etcd
            # electing a leader past its lease's deadline, serves again once it answers)
            offset, give_up = 20, time.monotonic() + TTL_S + 10
            while acknowledged < 25 and time.monotonic() < give_up:
                offset += 1
                try:
                    with anyio.fail_after(TTL_S + 10):
                        await m.commit({tp: offset for tp in m.assignment})
                except Exception:
                    await anyio.sleep(0.1)  # pacing: the member finds its coordinator again
                    continue
                acknowledged = offset
            assert acknowledged > 20, "no commit was acknowledged after the etcd member died"

            async def kept() -> bool:
                try:
                    committed = await m.committed(frozenset(m.assignment))
                except Exception:
                    return False
                return committed == dict.fromkeys(m.assignment, acknowledged)

            await eventually(kept, wait_s=TTL_S + 20, what="the last acknowledged commit")
    assert any(e["event"] == "store_endpoint_switched" for e in events)
