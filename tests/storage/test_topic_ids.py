"""Topic ids kept in the data dir: each topic keeps the id it was created with across
restarts (and compactions); a data dir written before topics had ids gives each of its
topics one when it is first loaded, records it, and keeps it from then on."""

from __future__ import annotations

import uuid
from pathlib import Path

from huddle.client.connection import connect
from huddle.coordinator.storage.journal import JOURNAL, Journal
from huddle.coordinator.storage.records import (
    OffsetRecord,
    Record,
    TopicRecord,
    encode_frames,
)
from huddle.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    TopicSpec,
)
from tests.helpers import fast_server_config, running_server


async def _ids(port: int) -> dict[str, uuid.UUID | None]:
    async with connect(f"127.0.0.1:{port}") as conn:
        listed = await conn.call(ListTopicsRequest(), ListTopicsResponse)
    return {t.name: t.topic_id for t in listed.topics}


def _kept_ids(data_dir: Path) -> list[tuple[str, uuid.UUID | None]]:
    journal = Journal.open(str(data_dir), fsync=False)
    try:
        return [(r.name, r.topic_id) for r in journal.records if isinstance(r, TopicRecord)]
    finally:
        journal.close()


async def test_a_topic_keeps_its_id_across_restarts(tmp_path: Path) -> None:
    config = fast_server_config(data_dir=str(tmp_path))
    async with running_server(config) as server:
        async with connect(f"127.0.0.1:{server.port}") as conn:
            specs = [TopicSpec(name="a", partitions=2), TopicSpec(name="b", partitions=1)]
            created = await conn.call(CreateTopicsRequest(topics=specs), CreateTopicsResponse)
        given = {t.name: t.topic_id for t in created.topics}
        assert await _ids(server.port) == given
    assert all(i is not None and i.version == 4 for i in given.values())
    assert len(set(given.values())) == 2
    async with running_server(config) as server:
        assert await _ids(server.port) == given
    async with running_server(config) as server:  # compacted meanwhile, or not: the same
        server.core.snapshot()
        assert await _ids(server.port) == given


async def test_a_topic_deleted_and_created_again_has_a_new_id_after_a_restart(
    tmp_path: Path,
) -> None:
    config = fast_server_config(data_dir=str(tmp_path))
    spec = [TopicSpec(name="t", partitions=1)]
    async with running_server(config) as server, connect(f"127.0.0.1:{server.port}") as conn:
        await conn.call(CreateTopicsRequest(topics=spec), CreateTopicsResponse)
        first = (await _ids(server.port))["t"]
        await conn.call(DeleteTopicsRequest(topics=["t"]), DeleteTopicsResponse)
        await conn.call(CreateTopicsRequest(topics=spec), CreateTopicsResponse)
        second = (await _ids(server.port))["t"]
    assert None not in (first, second)
    assert first != second
    async with running_server(config) as server:
        assert await _ids(server.port) == {"t": second}


async def test_a_data_dir_from_before_topic_ids_gives_each_topic_one_once(
    tmp_path: Path,
) -> None:
    older: list[Record] = [TopicRecord("t", 3), OffsetRecord("g", "t", 0, 7), TopicRecord("u", 1)]
    (tmp_path / JOURNAL).write_bytes(encode_frames(older))
    config = fast_server_config(data_dir=str(tmp_path))
    async with running_server(config):
        pass  # recorded as it starts, before any request
    given = dict((n, i) for n, i in _kept_ids(tmp_path) if i is not None)
    assert set(given) == {"t", "u"}
    async with running_server(config) as server:  # the same ids again
        assert await _ids(server.port) == given
    async with running_server(config) as server:
        assert await _ids(server.port) == given
    assert len(_kept_ids(tmp_path)) == 4, "given once"
