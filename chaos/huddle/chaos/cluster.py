"""A coordinator cluster for a chaos run: one etcd and three ``huddle serve --cluster``
nodes, as child processes, and the faults against the node that owns the run's group."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import anyio

from huddle.chaos.procs import HOST, free_port, signal_pid, spawn
from huddle.chaos.scenarios import CLUSTER_LEASE_S, ScenarioError
from huddle.client.connection import connect
from huddle.client.discovery import coordinator_of

NODES = 3
SHARDS = 12


class ChaosCluster:
    def __init__(
        self,
        run_dir: Path,
        events_dir: Path,
        huddle_argv: list[str],
        started: list[subprocess.Popen[bytes]],
    ) -> None:
        self.run_dir = run_dir
        self.events_dir = events_dir
        self.huddle_argv = huddle_argv
        self.etcd: subprocess.Popen[bytes] | None = None
        self.etcd_port = 0
        self.nodes: dict[int, subprocess.Popen[bytes]] = {}  # port -> node
        self.stopped: list[subprocess.Popen[bytes]] = []
        self.started = started  # the harness stops every one at the end

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{port}" for port in self.nodes)

    async def start(self, group: str, disconnect_grace_ms: int) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            raise ScenarioError(
                "the scenario runs a coordinator cluster on etcd, and etcd is not installed "
                "(apt-get install etcd-server)"
            )
        client, peer = free_port(), free_port()
        self.etcd_port = client
        self.etcd = self._spawn(
            [
                binary, "--name", "chaos", "--data-dir", str(self.run_dir / "etcd"),
                "--listen-client-urls", f"http://{HOST}:{client}",
                "--advertise-client-urls", f"http://{HOST}:{client}",
                "--listen-peer-urls", f"http://{HOST}:{peer}",
                "--initial-advertise-peer-urls", f"http://{HOST}:{peer}",
                "--initial-cluster", f"chaos=http://{HOST}:{peer}",
            ],
            "etcd",
            events=False,
        )  # fmt: skip
        await _listening(client, 30.0)
        for i in range(1, NODES + 1):
            port = free_port()
            self.nodes[port] = self._spawn(
                [
                    *self.huddle_argv, "serve", "--host", HOST, "--port", str(port),
                    "--node-id", f"node-{i}", "--log-format", "json",
                    "--cluster", f"etcd://{HOST}:{client}", "--cluster-prefix", "/chaos",
                    "--shards", str(SHARDS), "--lease-ttl-s", str(int(CLUSTER_LEASE_S)),
                    "--initial-rebalance-delay-ms", "0", "--min-session-timeout-ms", "500",
                    "--disconnect-grace-ms", str(disconnect_grace_ms),
                ],
                f"coordinator-node-{i}",
            )  # fmt: skip
            await _listening(port, 20.0)
        with anyio.fail_after(30.0):
            while True:  # until a node owns the group's shard (other processes: polled)
                if await self.owner(group) is not None:
                    return
                await anyio.sleep(0.05)

    def _spawn(self, argv: list[str], name: str, *, events: bool = True) -> subprocess.Popen[bytes]:
        proc = spawn(
            argv,
            stdout=self.run_dir / "logs" / f"{name}.log",
            stderr=self.events_dir / f"{name}.jsonl" if events else None,
        )
        self.started.append(proc)
        return proc

    async def owner(self, group: str) -> int | None:
        """The port of the node that coordinates ``group``, as a live node says."""
        for port, proc in self.nodes.items():
            if proc.poll() is not None or proc in self.stopped:
                continue
            try:
                async with connect(f"{HOST}:{port}", notices=False, timeout=1.0) as conn:
                    found = await coordinator_of(conn, group, 1.0)
            except Exception:
                continue
            return int(found.rsplit(":", 1)[1])
        return None

    async def fault(self, action: str, group: str) -> str | None:
        """Apply ``action`` to the group's owner; what was done, or None if nothing."""
        if action == "owner_cont":
            if not self.stopped:
                return None
            proc = self.stopped.pop()
            signal_pid(proc, signal.SIGCONT)
            return f"pid {proc.pid}"
        port = await self.owner(group)
        target = self.nodes.get(port) if port is not None else None
        if target is None:
            return None
        proc = target
        if action == "owner_kill":
            signal_pid(proc, signal.SIGKILL)
        else:
            signal_pid(proc, signal.SIGSTOP)
            self.stopped.append(proc)
        return f"node on port {port}, pid {proc.pid}"


async def _listening(port: int, wait_s: float) -> None:
    with anyio.fail_after(wait_s):
        while True:
            try:
                stream = await anyio.connect_tcp(HOST, port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return
