"""Capture the requests each real Kafka client sends, as golden frames for the tests
(``tests/kafka/golden/<client>.json``, read by ``tests/kafka/test_golden_frames.py``).

For each client, ``huddle serve --kafka-port`` runs behind a recording proxy that it
advertises (``--kafka-advertise``), so every connection of the client goes through it. A
topic of two partitions gets two records each (not recorded); then the client's consumer
driver (``huddle.chaos.kafka_workers``) forms a group, fetches, commits, heartbeats and, on
SIGTERM, leaves, while the proxy keeps the first request of each (API, version) the client
sends. Only distinct (API, version) pairs are kept: a few kilobytes per client.

Run: ``python -m bench.kafka_golden`` (every client), or ``--client kcat`` (one; again for
more); kafkajs needs ``make kafkajs``. Each waits on what the proxy saw, with a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from importlib import metadata
from pathlib import Path
from typing import Any, Final

from huddle.chaos.kafka_workers import brokers, launch
from huddle.chaos.kafka_workers.options import DriverOptions
from huddle.chaos.kafka_workers.running import Drivers
from huddle.coordinator.kafka import apis
from huddle.coordinator.kafka.apis import Api
from huddle.protocol.addresses import free_port

GOLDEN: Final = Path(__file__).resolve().parent.parent / "tests" / "kafka" / "golden"
HOST: Final = "127.0.0.1"
WAIT_S: Final = 60.0
# what the client must have sent before it is stopped, and after
WHILE_IN: Final = frozenset(
    {
        Api.FIND_COORDINATOR,
        Api.JOIN_GROUP,
        Api.SYNC_GROUP,
        Api.HEARTBEAT,
        Api.OFFSET_FETCH,
        Api.FETCH,
        Api.OFFSET_COMMIT,
    }
)
ON_LEAVING: Final = frozenset({Api.LEAVE_GROUP})
_SIZE: Final = struct.Struct(">i")
_START: Final = struct.Struct(">hh")


class Recorder:
    """A proxy to the Kafka listener on ``port`` that keeps the first request frame of each
    (API key, version), while ``recording`` is set."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.port = free_port()
        self.recording = False
        self.frames: dict[tuple[int, int], bytes] = {}
        self._lock = threading.Lock()

    def apis(self) -> set[int]:
        with self._lock:
            return {api for api, _ in self.frames}

    async def serve(self, stop: asyncio.Event) -> None:
        server = await asyncio.start_server(self._proxy, HOST, self.port)
        async with server:
            await stop.wait()

    async def _proxy(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(HOST, self.target)
        except OSError:
            client_w.close()
            return
        back = asyncio.create_task(_pipe(server_r, client_w))
        try:
            while True:
                size = _SIZE.unpack(await client_r.readexactly(_SIZE.size))[0]
                body = await client_r.readexactly(size)
                self._keep(_SIZE.pack(size) + body)
                server_w.write(_SIZE.pack(size) + body)
                await server_w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            server_w.close()
            back.cancel()
            client_w.close()

    def _keep(self, frame: bytes) -> None:
        if not self.recording or len(frame) < _SIZE.size + _START.size:
            return
        key = _START.unpack_from(frame, _SIZE.size)
        with self._lock:
            self.frames.setdefault(key, frame)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


def wait_for(recorder: Recorder, wanted: frozenset[Api], what: str) -> None:
    """Until the client has sent every API in ``wanted`` (``WAIT_S`` at most)."""
    deadline = time.monotonic() + WAIT_S
    while not wanted <= recorder.apis():
        if time.monotonic() > deadline:
            lacking = ", ".join(sorted(Api(a).name for a in wanted - recorder.apis()))
            raise TimeoutError(f"{what}: no {lacking} within {WAIT_S} s")
        time.sleep(0.05)  # polling the proxy's record


def capture(client: str, work: Path) -> dict[str, Any]:
    """Run ``client``'s driver through a recording proxy; its frames, as the file holds them."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    recorder = Recorder(0)
    served: Future[None] = asyncio.run_coroutine_threadsafe(recorder.serve(stop), loop)
    try:
        flags = (
            "--initial-rebalance-delay-ms",
            "0",
            "--kafka-advertise",
            f"{HOST}:{recorder.port}",
        )
        with brokers.huddle(work, *flags) as broker:
            recorder.target = broker.port
            bootstrap = f"{HOST}:{recorder.port}"
            topic = f"golden-{client}"
            brokers.create_topic(bootstrap, topic, 2)
            brokers.produce(bootstrap, topic, 2, 2)
            recorder.recording = True
            strategy = launch.CLIENTS[client].eager
            options = DriverOptions(
                bootstrap, f"{topic}-group", topic, strategy, commit=True, max_seconds=120
            )
            with Drivers(work / "drivers") as drivers:
                driver = drivers.start(client, client, options)
                wait_for(recorder, WHILE_IN, f"{client} joins, fetches, commits")
                driver.terminate()
                wait_for(recorder, ON_LEAVING, f"{client} leaves")
                driver.proc.wait(timeout=WAIT_S)
            recorder.recording = False
    finally:
        loop.call_soon_threadsafe(stop.set)
        served.result(timeout=WAIT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=WAIT_S)
    frames = [
        {"api": apis.name(api), "api_key": api, "version": v, "frame": frame.hex()}
        for (api, v), frame in sorted(recorder.frames.items())
    ]
    return {"client": client, "client_version": _VERSION_OF[client](), "frames": frames}


def _kcat() -> str:
    shown = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"Version (\S+) .*?(librdkafka \S+)", shown)
    return f"{found.group(1)} ({found.group(2)})" if found else "unknown"


def _kafkajs() -> str:
    lock = json.loads((GOLDEN.parent.parent / "kafka_clients/js/package-lock.json").read_text())
    return str(lock["packages"]["node_modules/kafkajs"]["version"])


_VERSION_OF: Final[dict[str, Callable[[], str]]] = {
    "kafka-python": lambda: metadata.version("kafka-python"),
    "aiokafka": lambda: metadata.version("aiokafka"),
    "confluent-kafka": lambda: metadata.version("confluent-kafka"),
    "kcat": _kcat,
    "kafkajs": _kafkajs,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", action="append", choices=list(launch.CLIENTS))
    parser.add_argument("--out", type=Path, default=GOLDEN)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for client in args.client or list(launch.CLIENTS):
        reason = launch.missing(client)
        if reason is not None:
            raise SystemExit(f"{client}: {reason}")
        with tempfile.TemporaryDirectory() as tmp:
            captured = capture(client, Path(tmp))
        path = args.out / f"{client}.json"
        path.write_text(json.dumps(captured, indent=1) + "\n")
        print(f"{client}: {len(captured['frames'])} frames -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
