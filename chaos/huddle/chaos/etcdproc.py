"""One etcd for a chaos run's coordinator cluster: frozen, killed and started again on the
same data dir and ports, as an operator's etcd would be after a crash.

Every process it starts is appended to the run's ``started`` list (the harness stops each by
PID at the end).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import anyio

from huddle.chaos.procs import HOST, signal_pid, spawn
from huddle.protocol.addresses import free_port
from huddle.protocol.errors import HuddleError

HEALTHY = b'"health":"true"'


class EtcdError(HuddleError):
    """etcd is not installed, or did not start."""


class EtcdProcess:
    def __init__(self, data_dir: Path, log: Path, started: list[subprocess.Popen[bytes]]) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            raise EtcdError(
                "the scenario runs a coordinator cluster on etcd, and etcd is not installed "
                "(apt-get install etcd-server)"
            )
        self.binary = binary
        self.data_dir = data_dir
        self.log = log
        self.started = started
        self.port, self.peer_port = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.frozen = False

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.port}"

    async def start(self, wait_s: float = 30.0) -> None:
        """Start etcd (again, on the same data dir and ports); returns once it is healthy."""
        peer = f"http://{HOST}:{self.peer_port}"
        self.proc = spawn(
            [
                self.binary, "--name", "chaos", "--data-dir", str(self.data_dir),
                "--listen-client-urls", f"http://{HOST}:{self.port}",
                "--advertise-client-urls", f"http://{HOST}:{self.port}",
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"chaos={peer}",
            ],
            stdout=self.log,
        )  # fmt: skip
        self.started.append(self.proc)
        self.frozen = False
        if await self.answering(wait_s) is None:
            raise EtcdError(f"etcd did not answer within {wait_s} s; its log: {self.log}")

    def freeze(self) -> bool:
        if self.proc is None or not signal_pid(self.proc, signal.SIGSTOP):
            return False
        self.frozen = True
        return True

    def thaw(self) -> bool:
        if self.proc is None or not signal_pid(self.proc, signal.SIGCONT):
            return False
        self.frozen = False
        return True

    async def kill(self) -> bool:
        """SIGKILL, and reaped (its ports are free for the restart)."""
        proc = self.proc
        if proc is None or not signal_pid(proc, signal.SIGKILL):
            return False
        with anyio.fail_after(10):
            while proc.poll() is None:  # noqa: ASYNC110 - a child's exit has no event here
                await anyio.sleep(0.02)
        self.frozen = False
        return True

    async def answering(self, wait_s: float) -> float | None:
        """Seconds until etcd answers a health check (``/health``: it has a leader and
        serves a read), polled; None if it does not within ``wait_s``."""
        began = anyio.current_time()
        with anyio.move_on_after(wait_s):
            while not await self.healthy():  # noqa: ASYNC110 - another process
                await anyio.sleep(0.02)
            return anyio.current_time() - began
        return None

    async def healthy(self, timeout_s: float = 0.5) -> bool:
        with anyio.move_on_after(timeout_s):
            try:
                stream = await anyio.connect_tcp(HOST, self.port)
            except OSError:
                return False
            async with stream:
                await stream.send(b"GET /health HTTP/1.0\r\nHost: etcd\r\n\r\n")
                answer = b""
                try:
                    while len(answer) < 65_536:
                        answer += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    pass
                return HEALTHY in answer.replace(b" ", b"")
        return False
