"""A coordinator with a data dir: topics and committed offsets survive a restart."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from huddle.cli import main
from huddle.client import Member, TopicPartition
from huddle.client.admin import Admin
from huddle.client.connection import connect
from huddle.coordinator.server import CoordinatorServer, StorageFailedError, serve
from huddle.coordinator.storage import journal as journal_module
from huddle.coordinator.storage.journal import DataDirError
from huddle.protocol.errors import ErrorCode, error_class
from huddle.protocol.messages import (
    CreateTopicsRequest,
    DescribeClusterRequest,
    DescribeClusterResponse,
    ErrorResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    TopicSpec,
)
from tests.cli.test_cli import settings_for
from tests.docs.readme import ROOT
from tests.helpers import fast_server_config, running_server, wait_until, within


def _commit(offset: int) -> OffsetCommitRequest:
    partitions = [OffsetCommitPartition(partition=0, offset=offset)]
    return OffsetCommitRequest(
        group_id="g",
        generation_id=-1,  # a simple (group-less) commit: allowed while the group is empty
        member_id="",
        topics=[OffsetCommitTopic(name="t", partitions=partitions)],
    )


async def _fetch(bootstrap: str) -> dict[tuple[str, int], int]:
    async with connect(bootstrap) as conn:
        response = await conn.call(OffsetFetchRequest(group_id="g"), OffsetFetchResponse)
    return {(t.name, p.partition): p.offset for t in response.topics for p in t.partitions}


async def test_topics_and_offsets_survive_a_restart(tmp_path: Path) -> None:
    config = fast_server_config(data_dir=str(tmp_path / "data"))
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 3)
        async with connect(bootstrap) as conn:
            await conn.call(_commit(41), OffsetCommitResponse)
            await conn.call(_commit(42), OffsetCommitResponse)
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with Admin(bootstrap) as admin:
            assert await admin.list_topics() == {"t": 3}
        assert await _fetch(bootstrap) == {("t", 0): 42}


async def test_without_a_data_dir_nothing_is_kept(tmp_path: Path) -> None:
    async with running_server(fast_server_config()) as server:
        async with Admin(f"127.0.0.1:{server.port}") as admin:
            await admin.create_topic("t", 3)
        assert server.journal is None
    async with (
        running_server(fast_server_config()) as server,
        Admin(f"127.0.0.1:{server.port}") as admin,
    ):
        assert await admin.list_topics() == {}


async def test_a_change_that_cannot_be_kept_is_refused_and_the_server_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state in memory would be ahead of the data dir: refuse, stop, and after a restart
    serve what was kept (as Kafka stops a broker whose log directories failed)."""
    config = fast_server_config(data_dir=str(tmp_path))
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 1)
        async with connect(bootstrap) as conn:
            await conn.call(_commit(5), OffsetCommitResponse)

            def disk_full(fd: int, data: bytes, offset: int) -> int:
                raise OSError(errno.ENOSPC, "No space left on device")

            monkeypatch.setattr(os, "pwrite", disk_full)
            response = await conn.request(_commit(7))
            assert isinstance(response, ErrorResponse)
            assert response.error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert "could not keep" in response.error_message
            await within(server.wait_closed())
            assert server.storage_failure is not None
        monkeypatch.undo()
    async with running_server(config) as server:
        assert await _fetch(f"127.0.0.1:{server.port}") == {("t", 0): 5}, "7 was never kept"


async def test_serve_exits_with_an_error_after_a_storage_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports: list[int] = []
    running = asyncio.ensure_future(
        serve(fast_server_config(data_dir=str(tmp_path)), ready=ports.append)
    )
    await wait_until(lambda: bool(ports), what="the server listening")

    def failing_disk(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    async with connect(f"127.0.0.1:{ports[0]}") as conn:
        monkeypatch.setattr(os, "pwrite", failing_disk)
        create = CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)])
        response = await conn.request(create)
        assert isinstance(response, ErrorResponse)
        with pytest.raises(StorageFailedError):
            await within(running)


async def test_two_coordinators_cannot_share_a_data_dir(tmp_path: Path) -> None:
    config = fast_server_config(data_dir=str(tmp_path))
    async with running_server(config):
        with pytest.raises(DataDirError, match="in use"):
            async with running_server(config):
                pass


def test_data_dir_and_fsync_settings() -> None:
    assert settings_for([]).data_dir == ""
    config = settings_for(["--data-dir=/var/lib/huddle", "--fsync"])
    assert (config.data_dir, config.fsync) == ("/var/lib/huddle", True)
    config = settings_for([], {"HUDDLE_DATA_DIR": "/d", "HUDDLE_FSYNC": "true"})
    assert (config.data_dir, config.fsync) == ("/d", True)


async def test_requests_while_the_data_dir_loads_get_load_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator listens while it replays its data dir and answers
    COORDINATOR_LOAD_IN_PROGRESS (retriable) meanwhile, as Kafka does while it loads a
    coordinator partition; then it answers from the whole state. Where the coordinator is
    (FindCoordinator, DescribeCluster) is answered meanwhile: Kafka answers those from its
    metadata, never with COORDINATOR_LOAD_IN_PROGRESS."""
    config = fast_server_config(data_dir=str(tmp_path))
    async with running_server(config) as server, connect(f"127.0.0.1:{server.port}") as conn:
        await conn.request(CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]))
    reading, release = threading.Event(), threading.Event()
    real_open = journal_module.Journal.open

    def slow_open(*args: Any, **kwargs: Any) -> journal_module.Journal:
        reading.set()
        release.wait(10)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(journal_module.Journal, "open", slow_open)
    server = CoordinatorServer(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.start)
        await anyio.to_thread.run_sync(reading.wait, 10)
        await wait_until(lambda: server.port != 0, what="the server to listen")
        async with connect(f"127.0.0.1:{server.port}") as conn:
            early = await conn.request(ListTopicsRequest(topics=None))
            assert isinstance(early, ErrorResponse)
            assert early.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            assert error_class(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS).retriable
            found = await conn.request(FindCoordinatorRequest(group_id="g"))
            assert isinstance(found, FindCoordinatorResponse), found
            assert (found.error_code, found.host, found.port) == (0, "127.0.0.1", server.port)
            described = await conn.request(DescribeClusterRequest())
            assert isinstance(described, DescribeClusterResponse), described
            assert [(n.host, n.port) for n in described.nodes] == [("127.0.0.1", server.port)]
            assert server.loading
            release.set()
            await wait_until(lambda: not server.loading, what="the load to finish")
            loaded = await conn.request(ListTopicsRequest(topics=None))
            assert isinstance(loaded, ListTopicsResponse)
            assert [(t.name, t.partitions) for t in loaded.topics] == [("t", 2)]
    await server.close()


async def test_clients_wait_for_a_loading_coordinator_instead_of_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Admin calls, commits and fetches retry COORDINATOR_LOAD_IN_PROGRESS, as Kafka's
    clients do: they get their answer once the coordinator has loaded."""
    config = fast_server_config(data_dir=str(tmp_path))
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 1)
        async with member_for(bootstrap) as m:
            await wait_until(lambda: m.assignment == frozenset({TopicPartition("t", 0)}))
            await m.commit({TopicPartition("t", 0): 42})
            server.loading = True  # as while a restart replays the data dir
            async with Admin(bootstrap) as admin, anyio.create_task_group() as tg:
                results: list[object] = []

                async def calls() -> None:
                    results.append(await m.committed([TopicPartition("t", 0)]))
                    await admin.create_topic("u", 2)
                    results.append(await admin.list_topics())

                tg.start_soon(calls)
                await wait_until(lambda: server.refused_loading > 0, what="a call to be refused")
                server.loading = False
            assert results == [{TopicPartition("t", 0): 42}, {"t": 1, "u": 2}]


def member_for(bootstrap: str) -> Member:
    return Member(
        bootstrap,
        group_id="g",
        topics=["t"],
        session_timeout_ms=10_000,
        heartbeat_interval_ms=3_000,  # no heartbeat in the short loading window
        rebalance_timeout_ms=5_000,
    )


async def test_the_data_dir_holds_what_docs_containers_md_lists(tmp_path: Path) -> None:
    """docs/containers.md's table names each file that a coordinator, ``huddle users`` and
    ``huddle acls`` leave in the data dir, and nothing else is there."""
    section = (ROOT / "docs" / "containers.md").read_text().partition("## The data dir")[2]
    listed = re.findall(r"^\| `([^`]+)` \|", section.partition("\n## ")[0], re.MULTILINE)
    data_dir = tmp_path / "data"
    (tmp_path / "pw").write_text("pw\n")
    async with running_server(fast_server_config(data_dir=str(data_dir))) as server:
        async with Admin(f"127.0.0.1:{server.port}") as admin:
            await admin.create_topic("t", 1)
            await admin.set_offsets("g", {TopicPartition("t", 0): 5})
        store = ["--data-dir", str(data_dir), "--new-store"]
        add = ["users", "add", "u", "--password-file", str(tmp_path / "pw"), *store]
        assert await asyncio.to_thread(main, add, {}) == 0
        acl = ["acls", "add", "--principal", "User:u", "--operation", "read", "--group", "g"]
        assert await asyncio.to_thread(main, [*acl, *store], {}) == 0
    assert sorted(path.name for path in data_dir.iterdir()) == sorted(listed)
