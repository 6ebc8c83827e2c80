"""Cluster nodes (``huddle serve --cluster`` processes) under faults: a node joins, a node
freezes past its lease, etcd goes away; and bad configurations refused at start."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from functools import partial

import pytest
from huddle.testing import free_port

from huddle.client import Admin
from huddle.client.connection import connect
from huddle.coordinator.cluster.shards import shard_of
from huddle.coordinator.cluster.store import EtcdStore
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode, HuddleError
from huddle.protocol.messages import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
)
from tests.cluster.test_failover import (
    PREFIX,
    SHARDS,
    TTL_S,
    cluster,
    commit_all,
    coordinator_port,
    owner_of,
    static_member,
)
from tests.etcd import Etcd, etcd
from tests.helpers import Recorder, eventually, settled, wait_until

__all__ = ["etcd"]  # the fixture


def groups_on_distinct_shards(count: int) -> list[str]:
    names: dict[int, str] = {}
    i = 0
    while len(names) < count:
        name = f"group-{i}"
        names.setdefault(shard_of(name, SHARDS), name)
        i += 1
    return list(names.values())


async def owners(etcd: Etcd) -> dict[int, str]:
    store = await EtcdStore.connect([etcd.endpoint])
    try:
        found = await store.get_prefix(f"{PREFIX}/shards/".encode())
    finally:
        await store.close()
    return {int(k.decode().rsplit("/", 1)[-1]): v.value.decode() for k, v in found.items()}


@pytest.mark.e2e
async def test_a_node_joins_shards_move_to_it_and_no_group_loses_its_members(
    etcd: Etcd,
) -> None:
    names = groups_on_distinct_shards(4)
    async with cluster(etcd, 1) as first, AsyncExitStack() as stack:
        bootstrap = f"127.0.0.1:{first[0][1]}"
        await eventually(lambda: _all_owned(etcd), what="the node owns every shard")
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 2)
        listeners = {g: [Recorder(), Recorder()] for g in names}
        members = {
            g: [
                await stack.enter_async_context(
                    static_member(bootstrap, g, f"{g}-{i}", listeners[g][i])
                )
                for i in range(2)
            ]
            for g in names
        }
        await wait_until(
            lambda: all(settled(ms, frozenset(_tps(2))) for ms in members.values()),
            what="every group settles",
        )
        generations = {g: [m.generation for m in ms] for g, ms in members.items()}
        for recorders in listeners.values():
            for r in recorders:
                r.clear()
        more = await stack.enter_async_context(cluster(etcd, 2))
        ports = [first[0][1]] + [port for _, port, _ in more]

        async def spread() -> bool:
            counts = list((await owners(etcd)).values())
            return len(counts) == SHARDS and sorted(counts.count(n) for n in set(counts)) == [
                2,
                2,
                2,
            ]

        await eventually(spread, wait_s=20, what="the shards spread over three nodes")
        everyone = ",".join(f"127.0.0.1:{p}" for p in ports)
        moved = 0
        for g in names:
            port = await coordinator_port(everyone, g)
            moved += port != first[0][1]
            served = partial(commit_all, members[g], 7)
            await eventually(served, what=f"{g} is served")
        assert moved >= 2  # four groups on four shards, two of six stay on the first node
        assert {g: [m.generation for m in ms] for g, ms in members.items()} == generations
        assert all(r.calls == [] for rs in listeners.values() for r in rs)


def _tps(n: int) -> list[TopicPartition]:
    return [TopicPartition("t", p) for p in range(n)]


async def _all_owned(etcd: Etcd) -> bool:
    return len(await owners(etcd)) == SHARDS


async def _commit_directly(port: int, group: str, member_id: str, generation: int) -> int:
    """An OffsetCommit sent to the node on ``port``, whatever it coordinates: its code."""
    request = OffsetCommitRequest(
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        topics=[
            OffsetCommitTopic(name="t", partitions=[OffsetCommitPartition(partition=0, offset=1)])
        ],
    )
    async with connect(f"127.0.0.1:{port}", notices=False) as conn:
        answer = await conn.request(request)
    if isinstance(answer, OffsetCommitResponse):
        return int(answer.topics[0].partitions[0].error_code)
    return int(getattr(answer, "error_code", -1))


@pytest.mark.e2e
async def test_a_node_frozen_past_its_lease_serves_nothing_once_thawed(etcd: Etcd) -> None:
    async with cluster(etcd, 2) as nodes, AsyncExitStack() as stack:
        ports = {port: (process, events) for process, port, events in nodes}
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
        await eventually(lambda: _all_owned(etcd), what="every shard is owned")
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 2)
        recorder = Recorder()
        m = await stack.enter_async_context(
            static_member(bootstrap, "frozen", "frozen-0", recorder)
        )
        await wait_until(lambda: len(m.assignment) == 2, what="the member owns both")
        owner = await owner_of(bootstrap, "frozen")
        process, events = ports[owner]
        generation = m.generation
        recorder.clear()
        process.send_signal(signal.SIGSTOP)
        try:

            async def moved() -> bool:
                other = ",".join(f"127.0.0.1:{p}" for p in ports if p != owner)
                if await coordinator_port(other, "frozen") in (None, owner):
                    return False
                return await commit_all([m], 5)

            await eventually(moved, wait_s=TTL_S + 15, what="the other node serves the group")
        finally:
            process.send_signal(signal.SIGCONT)
        # thawed: it fenced itself (its own deadline passed while frozen) and refuses the group
        await wait_until(
            lambda: any(e["event"] == "shards_fenced" for e in events), what="it fences itself"
        )
        code = await _commit_directly(owner, "frozen", m.member_id, generation)
        assert code == ErrorCode.NOT_COORDINATOR
        assert m.generation == generation
        assert recorder.calls == []

        async def kept() -> bool:  # the thawed node rejoins: shards may be moving back
            try:
                return await m.committed(frozenset(m.assignment)) == dict.fromkeys(m.assignment, 5)
            except HuddleError:
                return False

        await eventually(kept, what="the commit made through the other node is kept")


@pytest.mark.e2e
async def test_etcd_away_nodes_stop_serving_and_recover_when_it_returns(etcd: Etcd) -> None:
    async with cluster(etcd, 1) as nodes, AsyncExitStack() as stack:
        _, port, events = nodes[0]
        bootstrap = f"127.0.0.1:{port}"
        await eventually(lambda: _all_owned(etcd), what="the node owns every shard")
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 2)
        m = await stack.enter_async_context(
            static_member(bootstrap, "patient", "patient-0", Recorder())
        )
        await wait_until(lambda: len(m.assignment) == 2, what="the member owns both")
        generation = m.generation
        etcd.process.send_signal(signal.SIGSTOP)
        try:
            await wait_until(
                lambda: any(e["event"] == "shards_fenced" for e in events),
                wait_s=TTL_S + 10,
                what="the node stops serving",
            )
            code = await _commit_directly(port, "patient", m.member_id, generation)
            assert code == ErrorCode.NOT_COORDINATOR
        finally:
            etcd.process.send_signal(signal.SIGCONT)

        await eventually(
            lambda: commit_all([m], 9), wait_s=TTL_S + 20, what="the group is served again"
        )
        assert m.generation == generation


def _serve(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "huddle", "serve", "--port", "0", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HUDDLE_LOG_LEVEL": "error"},
    )


@pytest.mark.e2e
def test_an_unreachable_etcd_is_a_clear_error_at_start() -> None:
    dead = free_port()
    started = time.monotonic()
    result = _serve("--cluster", f"etcd://127.0.0.1:{dead}")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("huddle: ")
    assert f"127.0.0.1:{dead}" in result.stderr
    assert time.monotonic() - started < 30


@pytest.mark.e2e
async def test_a_prefix_holding_something_else_or_another_shard_count_is_refused(
    etcd: Etcd,
) -> None:
    store = await EtcdStore.connect([etcd.endpoint])
    try:
        await store.put(b"/elsewhere/app/config", b"{}")
    finally:
        await store.close()
    endpoint = f"etcd://{etcd.host}:{etcd.port}"
    foreign = await asyncio.to_thread(
        _serve, "--cluster", endpoint, "--cluster-prefix", "/elsewhere"
    )
    assert foreign.returncode == 1
    assert "holds 1 keys that are not a huddle cluster's" in foreign.stderr
    async with cluster(etcd, 1):
        other = await asyncio.to_thread(
            _serve, "--cluster", endpoint, "--cluster-prefix", PREFIX, "--shards", "7"
        )
    assert other.returncode == 1
    assert f"the cluster under {PREFIX} has {SHARDS} shards, not 7" in other.stderr


@pytest.mark.e2e
async def test_two_nodes_advertising_one_address_are_refused(etcd: Etcd) -> None:
    endpoint = f"etcd://{etcd.host}:{etcd.port}"
    async with cluster(etcd, 1) as nodes:
        await eventually(lambda: _all_owned(etcd), what="the first node is registered")
        taken = f"127.0.0.1:{nodes[0][1]}"
        second = await asyncio.to_thread(
            _serve,
            "--cluster",
            endpoint,
            "--cluster-prefix",
            PREFIX,
            "--shards",
            str(SHARDS),
            "--advertise",
            taken,
            "--node-id",
            "another",
        )
    assert second.returncode == 1
    assert f"already advertises {taken}" in second.stderr


@pytest.mark.e2e
async def test_cluster_status_and_groups_list_span_every_node(etcd: Etcd) -> None:
    async with cluster(etcd, 2) as nodes, AsyncExitStack() as stack:
        bootstrap = ",".join(f"127.0.0.1:{port}" for _, port, _ in nodes)

        async def spread() -> bool:
            counts = list((await owners(etcd)).values())
            return len(counts) == SHARDS and len(set(counts)) == 2

        await eventually(spread, what="both nodes own shards")
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 1)
        names = groups_on_distinct_shards(SHARDS)  # so some land on each node
        for g in names:
            await stack.enter_async_context(static_member(bootstrap, g, f"{g}-0", Recorder()))
        async with Admin(bootstrap) as admin:

            async def all_listed() -> bool:
                try:
                    return [g.group_id for g in await admin.list_groups()] == sorted(names)
                except HuddleError:
                    return False

            await eventually(all_listed, what="every group is listed")
        result = await asyncio.to_thread(run_status, bootstrap, "--json")
        assert result.returncode == 0, result.stderr
        status = json.loads(result.stdout)
        assert status["shard_count"] == SHARDS
        assert sorted(n["address"] for n in status["nodes"]) == sorted(bootstrap.split(","))
        shards = {s["shard"]: s for s in status["shards"]}
        assert all(s["owner"] and s["epoch"] > 0 for s in shards.values())
        for node in status["nodes"]:
            assert node["shards"] == sorted(
                s for s, v in shards.items() if v["owner"] == node["node_id"]
            )
            assert node["groups"] == sorted(
                g for g in names if shard_of(g, SHARDS) in node["shards"]
            )
            # each node's own account: its lease refreshed and its shards reconciled lately
            assert 0 <= node["lease_refreshed_s_ago"] < TTL_S, node
            assert 0 <= node["reconciled_s_ago"] < TTL_S, node
            assert node["task_restarts"] == 0
        text = await asyncio.to_thread(run_status, bootstrap)
        assert text.returncode == 0, text.stderr
        head, *rows = text.stdout.split("\n\n")[1].splitlines()
        assert head.split()[-4:] == ["LEASE", "REFRESHED", "RECONCILED", "RESTARTS"]
        assert len(rows) == 2
        assert all(row.count("s ago") == 2 for row in rows), rows


def run_status(bootstrap: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "huddle", "cluster", "status", "--bootstrap", bootstrap, *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
