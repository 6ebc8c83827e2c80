"""A block of offsets larger than etcd takes in one request (``--max-request-bytes``): etcd
refuses that write whole and says so. The commits to the block are refused
(OFFSET_METADATA_TOO_LARGE), the rest of the batch is kept, and the group's shard goes on
being served, its memory as etcd holds it; it used to be taken for a write of unknown
outcome, and the shard deposed on every such commit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from huddle.client import Admin
from huddle.client.connection import connect
from huddle.coordinator.cluster.offsets import KeptOffsets, kept, kept_offsets
from huddle.coordinator.cluster.oversized import PartlyKept, held_blocks, take_back
from huddle.coordinator.cluster.running import ClusterRun
from huddle.coordinator.cluster.store import EtcdStore
from huddle.coordinator.core import Coordinator
from huddle.coordinator.storage.records import DELETED, OffsetRecord
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
)
from tests.cluster.test_offset_blocks import PREFIX as BLOCKS
from tests.cluster.test_offset_blocks import SHARD, SHARDS, _node, _topic, store
from tests.etcd import Etcd, start_etcd, stop_etcd
from tests.helpers import FAST_GROUP, fast_server_config, running_server, wait_until

PREFIX = "/oversized"
LIMIT = 64 * 1024  # etcd's --max-request-bytes here (1.5 MiB by default)
METADATA = "m" * 15_000  # per partition: five of them make a block over LIMIT

__all__ = ["store"]  # the fixture


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    """An etcd that takes requests of up to ``LIMIT`` bytes (``store`` connects to it)."""
    server = start_etcd(tmp_path / "etcd", "--max-request-bytes", str(LIMIT))
    try:
        yield server
    finally:
        stop_etcd(server)


def _offsets(core: Coordinator) -> dict[tuple[str, int], int]:
    return {tp: kept[0] for tp, kept in core.groups["g"].offsets.items()}


@pytest.mark.parametrize("partitions", [5, 40], ids=["over-etcd-limit", "over-grpc-limit"])
async def test_a_block_etcd_refuses_for_its_size_refuses_its_commits_alone(
    store: EtcdStore, partitions: int
) -> None:
    """etcd's own refusal (over --max-request-bytes) and gRPC's (over that and 512 KiB):
    the block's commits are refused and put back in memory, the other topic's commit in
    the same batch is kept, the shard is served all along, and a later commit to the
    block merges with what etcd holds (not with the refused offsets)."""
    for topic in ("t", "u"):
        await _topic(store, topic, 64)
    node, serving, core = await _node(store, "n1")
    epoch = node.epoch(SHARD)

    async def write(records: list[OffsetRecord]) -> bool | PartlyKept:
        core.load(records, time.monotonic())  # as the core takes a commit
        return await serving.write([serving.stamp(r) for r in records])

    assert await write([OffsetRecord("g", "t", 0, 1)]) is True
    big = [OffsetRecord("g", "t", p, 100 + p, METADATA) for p in range(partitions)]
    written = await write([*big, OffsetRecord("g", "u", 0, 7)])
    refused = frozenset(("g", "t", p) for p in range(partitions))
    assert written == PartlyKept(refused)
    assert node.epoch(SHARD) == epoch  # served all along: never deposed, never renewed
    assert serving.loads == SHARDS  # each loaded once, never again
    assert node.serves(SHARD)
    assert _offsets(core) == {("t", 0): 1, ("u", 0): 7}  # memory as etcd holds it
    assert await write([OffsetRecord("g", "t", 1, 11)]) is True
    kept = await kept_offsets(store, BLOCKS)
    assert {k: r.offset for k, r in kept.items()} == {
        ("g", "t", 0): 1,
        ("g", "t", 1): 11,
        ("g", "u", 0): 7,
    }
    await node.leave()


async def _commit(port: int, topics: dict[str, dict[int, str]]) -> dict[tuple[str, int], int]:
    """Each partition's error code in the answer to a commit of ``topics`` (partition ->
    metadata, at offset 5)."""
    request = OffsetCommitRequest(
        group_id="g",
        topics=[
            OffsetCommitTopic(
                name=name,
                partitions=[
                    OffsetCommitPartition(partition=p, offset=5, metadata=m)
                    for p, m in parts.items()
                ],
            )
            for name, parts in topics.items()
        ],
    )
    async with connect(f"127.0.0.1:{port}", notices=False) as conn:
        answer = await conn.request(request, timeout=20)
    assert isinstance(answer, OffsetCommitResponse), answer
    assert answer.error_code == ErrorCode.NONE, answer
    return {(t.name, p.partition): p.error_code for t in answer.topics for p in t.partitions}


async def test_a_commit_etcd_refuses_for_its_size_is_answered_metadata_too_large(
    etcd: Etcd,
) -> None:
    """Through the server: the commit's partitions in the oversized block are answered
    OFFSET_METADATA_TOO_LARGE (as Kafka answers metadata over its limit), its partition
    of another topic NONE, and the group's next commit is served by the same node."""
    config = fast_server_config(
        cluster=f"etcd://{etcd.host}:{etcd.port}",
        shards=1,
        cluster_prefix=PREFIX,
        group=replace(FAST_GROUP, offset_metadata_max_bytes=16_384),
    )
    async with running_server(config) as server:
        run = await ClusterRun.start(server)
        try:
            await wait_until(lambda: run.node.serves(0), what="the node serves its shard")
            async with Admin(f"127.0.0.1:{server.port}") as admin:
                await admin.create_topic("t", 8)
                await admin.create_topic("u", 1)
            epoch = run.node.epoch(0)
            codes = await _commit(
                server.port, {"t": dict.fromkeys(range(5), METADATA), "u": {0: ""}}
            )
            too_large = ErrorCode.OFFSET_METADATA_TOO_LARGE
            assert codes == {**{("t", p): too_large for p in range(5)}, ("u", 0): ErrorCode.NONE}
            assert await _commit(server.port, {"t": {0: "small"}}) == {("t", 0): ErrorCode.NONE}
            assert run.node.epoch(0) == epoch
            kept = await kept_offsets(run.store, PREFIX)
            assert sorted(kept) == [("g", "t", 0), ("g", "u", 0)]
        finally:
            await run.stop()


def test_an_offset_deleted_in_a_block_etcd_refused_is_held_again_as_etcd_holds_it() -> None:
    """Retention deleted one partition's offset and, in the same batch, a commit to another
    partition of its block made the block too large: etcd refused the block whole, so it
    still holds the deleted offset. Memory is set back to what etcd holds, the deletion
    included (it was dropped from memory alone: an OffsetFetch said no offset while etcd
    kept one, and a failover brought it back); retention deletes it again later."""
    core = Coordinator()
    shard = 0
    offsets = KeptOffsets(BLOCKS)
    old, small = OffsetRecord("g", "t", 0, 5, "", 1_000), OffsetRecord("g", "t", 1, 7, "", 1_000)
    for record in (old, small):
        core.offsets.restore(record)
    key = offsets.key(shard, old)
    offsets.hold(shard, {key: {0: kept(old), 1: kept(small)}})
    deleted = OffsetRecord("g", "t", 0, DELETED, "", 0)
    huge = OffsetRecord("g", "t", 1, 8, METADATA * 5, 2_000)
    core.offsets.restore(deleted)  # as retention and the commit left memory
    core.offsets.restore(huge)
    records = [deleted, huge]
    before = held_blocks(offsets, shard, records)
    offsets.changes(shard, records)  # merged into the node's copy for the write
    take_back(core, offsets, shard, {key}, before, records)
    assert offsets.block(shard, key) == {0: kept(old), 1: kept(small)}
    assert _offsets(core) == {("t", 0): 5, ("t", 1): 7}  # as etcd holds them
