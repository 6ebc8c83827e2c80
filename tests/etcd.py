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

from tests.containers import free_port

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


def start_etcd(data_dir: Path) -> Etcd:
    """One etcd node on free loopback ports; returns once it answers."""
    binary = require_etcd()
    client, peer = free_port(), free_port()
    log = (data_dir.parent / f"{data_dir.name}.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            "--name",
            "n1",
            "--data-dir",
            str(data_dir),
            "--listen-client-urls",
            f"http://127.0.0.1:{client}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{client}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-cluster",
            f"n1=http://127.0.0.1:{peer}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    deadline = time.monotonic() + START_S
    while True:
        try:
            with socket.create_connection(("127.0.0.1", client), timeout=1.0):
                return Etcd("127.0.0.1", client, process)
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise AssertionError(f"etcd did not start; its log is beside {data_dir}")
        time.sleep(0.05)


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
