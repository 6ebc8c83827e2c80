"""Group commit: the data dir is written off the event loop, in batches, and every
acknowledged change survives; a failed batch is refused whole."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from huddle.client.connection import Connection, ConnectionClosedError, connect
from huddle.coordinator import held as held_module
from huddle.coordinator.config import GroupConfig
from huddle.coordinator.storage import group_commit
from huddle.coordinator.storage.journal import COMPACT_MIN_RECORDS, Journal
from huddle.coordinator.storage.records import OffsetRecord, TopicRecord
from huddle.protocol.errors import ErrorCode, error_name
from huddle.protocol.framing import ClientCodec
from huddle.protocol.messages import (
    Call,
    CreateTopicsRequest,
    CreateTopicsResponse,
    ErrorResponse,
    JoinGroupResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Reply,
    Request,
    TopicSpec,
)
from tests.helpers import (
    RawClient,
    fast_server_config,
    join_request,
    running_server,
    wait_until,
    within,
)

COMMITTERS = 50


class GatedWrite:
    """``os.pwrite`` for a disk that hangs: it says a write began, waits to be released,
    then writes (or fails with EIO). Install with monkeypatch; release in a finally."""

    def __init__(self, *, fail: bool = False) -> None:
        self.began, self.release = threading.Event(), threading.Event()
        self.fail = fail
        self._pwrite = os.pwrite

    def __call__(self, fd: int, data: bytes, offset: int) -> int:
        self.began.set()
        self.release.wait(30)
        if self.fail:
            raise OSError(errno.EIO, "Input/output error")
        return self._pwrite(fd, data, offset)

    async def started(self) -> None:
        await anyio.to_thread.run_sync(self.began.wait, 10)


def commit(group: str, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group,
        generation_id=-1,
        member_id="",
        topics=[
            OffsetCommitTopic(
                name="t", partitions=[OffsetCommitPartition(partition=0, offset=offset)]
            )
        ],
    )


async def fetch(conn: Connection, group: str) -> int:
    """The committed offset of t-0 in ``group``; -1 if none."""
    response = await conn.call(OffsetFetchRequest(group_id=group), OffsetFetchResponse)
    offsets = [p.offset for t in response.topics for p in t.partitions]
    return offsets[0] if offsets else -1


async def pipelined(port: int, requests: Sequence[Request]) -> RawClient:
    """A handshaken raw client that has sent ``requests`` in one write, as calls 1..n."""
    raw = await RawClient.open(port)
    await raw.handshake()
    codec = ClientCodec()
    raw.writer.write(
        b"".join(
            codec.encode(Call(correlation_id=i, request=request))
            for i, request in enumerate(requests, start=1)
        )
    )
    return raw


async def create_topic(bootstrap: str) -> None:
    async with connect(bootstrap) as conn:
        await conn.request(CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))


async def commit_concurrently(bootstrap: str, rounds: int) -> list[int]:
    """COMMITTERS connections, each committing offsets 1..rounds to its own group."""
    codes: list[int] = []

    async def committer(i: int) -> None:
        async with connect(bootstrap) as conn:
            for offset in range(1, rounds + 1):
                response = await conn.request(commit(f"g{i}", offset), timeout=10)
                assert isinstance(response, OffsetCommitResponse)
                codes.append(response.topics[0].partitions[0].error_code)

    async with anyio.create_task_group() as tg:
        for i in range(COMMITTERS):
            tg.start_soon(committer, i)
    return codes


async def test_concurrent_commits_are_all_acknowledged_batched_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = fast_server_config(data_dir=str(tmp_path), fsync=True)
    fsyncs: list[str] = []
    real_sync = os.fdatasync

    def counting_sync(fd: int) -> None:
        fsyncs.append(threading.current_thread().name)
        real_sync(fd)

    monkeypatch.setattr(os, "fdatasync", counting_sync)
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await create_topic(bootstrap)
        codes = await commit_concurrently(bootstrap, rounds=20)
        commits = server.commits
        assert commits is not None
        batches = commits.batches
    assert codes == [ErrorCode.NONE] * (COMMITTERS * 20)
    # one fsync per batch, not per commit; concurrent commits share batches; none on the loop
    assert len(fsyncs) == batches
    assert batches < COMMITTERS * 20 / 2
    assert {name.startswith("huddle-journal") for name in fsyncs} == {True}
    monkeypatch.undo()
    async with running_server(config) as server, connect(f"127.0.0.1:{server.port}") as conn:
        kept = [await fetch(conn, f"g{i}") for i in range(COMMITTERS)]
    assert kept == [20] * COMMITTERS


@pytest.mark.parametrize("fsync", [True, False], ids=["fsync", "no-fsync"])
async def test_a_failed_batch_is_refused_whole_and_nothing_of_it_is_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    config = fast_server_config(data_dir=str(tmp_path), fsync=fsync)
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await create_topic(bootstrap)
        async with connect(bootstrap) as conn:
            await conn.call(commit("g0", 5), OffsetCommitResponse)
        real_pwrite = os.pwrite

        def disk_full(fd: int, data: bytes, offset: int) -> int:
            real_pwrite(fd, bytes(data)[:3], offset)  # a torn part, then the failure
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "pwrite", disk_full)
        answers: list[str] = []

        async def committer(i: int) -> None:
            async with connect(bootstrap) as conn:
                try:
                    response = await conn.request(commit(f"g{i}", 7), timeout=10)
                except ConnectionClosedError:  # it arrived after the coordinator stopped
                    answers.append("closed")
                    return
                assert isinstance(response, ErrorResponse)
                answers.append(error_name(response.error_code))

        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(committer, i)
        await within(server.wait_closed())
        assert "KAFKA_STORAGE_ERROR" in answers  # none was acknowledged
        assert set(answers) <= {"KAFKA_STORAGE_ERROR", "closed"}
        assert server.storage_failure is not None
    monkeypatch.undo()
    async with running_server(config) as server, connect(f"127.0.0.1:{server.port}") as conn:
        assert await fetch(conn, "g0") == 5
        assert await fetch(conn, "g1") == -1  # never kept


def test_compaction_builds_the_snapshot_from_copies_taken_at_one_instant(tmp_path: Path) -> None:
    """The loop copies the containers; the records are built later, off the loop, and
    show the state as it was when copied."""
    from huddle.coordinator.core import Coordinator

    core = Coordinator(fast_server_config().group)
    core.restore([TopicRecord("t", 2), OffsetRecord("g", "t", 0, 10), OffsetRecord("g", "t", 1, 3)])
    build = core.frozen_snapshot()
    core.restore([OffsetRecord("g", "t", 0, 99), TopicRecord("u", 1)])  # after the copy
    assert list(build()) == [
        TopicRecord("t", 2),
        OffsetRecord("g", "t", 0, 10),
        OffsetRecord("g", "t", 1, 3),
    ]
    journal = Journal.open(tmp_path)
    try:
        journal.append([OffsetRecord("g", "t", 0, n) for n in range(5)])
        assert journal.compact(build)
    finally:
        journal.close()
    reopened = Journal.open(tmp_path)
    try:
        assert reopened.records == list(build())
    finally:
        reopened.close()


async def test_answers_wait_for_the_write_of_changes_made_before_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetch handled after a commit is not answered before that commit is on disk."""
    config = fast_server_config(data_dir=str(tmp_path), fsync=True)  # writes on the thread
    gate = GatedWrite()

    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await create_topic(bootstrap)
        monkeypatch.setattr(os, "pwrite", gate)
        async with connect(bootstrap) as writer, connect(bootstrap) as reader:
            order: list[str] = []

            async def commit_it() -> None:
                await writer.call(commit("g0", 8), OffsetCommitResponse, timeout=10)
                order.append("commit acknowledged")

            async def fetch_it() -> None:
                await gate.started()
                offset = await fetch(reader, "g0")
                order.append(f"fetched {offset}")

            async with anyio.create_task_group() as tg:
                tg.start_soon(commit_it)
                tg.start_soon(fetch_it)
                await gate.started()
                commits = server.commits
                assert commits is not None
                # the fetch arrived and waits behind the commit's write
                await wait_until(lambda: commits.waiting() == 2, what="the fetch to be held")
                assert order == []  # the write is stuck: nothing was answered
                gate.release.set()
        assert sorted(order) == ["commit acknowledged", "fetched 8"]


async def test_changes_made_while_the_compaction_copies_the_state_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy is taken one group per loop pass; a commit to a group already copied is
    written after the copy and must survive the compaction."""
    monkeypatch.setattr(group_commit, "COPY_SLICE_S", 0.0)
    config = fast_server_config(data_dir=str(tmp_path))
    groups = 50
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await create_topic(bootstrap)
        async with connect(bootstrap) as conn:
            for i in range(groups):
                await conn.call(commit(f"g{i}", 1), OffsetCommitResponse)
            commits, journal = server.commits, server.journal
            assert commits is not None
            assert journal is not None
            journal.written = 10 * COMPACT_MIN_RECORDS  # as if it had grown past the state
            commits.compact_if_due()  # g0 is copied in the next pass, g49 fifty passes later
            assert not gc.isenabled()  # no collection walks the copy while it is taken
            await conn.call(commit("g0", 2), OffsetCommitResponse)
            await within(commits.compacted())
            assert gc.isenabled()
            assert journal.written < 10 * COMPACT_MIN_RECORDS  # it did compact
    async with running_server(config) as server, connect(f"127.0.0.1:{server.port}") as conn:
        assert await fetch(conn, "g0") == 2
        assert [await fetch(conn, f"g{i}") for i in range(1, groups)] == [1] * (groups - 1)


async def test_a_waiting_join_held_behind_a_failed_batch_is_answered_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The core still holds the JoinGroup (its phase has not ended): the storage failure must
    not answer it, the core's shutdown does, once."""
    group = GroupConfig(initial_rebalance_delay_ms=60_000)  # the join phase outlasts the test
    config = fast_server_config(data_dir=str(tmp_path), fsync=True, group=group)
    gate = GatedWrite(fail=True)

    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await create_topic(bootstrap)
        member = await RawClient.open(server.port)
        await member.handshake()
        first = await member.call(join_request())
        assert isinstance(first, JoinGroupResponse)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        monkeypatch.setattr(os, "pwrite", gate)
        async with connect(bootstrap) as committer, anyio.create_task_group() as tg:

            async def commit_it() -> None:
                try:
                    response = await committer.request(commit("g0", 1), timeout=10)
                except ConnectionClosedError:  # the answer lost the race with the close
                    return
                assert isinstance(response, ErrorResponse)

            tg.start_soon(commit_it)
            await gate.started()
            commits = server.commits
            assert commits is not None
            await member.send(Call(correlation_id=99, request=join_request(first.member_id)))
            await wait_until(lambda: commits.waiting() == 2, what="the join to be held")
            gate.release.set()
        frames = await member.frames_until_closed()
        answers = [f for f in frames if isinstance(f, Reply) and f.correlation_id == 99]
        assert len(answers) == 1, answers
        await member.close()


async def test_closing_while_the_compaction_copies_the_state_abandons_it_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group_commit, "COPY_SLICE_S", 0.0)  # one group a loop pass
    loop_errors: list[object] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, ctx: loop_errors.append(ctx))
    interval = sys.getswitchinterval()
    config = fast_server_config(data_dir=str(tmp_path))
    async with running_server(config) as server:
        await create_topic(f"127.0.0.1:{server.port}")
        server.core.restore([OffsetRecord(f"g{i}", "t", 0, i) for i in range(5_000)])
        commits, journal = server.commits, server.journal
        assert commits is not None
        assert journal is not None
        journal.written = 10 * COMPACT_MIN_RECORDS
        commits.compact_if_due()  # five thousand passes to copy: the close comes first
    await wait_until(lambda: commits._copying is None, what="the copy to stop")
    assert loop_errors == []  # nothing handed to the stopped writer thread
    assert not commits._compacting
    assert sys.getswitchinterval() == interval
    assert gc.isenabled()
    async with running_server(config) as server, connect(f"127.0.0.1:{server.port}") as conn:
        assert await fetch(conn, "g0") == -1  # restored into memory only: never written
        assert server.journal is not None


async def test_a_write_that_never_returns_does_not_keep_the_server_from_closing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = fast_server_config(data_dir=str(tmp_path), fsync=True, shutdown_timeout_ms=200)
    gate = GatedWrite()
    server_ = None
    try:
        async with running_server(config) as server:
            server_ = server
            bootstrap = f"127.0.0.1:{server.port}"
            await create_topic(bootstrap)
            monkeypatch.setattr(os, "pwrite", gate)
            async with connect(bootstrap) as conn, anyio.create_task_group() as tg:

                async def commit_it() -> None:
                    with pytest.raises(ConnectionClosedError):
                        await conn.request(commit("g0", 1), timeout=10)

                tg.start_soon(commit_it)
                await gate.started()
                await within(server.close())  # the commit is never acknowledged
    finally:
        gate.release.set()  # let the writer thread finish
    assert server_ is not None
    assert server_.storage_failure is None


async def test_commits_acknowledged_while_a_compaction_runs_on_the_writer_thread_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fsync every batch goes through the writer thread: batches queued before, during
    and after the compaction (which the writer runs between two of them) all survive."""
    monkeypatch.setattr(group_commit, "COPY_SLICE_S", 0.0)
    config = fast_server_config(data_dir=str(tmp_path), fsync=True)
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await create_topic(bootstrap)
        commits, journal = server.commits, server.journal
        assert commits is not None
        assert journal is not None
        server.core.restore([OffsetRecord(f"old{i}", "t", 0, i) for i in range(2_000)])
        journal.written = 10 * COMPACT_MIN_RECORDS
        async with anyio.create_task_group() as tg:
            tg.start_soon(commit_concurrently, bootstrap, 30)
            await wait_until(lambda: commits.batches > 0, what="a first batch")
            assert commits.compact_if_due()
        await within(commits.compacted())
        assert journal.written < 10 * COMPACT_MIN_RECORDS  # it did compact
    async with running_server(config) as server, connect(f"127.0.0.1:{server.port}") as conn:
        assert [await fetch(conn, f"g{i}") for i in range(COMMITTERS)] == [30] * COMMITTERS
        assert await fetch(conn, "old1999") == 1999  # in memory only: kept by the snapshot


async def answer_to(client: RawClient, correlation_id: int) -> object:
    """The response to ``correlation_id`` (other frames skipped); AssertionError if closed."""
    while True:
        frame = await client.read_frame()
        assert frame is not None, f"closed before the answer to {correlation_id}"
        if isinstance(frame, Reply) and frame.correlation_id == correlation_id:
            return frame.response


async def member_id_for(client: RawClient) -> str:
    """The id MEMBER_ID_REQUIRED hands out (KIP-394)."""
    first = await client.call(join_request())
    assert isinstance(first, JoinGroupResponse)
    return first.member_id


async def test_answers_a_failed_batch_held_for_other_members_become_storage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b's JoinGroup waits in the core; a's rejoin ends the join phase, so a's request
    produces b's answer too, and it is held behind a write that then fails: b must get
    KAFKA_STORAGE_ERROR, not silence (the core no longer holds b's request)."""
    config = fast_server_config(data_dir=str(tmp_path), fsync=True)
    gate = GatedWrite(fail=True)

    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await create_topic(bootstrap)
        a, b = await RawClient.open(server.port), await RawClient.open(server.port)
        await a.handshake(client_id="a")
        await b.handshake(client_id="b")
        a_id = await member_id_for(a)
        await a.send(Call(correlation_id=10, request=join_request(a_id)))
        joined = await answer_to(a, 10)
        assert isinstance(joined, JoinGroupResponse)
        assert joined.error_code == ErrorCode.NONE
        b_id = await member_id_for(b)
        await b.send(Call(correlation_id=20, request=join_request(b_id)))
        group = server.core.groups["g"]
        await wait_until(lambda: b_id in group.members, what="b to wait in the join phase")
        monkeypatch.setattr(os, "pwrite", gate)
        commits = server.commits
        assert commits is not None
        async with connect(bootstrap) as committer, anyio.create_task_group() as tg:

            async def commit_it() -> None:
                with contextlib.suppress(ConnectionClosedError):
                    await committer.request(commit("g0", 1), timeout=10)

            tg.start_soon(commit_it)
            await gate.started()
            await a.send(Call(correlation_id=11, request=join_request(a_id)))
            await wait_until(lambda: commits.waiting() == 2, what="a's rejoin to be held")
            gate.release.set()
        for client, cid in ((a, 11), (b, 20)):
            answer = await answer_to(client, cid)
            assert isinstance(answer, ErrorResponse)
            assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        await a.close()
        await b.close()


STUCK_WRITE = """
import asyncio, os, sys, threading
from huddle.client.connection import connect
from huddle.coordinator.config import ServerConfig
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.messages import (
    CreateTopicsRequest, OffsetCommitPartition, OffsetCommitRequest, OffsetCommitTopic,
    TopicSpec,
)

async def main() -> None:
    config = ServerConfig(
        host="127.0.0.1", port=0, data_dir=sys.argv[1], fsync=True, shutdown_timeout_ms=200
    )
    server = CoordinatorServer(config)
    await server.start()
    bootstrap = f"127.0.0.1:{server.port}"
    async with connect(bootstrap) as conn:
        await conn.request(CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
    writing = threading.Event()

    def stuck(fd: int, data: bytes, offset: int) -> int:
        writing.set()
        threading.Event().wait()  # a hung disk: never returns
        return 0

    os.pwrite = stuck
    partition = OffsetCommitPartition(partition=0, offset=1)
    commit = OffsetCommitRequest(
        group_id="g", generation_id=-1, member_id="",
        topics=[OffsetCommitTopic(name="t", partitions=[partition])],
    )

    async def commit_it() -> None:
        try:
            async with connect(bootstrap) as conn:
                await conn.request(commit, timeout=30)
        except Exception:  # the server closes the connection: never acknowledged
            pass

    task = asyncio.ensure_future(commit_it())
    await asyncio.to_thread(writing.wait, 10)
    await server.close()
    await task
    print("closed", flush=True)

asyncio.run(main())
"""


@pytest.mark.e2e
def test_a_process_whose_write_never_returns_still_exits(tmp_path: Path) -> None:
    """The writer thread is a daemon: once the server has given up on a stuck write (after
    its shutdown timeout), the process can exit; `huddle serve` must stop on SIGTERM."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", STUCK_WRITE, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("the process did not exit after the server closed") from exc
    assert done.stdout.splitlines()[-1:] == ["closed"], done.stderr
    assert done.returncode == 0, done.stderr


async def test_a_client_that_shuts_its_side_gets_the_answers_waiting_for_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sends requests and shuts its side gets every answer, also those held
    until their change is on disk (they were lost: the connection closed at the FIN)."""
    config = fast_server_config(data_dir=str(tmp_path), fsync=True)
    gate = GatedWrite()
    async with running_server(config) as server:
        await create_topic(f"127.0.0.1:{server.port}")
        monkeypatch.setattr(os, "pwrite", gate)
        try:
            raw = await pipelined(server.port, [commit("g", 5), OffsetFetchRequest(group_id="g")])
            raw.writer.write_eof()
            await gate.started()
            conn = next(c for c in server.connections() if c.client_id == "raw")
            await wait_until(lambda: conn.peer_done, what="the FIN to be read")
        finally:
            gate.release.set()
        frames = await raw.frames_until_closed()
        assert [type(f) for f in frames] == [Reply, Reply]
        fetched = frames[1]
        assert isinstance(fetched, Reply)
        assert isinstance(fetched.response, OffsetFetchResponse)
        assert [p.offset for t in fetched.response.topics for p in t.partitions] == [5]
        await raw.close()


async def test_held_answers_bound_what_one_connection_has_handled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the disk is slow, one connection's requests stop being handled once a bounded
    number of its answers wait for it (they piled up without bound); the rest wait, and
    everything is answered once the disk is back."""
    monkeypatch.setattr(held_module, "HELD_PER_CONNECTION", 10)
    config = fast_server_config(data_dir=str(tmp_path), fsync=True)
    gate = GatedWrite()
    async with running_server(config) as server:
        await create_topic(f"127.0.0.1:{server.port}")
        monkeypatch.setattr(os, "pwrite", gate)
        try:
            raw = await pipelined(server.port, [commit("g", i) for i in range(1, 101)])
            await gate.started()
            conn = next(c for c in server.connections() if c.client_id == "raw")
            await wait_until(lambda: conn.held == 10, what="ten answers held")
            assert len(conn.inbox) > 0, "the others wait, unhandled"
        finally:
            gate.release.set()
        answered = [await raw.read_frame() for _ in range(100)]
        assert [f.correlation_id for f in answered if isinstance(f, Reply)] == list(range(1, 101))
        await raw.close()


async def test_a_connection_whose_held_answers_went_out_reads_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection whose last frames were all held (its reading paused meanwhile) reads
    again once they are answered: it was left paused for ever, and its member evicted."""
    monkeypatch.setattr(held_module, "HELD_PER_CONNECTION", 5)
    config = fast_server_config(data_dir=str(tmp_path), fsync=True)
    gate = GatedWrite()
    async with running_server(config) as server:
        await create_topic(f"127.0.0.1:{server.port}")
        monkeypatch.setattr(os, "pwrite", gate)
        try:
            raw = await pipelined(server.port, [commit("g", i) for i in range(1, 11)])
            await gate.started()
        finally:
            gate.release.set()
        answered = [await raw.read_frame() for _ in range(10)]
        assert all(isinstance(f, Reply) for f in answered)
        more = await raw.call(OffsetFetchRequest(group_id="g"))  # read and answered
        assert isinstance(more, OffsetFetchResponse), more
        await raw.close()


async def test_a_reading_client_gets_held_answers_larger_than_its_write_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers held while the disk was slow are released together; together they may be
    more than --max-write-buffer-bytes. A client that reads gets them all (it was dropped
    for them); they go out as it reads."""
    limit = 1024 * 1024
    config = fast_server_config(
        data_dir=str(tmp_path), fsync=True, max_write_buffer_bytes=limit, max_response_bytes=limit
    )
    gate = GatedWrite()
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await create_topic(bootstrap)
        async with connect(bootstrap) as setup:
            await setup.call(
                CreateTopicsRequest(topics=[TopicSpec(name="wide", partitions=10_000)]),
                CreateTopicsResponse,
            )
            await setup.call(
                OffsetCommitRequest(
                    group_id="big",
                    topics=[
                        OffsetCommitTopic(
                            name="wide",
                            partitions=[
                                OffsetCommitPartition(partition=p, offset=p) for p in range(10_000)
                            ],
                        )
                    ],
                ),
                OffsetCommitResponse,
            )
        monkeypatch.setattr(os, "pwrite", gate)
        try:
            fetch_all = OffsetFetchRequest(group_id="big")  # ~300 KB answers
            raw = await pipelined(server.port, [commit("g", 1)] + [fetch_all] * 20)
            await gate.started()
            conn = next(c for c in server.connections() if c.client_id == "raw")
            await wait_until(lambda: conn.held == 21, what="the answers held behind the write")
        finally:
            gate.release.set()
        answers = [await raw.read_frame() for _ in range(21)]
        assert [f.correlation_id for f in answers if isinstance(f, Reply)] == list(range(1, 22))
        await raw.close()
