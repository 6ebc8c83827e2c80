"""A raw Kafka connection for tests: requests encoded and responses read with kio, frame
by frame, so a test controls what is pipelined and sees what comes back in which order."""

from __future__ import annotations

import asyncio
import io
import struct
from types import TracebackType
from typing import Any, Self

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from huddle.coordinator.kafka.schemas import API_VERSIONS_KEY, build
from tests.helpers import DEADLINE_S


def request_bytes(
    api_key: int, version: int, correlation_id: int, request: Any, client_id: str = "test"
) -> bytes:
    """``request`` (kio's class of that API and version) with its header, framed."""
    header_class = load_request_schema(api_key, version).__header_schema__
    header = header_class(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buffer = io.BytesIO()
    entity_writer(header_class)(buffer, header)
    entity_writer(type(request))(buffer, request)
    body = buffer.getvalue()
    return struct.pack(">i", len(body)) + body


def request(api_key: int, version: int, **fields: Any) -> Any:
    """kio's request of that API and version from plain values (nested lists of dicts,
    durations in milliseconds), as the listener builds its responses."""
    return build(load_request_schema(api_key, version), fields)


def parse(api_key: int, version: int, body: bytes) -> Any:
    """A response body (after the correlation id) of that API and version."""
    cls = load_response_schema(api_key, version)
    offset = 1 if cls.__flexible__ and api_key != API_VERSIONS_KEY else 0  # header v1's tags
    response, size = entity_reader(cls)(body, offset)
    assert offset + size == len(body), "the response has bytes left over"
    return response


class RawKafka:
    """One connection to a Kafka listener."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Self:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.writer is not None:
            self.writer.close()

    def write(self, data: bytes) -> None:
        assert self.writer is not None
        self.writer.write(data)

    def send(self, api_key: int, version: int, correlation_id: int, **fields: Any) -> None:
        body = request(api_key, version, **fields)
        self.write(request_bytes(api_key, version, correlation_id, body))

    async def call(self, api_key: int, version: int, correlation_id: int, **fields: Any) -> Any:
        """Send one request and read its answer (the next one on the connection)."""
        self.send(api_key, version, correlation_id, **fields)
        got, body = await self.read()
        assert got == correlation_id
        return parse(api_key, version, body)

    async def read(self) -> tuple[int, bytes]:
        """The next response: its correlation id and the rest of it."""
        assert self.reader is not None
        size = struct.unpack(">i", await self._exactly(4))[0]
        data = await self._exactly(size)
        return struct.unpack_from(">i", data)[0], data[4:]

    async def closed(self) -> bool:
        """Whether the listener closed the connection (EOF, or reset) within the deadline;
        if it did, this side is closed too."""
        assert self.reader is not None
        assert self.writer is not None
        try:
            data = await asyncio.wait_for(self.reader.read(65536), DEADLINE_S)
        except ConnectionError:
            data = b""
        if data == b"":
            self.writer.close()
            return True
        return False

    async def _exactly(self, n: int) -> bytes:
        assert self.reader is not None
        return await asyncio.wait_for(self.reader.readexactly(n), DEADLINE_S)
