"""The Kafka fuzzer's bystander: a consumer group member on the Kafka wire that must not
notice the fuzzing. It makes the run's topics, joins its own group as its only member
(JoinGroup with the MEMBER_ID_REQUIRED round, SyncGroup), then heartbeats every
``interval_s`` until told to stop: every heartbeat must be answered NONE, and the slowest
is timed.

``Bystander`` runs it on the caller's event loop (in-process runs: the listener shares
that loop anyway) or in a process of its own (the benchmark: the fuzzer's own work, such
as reading a Metadata answer of 50,000 partitions, must not be timed as the listener's).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import struct
import time
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any, Final, Self

from kio.index import load_request_schema

from huddle.chaos.kafka_frames import encode, subscription
from huddle.chaos.kafka_oracle import Answer, parse_response
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.schemas import build
from huddle.protocol.errors import HuddleError

HOST: Final = "127.0.0.1"
BYSTANDER_GROUP: Final = "fuzz-bystander"
TOPICS: Final = {"fuzz-t": 3, "fuzz-u": 1}  # made before the run, so Produce and Fetch find them
_MEMBER_ID_REQUIRED: Final = 79
_START_S: Final = 60.0  # for the bystander's process to start and join
_CALL_S: Final = 30.0  # for an answer (the bystander's session timeout)


class Beats:
    """What the bystander saw: heartbeats answered, the slowest, what went wrong."""

    def __init__(self) -> None:
        self.heartbeats = 0
        self.slowest_ms = 0.0
        self.violations: list[str] = []


class BystanderFailedError(HuddleError, ConnectionError):
    """The well-behaved bystander was not answered as it should be (a violation)."""


class KafkaClient:
    """One plain Kafka connection: a request, then its answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.ids = iter(range(1, 2**31))

    async def call(self, api_key: int, version: int, **fields: Any) -> Any:
        correlation_id = next(self.ids)
        request = build(load_request_schema(api_key, version), fields)
        body = encode(api_key, version, correlation_id, request, "fuzz-bystander").body
        self.writer.write(struct.pack(">i", len(body)) + body)
        try:
            async with asyncio.timeout(_CALL_S):
                (size,) = struct.unpack(">i", await self.reader.readexactly(4))
                data = await self.reader.readexactly(size)
        except TimeoutError:
            raise BystanderFailedError(f"no answer within {_CALL_S} s") from None
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise BystanderFailedError(f"the bystander's connection ended: {exc!r}") from None
        answer = Answer(api_key, version, correlation_id)
        response = parse_response(data, answer)
        if isinstance(response, str):
            raise BystanderFailedError(response)
        return response


async def _join(client: KafkaClient) -> dict[str, Any]:
    """Join the bystander's group as its only member; the Heartbeat that keeps it in."""
    join: dict[str, Any] = {
        "group_id": BYSTANDER_GROUP,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription(("fuzz-t",))}],
        "session_timeout": 30_000,
        "rebalance_timeout": 30_000,
    }
    joined = await client.call(Api.JOIN_GROUP, 9, **join)
    if joined.error_code.value == _MEMBER_ID_REQUIRED:
        joined = await client.call(Api.JOIN_GROUP, 9, **{**join, "member_id": joined.member_id})
    if joined.error_code.value != 0:
        raise BystanderFailedError(f"the bystander's JoinGroup was answered {joined!r}")
    member, generation = joined.member_id, joined.generation_id
    synced = await client.call(
        Api.SYNC_GROUP,
        5,
        group_id=BYSTANDER_GROUP,
        generation_id=generation,
        member_id=member,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[{"member_id": member, "assignment": b""}],
    )
    if synced.error_code.value != 0:
        raise BystanderFailedError(f"the bystander's SyncGroup was answered {synced!r}")
    return {"group_id": BYSTANDER_GROUP, "generation_id": generation, "member_id": member}


async def _bystander(
    port: int, beats: Beats, ready: asyncio.Event, done: asyncio.Event, interval_s: float
) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    client = KafkaClient(reader, writer)
    try:
        topics = [
            {
                "name": n,
                "num_partitions": p,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
            for n, p in TOPICS.items()
        ]
        await client.call(Api.CREATE_TOPICS, 7, topics=topics, timeout=5_000, validate_only=False)
        beat = await _join(client)
        ready.set()
        while not done.is_set():
            sent = time.perf_counter()
            answer = await client.call(Api.HEARTBEAT, 4, **beat)
            beats.slowest_ms = max(beats.slowest_ms, (time.perf_counter() - sent) * 1000)
            beats.heartbeats += 1
            if answer.error_code.value != 0:
                beats.violations.append(f"the bystander's heartbeat was answered {answer!r}")
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), interval_s)
    except (ConnectionError, AttributeError) as exc:
        beats.violations.append(f"the bystander failed: {exc!r}")
    finally:
        ready.set()
        writer.close()


def _in_a_process(port: int, interval_s: float, pipe: Connection) -> None:
    """The bystander's process: "ready" once it has joined, its ``Beats`` once stopped
    (anything sent on ``pipe`` stops it)."""
    beats = Beats()

    async def main() -> None:
        ready, done = asyncio.Event(), asyncio.Event()
        asyncio.get_running_loop().add_reader(pipe.fileno(), done.set)
        task = asyncio.create_task(_bystander(port, beats, ready, done, interval_s))
        await ready.wait()
        pipe.send("ready")
        await task

    asyncio.run(main())
    pipe.send((beats.heartbeats, beats.slowest_ms, beats.violations))


class Bystander:
    """``async with Bystander(port, beats, ...)``: joined on entry, stopped on exit."""

    def __init__(self, port: int, beats: Beats, interval_s: float, *, process: bool) -> None:
        self.port, self.beats, self.interval_s, self.process = port, beats, interval_s, process
        self._done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pipe: Connection | None = None
        self._proc: Any = None

    async def __aenter__(self) -> Self:
        if not self.process:
            ready = asyncio.Event()
            self._task = asyncio.create_task(
                _bystander(self.port, self.beats, ready, self._done, self.interval_s)
            )
            await ready.wait()
            return self
        context = multiprocessing.get_context("spawn")
        self._pipe, theirs = context.Pipe()
        self._proc = context.Process(
            target=_in_a_process, args=(self.port, self.interval_s, theirs), daemon=True
        )
        self._proc.start()
        message = await self._receive()
        if message != "ready":
            self.beats.violations.append(f"the bystander did not start: {message!r}")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._done.set()
            await self._task
            return
        assert self._pipe is not None
        with contextlib.suppress(OSError):
            self._pipe.send("stop")
        result = await self._receive()
        if isinstance(result, tuple):
            self.beats.heartbeats, self.beats.slowest_ms, violations = result
            self.beats.violations += violations
        else:
            self.beats.violations.append(f"the bystander's process ended: {result!r}")
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()

    async def _receive(self) -> Any:
        """The process's next message, or why there is none (within ``_START_S``)."""
        pipe = self._pipe
        assert pipe is not None

        def receive() -> Any:
            if not pipe.poll(_START_S):
                return "no message"
            try:
                return pipe.recv()
            except EOFError:
                return "ended"

        return await asyncio.get_running_loop().run_in_executor(None, receive)
