"""A real etcd on loopback for the cluster tests.

Tests that need it skip where the ``etcd`` binary is missing (``apt-get install
etcd-server``), unless HUDDLE_REQUIRE_ETCD=1 (as in CI), when they fail instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from huddle.testing import free_port

START_S = 30.0


@dataclass
class Etcd:
    host: str
    port: int
    process: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> tuple[str, int]:
        return (self.host, self.port)


def require_etcd() -> str:
    binary = shutil.which("etcd")
    if binary is None:
        reason = "etcd is not installed (apt-get install etcd-server)"
        if os.environ.get("HUDDLE_REQUIRE_ETCD") == "1":
            pytest.fail(f"HUDDLE_REQUIRE_ETCD=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return binary


def start_etcd(data_dir: Path, *flags: str) -> Etcd:
    """One etcd node on free loopback ports (with ``flags`` too); returns once it answers."""
    return start_etcd_cluster(data_dir, 1, *flags)[0]


def start_etcd_cluster(data_dir: Path, size: int, *flags: str) -> list[Etcd]:
    """``size`` etcd members forming one cluster on free loopback ports (each with
    ``flags`` too); returns once each accepts connections (the cluster has a leader soon
    after)."""
    binary = require_etcd()
    ports = [(free_port(), free_port()) for _ in range(size)]
    peers = ",".join(f"n{i}=http://127.0.0.1:{peer}" for i, (_, peer) in enumerate(ports))
    members = []
    for i, (client, peer) in enumerate(ports):
        member_dir = data_dir if size == 1 else data_dir / f"n{i}"
        member_dir.parent.mkdir(parents=True, exist_ok=True)
        log = (member_dir.parent / f"{member_dir.name}.log").open("wb")
        process = subprocess.Popen(
            [
                binary,
                "--name",
                f"n{i}",
                "--data-dir",
                str(member_dir),
                "--listen-client-urls",
                f"http://127.0.0.1:{client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                peers,
                "--initial-cluster-state",
                "new",
                *flags,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        members.append(Etcd("127.0.0.1", client, process))
    deadline = time.monotonic() + START_S
    for etcd in members:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", etcd.port), timeout=1.0):
                    break
            except OSError:
                pass
            if etcd.process.poll() is not None or time.monotonic() > deadline:
                for other in members:
                    other.process.kill()
                    other.process.wait()
                raise AssertionError(f"etcd did not start; its logs are beside {data_dir}")
            time.sleep(0.05)
    return members


def stop_etcd(etcd: Etcd) -> None:
    etcd.process.terminate()
    try:
        etcd.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        etcd.process.kill()
        etcd.process.wait()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    server = start_etcd(tmp_path / "etcd")
    try:
        yield server
    finally:
        stop_etcd(server)
