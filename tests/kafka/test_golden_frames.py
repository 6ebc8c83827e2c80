"""Requests captured from each real client (``tests/kafka/golden/<client>.json``: the first
request of each (API, version) a consumer sent while it formed a group, fetched,
committed, heartbeated and left; ``python -m bench.kafka_golden`` captures them again).

Each frame is read by the listener's decode with the values kafka-python's codec reads
from it, and fed to a listener: its answer comes back under the frame's correlation id
and is parsed by kafka-python's client parser, and aiokafka's frames' answers by
aiokafka's own. A codec change that breaks a real client shows here without the client."""

from __future__ import annotations

import io
import json
from functools import cache
from pathlib import Path
from typing import Any, Final

import pytest
from aiokafka.protocol import (
    admin,
    api,
    commit,
    coordination,
    fetch,
    group,
    metadata,
    offset,
    produce,
)

from huddle.coordinator.kafka import header, schemas
from huddle.coordinator.kafka.apis import Api, served
from tests.kafka import second_codec
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka

GOLDEN: Final = Path(__file__).parent / "golden"
CLIENTS: Final = ("kafka-python", "aiokafka", "confluent-kafka", "kcat", "kafkajs")
# what each client sent, at least, while it was in the group and as it left
LIFECYCLE: Final = frozenset(
    {
        Api.API_VERSIONS,
        Api.METADATA,
        Api.FIND_COORDINATOR,
        Api.JOIN_GROUP,
        Api.SYNC_GROUP,
        Api.HEARTBEAT,
        Api.OFFSET_FETCH,
        Api.OFFSET_COMMIT,
        Api.FETCH,
        Api.LEAVE_GROUP,
    }
)
_AIOKAFKA_MODULES: Final = (admin, commit, coordination, fetch, group, metadata, offset, produce)


def _captured(client: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((GOLDEN / f"{client}.json").read_text())
    return loaded


def _frames() -> list[Any]:
    params = []
    for client in CLIENTS:
        for frame in _captured(client)["frames"]:
            name = f"{client}-{frame['api']}-v{frame['version']}"
            data = bytes.fromhex(frame["frame"])
            params.append(pytest.param(client, frame["api_key"], frame["version"], data, id=name))
    return params


FRAMES: Final = _frames()


@pytest.mark.parametrize("client", CLIENTS)
def test_each_client_s_frames_cover_its_group_s_life_once_per_version(client: str) -> None:
    captured = _captured(client)
    pairs = [(f["api_key"], f["version"]) for f in captured["frames"]]
    assert len(pairs) == len(set(pairs))
    assert {api for api, _ in pairs} >= LIFECYCLE
    assert all(served(api, version) for api, version in pairs)
    assert sum(len(f["frame"]) // 2 for f in captured["frames"]) < 4096


@pytest.mark.parametrize(("client", "api", "version", "frame"), FRAMES)
def test_a_client_s_request_is_read_as_kafka_python_reads_it(
    client: str, api: int, version: int, frame: bytes
) -> None:
    body = frame[4:]
    assert int.from_bytes(frame[:4], "big") == len(body)
    _, offset = header.client_id_and_end(body, schemas.flexible(api, version))
    ours = schemas.decode(api, version, body, offset)

    cls = second_codec.REQUESTS[api]
    theirs = cls[version].decode(frame, header=True, framed=True)

    struct = cls._struct
    read = second_codec.plain_kafka_python(struct, version, theirs)
    assert second_codec.plain_kio(ours, struct, version) == read


@pytest.mark.parametrize(("client", "api", "version", "frame"), FRAMES)
async def test_a_client_s_request_is_answered_so_its_parser_reads_it(
    kafka: Listening, client: str, api: int, version: int, frame: bytes
) -> None:
    correlation_id = header.start(frame[4:]).correlation_id
    async with RawKafka(kafka.port) as conn:
        conn.write(frame)
        got, rest = await conn.read()
    answer = (4 + len(rest)).to_bytes(4, "big") + got.to_bytes(4, "big") + rest

    assert got == correlation_id
    read_id, _ = second_codec.parse_response(second_codec.RESPONSES[api], version, answer)
    assert read_id == correlation_id
    if client == "aiokafka":
        _parse_as_aiokafka(api, version, answer)


def _parse_as_aiokafka(api_key: int, version: int, answer: bytes) -> None:
    """As aiokafka's connection reads an answer (``AIOKafkaConnection._handle_frame``)."""
    request = _aiokafka_requests()[api_key, version]
    buffer = io.BytesIO(answer[4:])
    request.parse_response_header(request, buffer)
    request.RESPONSE_TYPE.decode(buffer)
    assert buffer.read() == b"", "aiokafka leaves bytes of the answer unread"


@cache
def _aiokafka_requests() -> dict[tuple[int, int], Any]:
    assert _AIOKAFKA_MODULES  # each defines its request classes on import
    found: dict[tuple[int, int], Any] = {}
    pending: list[Any] = [api.RequestStruct]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if "API_VERSION" in vars(cls):
            found[cls.API_KEY, cls.API_VERSION] = cls
    return found
