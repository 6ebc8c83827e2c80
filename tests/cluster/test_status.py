"""``huddle cluster status`` tells what each node actually serves, by its own account, and
lists the nodes that answer though etcd no longer lists them."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import pytest

from huddle.coordinator.cluster.store import EtcdStore
from tests.cluster.test_failover import PREFIX, SHARDS, cluster
from tests.cluster.test_faults import run_status
from tests.etcd import Etcd, etcd
from tests.helpers import eventually

__all__ = ["etcd"]  # the fixture


async def _view(bootstrap: str) -> dict[str, Any]:
    result = await asyncio.to_thread(run_status, bootstrap, "--json")
    assert result.returncode == 0, result.stderr
    view: dict[str, Any] = json.loads(result.stdout)
    return view


async def _settled(bootstrap: str) -> bool:
    """Both nodes serve what etcd says they own, every shard owned."""
    view = await _view(bootstrap)
    nodes = view["nodes"]
    return (
        len(nodes) == 2
        and all(n.get("state", "ok") == "ok" and n["shards"] for n in nodes)
        and sum(len(n["shards"]) for n in nodes) == SHARDS
    )


@pytest.mark.e2e
async def test_a_node_that_serves_nothing_during_an_etcd_freeze_says_so(etcd: Etcd) -> None:
    """etcd frozen past the lease: every node fenced itself and serves nothing, while the
    owners last read from etcd still name them. The status used to count those owners."""
    async with cluster(etcd, 2) as nodes:
        bootstrap = ",".join(f"127.0.0.1:{port}" for _, port, _ in nodes)
        await eventually(lambda: _settled(bootstrap), wait_s=30, what="both nodes serving")
        etcd.process.send_signal(signal.SIGSTOP)
        try:

            async def fenced() -> bool:
                return all(n["shards"] == [] for n in (await _view(bootstrap))["nodes"])

            await eventually(fenced, what="every node says it serves nothing")
            view = await _view(bootstrap)
            text = await asyncio.to_thread(run_status, bootstrap)
        finally:
            etcd.process.send_signal(signal.SIGCONT)
        for node in view["nodes"]:
            assert node["owned"], node  # etcd's word, as last read
            assert node["state"] == "disagrees", node
        assert text.returncode == 0, text.stderr
        assert text.stdout.count("disagrees") >= 3  # both rows, and the note
        assert "0 (etcd: " in text.stdout
        await eventually(lambda: _settled(bootstrap), wait_s=30, what="both serving again")


@pytest.mark.e2e
async def test_a_node_whose_registration_is_gone_is_listed_unregistered(etcd: Etcd) -> None:
    """A node etcd no longer lists (its registration gone) still answers: the status
    lists it as unregistered instead of leaving it out; a bootstrap address nothing
    answers at is listed too."""
    async with cluster(etcd, 2) as nodes:
        bootstrap = ",".join(f"127.0.0.1:{port}" for _, port, _ in nodes)
        await eventually(lambda: _settled(bootstrap), wait_s=30, what="both nodes serving")
        gone = (await _view(bootstrap))["nodes"][1]
        store = await EtcdStore.connect([etcd.endpoint])
        try:
            await store.delete(f"{PREFIX}/nodes/{gone['node_id']}".encode())
        finally:
            await store.close()
        dead = "127.0.0.1:9"  # nothing listens there
        first = nodes[0][1] if f"127.0.0.1:{nodes[0][1]}" != gone["address"] else nodes[1][1]

        async def unlisted() -> bool:
            view = await _view(f"127.0.0.1:{first},{gone['address']},{dead}")
            return len(view["nodes"]) == 3 and view["nodes"][1].get("state") == "unregistered"

        await eventually(unlisted, what="the node listed as unregistered")
        view = await _view(f"127.0.0.1:{first},{gone['address']},{dead}")
        listed, unregistered, nobody = view["nodes"]
        assert listed["state"] == "ok"
        assert (unregistered["node_id"], unregistered["address"]) == (
            gone["node_id"],
            gone["address"],
        )
        assert unregistered["registered"] is True  # its own word: it still holds its lease
        assert (nobody["address"], nobody["state"], nobody["node_id"]) == (
            dead,
            "not answering",
            None,
        )
        text = await asyncio.to_thread(run_status, f"127.0.0.1:{first},{gone['address']},{dead}")
        assert text.returncode == 0, text.stderr
        assert "unregistered" in text.stdout
        assert "not answering" in text.stdout
