"""Coordinator failover: how long a group is unserved when the node that owns it is killed.

Starts one etcd and three ``huddle serve --cluster`` nodes (real processes, loopback), a
cooperative group of static members committing in this process, then, round after round,
kills (SIGKILL) the node that coordinates the group, measures the time until a commit of
every member is acknowledged by another node, and starts a replacement node. Counts what the
members noticed meanwhile: callbacks (revoked, lost), generation changes. Prints the median
and worst of the rounds and the CPU model.

    python -m bench.failover [--rounds 5] [--ttl 2] [--members 3]

Needs the ``etcd`` binary (``apt-get install etcd-server``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, suppress
from functools import partial
from pathlib import Path

from huddle.testing import free_port

from bench.common import quiet_logs
from huddle.client import Admin, Member
from huddle.client.connection import connect
from huddle.client.listener import RebalanceListener
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse
from huddle.sim.cli import cpu_model

SHARDS = 12
PARTITIONS = 6


class Counting(RebalanceListener):
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        self.calls.append("revoked")

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        self.calls.append("assigned")

    async def on_partitions_lost(self, lost: frozenset[TopicPartition]) -> None:
        self.calls.append("lost")


def start_etcd(root: Path) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("etcd")
    if binary is None:
        sys.exit("bench.failover needs etcd (apt-get install etcd-server)")
    client, peer = free_port(), free_port()
    process = subprocess.Popen(
        [
            binary, "--name", "n1", "--data-dir", str(root / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"n1=http://127.0.0.1:{peer}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return process, client


async def start_node(etcd_port: int, ttl: int) -> tuple[asyncio.subprocess.Process, int]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "huddle", "serve", "--port", str(port), "--log-format", "json",
        "--log-level", "warning", "--min-session-timeout-ms", "1000",
        "--cluster", f"etcd://127.0.0.1:{etcd_port}", "--shards", str(SHARDS),
        "--lease-ttl-s", str(ttl), "--cluster-prefix", "/bench-failover",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    return process, port


async def owner_port(bootstrap: str, group: str) -> int | None:
    for address in bootstrap.split(","):
        with suppress(Exception):
            async with connect(address, notices=False, timeout=1) as conn:
                answer = await conn.request(FindCoordinatorRequest(group_id=group), timeout=1)
            if isinstance(answer, FindCoordinatorResponse) and answer.error_code == 0:
                return answer.port
    return None


async def until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def commit_all(members: list[Member], offset: int) -> bool:
    try:
        for m in members:
            await asyncio.wait_for(m.commit({tp: offset for tp in m.assignment}), 2)
    except Exception:
        return False
    return True


async def run(rounds: int, ttl: int, count: int) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="huddle-failover-"))
    etcd, etcd_port = start_etcd(root)
    nodes: dict[int, asyncio.subprocess.Process] = {}
    try:
        for _ in range(3):
            process, port = await start_node(etcd_port, ttl)
            nodes[port] = process

        def everyone() -> str:
            return ",".join(f"127.0.0.1:{p}" for p in nodes)

        await until(lambda: _found(everyone()), 30, "a node to own the group's shard")
        async with Admin(everyone()) as admin:
            await admin.create_topic("t", PARTITIONS)
        listeners = [Counting() for _ in range(count)]
        async with AsyncExitStack() as stack:
            members = [
                await stack.enter_async_context(
                    Member(
                        everyone(),
                        group_id="bench",
                        topics=["t"],
                        instance_id=f"bench-{i}",
                        session_timeout_ms=10_000,
                        heartbeat_interval_ms=300,
                        listener=listeners[i],
                    )
                )
                for i in range(count)
            ]

            async def settled() -> bool:
                owned = [tp for m in members for tp in m.assignment]
                return len(owned) == PARTITIONS and len(set(owned)) == PARTITIONS

            await until(settled, 30, "the group to settle")
            offset = 1
            await until(partial(commit_all, members, offset), 30, "a first commit")
            times: list[float] = []
            noticed = 0
            generation_changes = 0
            for _ in range(rounds):
                for listener in listeners:
                    listener.calls.clear()
                generations = [m.generation for m in members]
                owner = await owner_port(everyone(), "bench")
                assert owner is not None
                nodes.pop(owner).send_signal(signal.SIGKILL)
                killed = time.monotonic()
                offset += 1

                async def served(offset: int = offset, owner: int = owner) -> bool:
                    moved = await owner_port(everyone(), "bench")
                    return moved not in (None, owner) and await commit_all(members, offset)

                await until(served, ttl + 30, "another node to serve the group")
                times.append(time.monotonic() - killed)
                noticed += sum(len(listener.calls) for listener in listeners)
                generation_changes += sum(
                    a != b
                    for a, b in zip(generations, [m.generation for m in members], strict=True)
                )
                process, port = await start_node(etcd_port, ttl)  # the cluster back to three
                nodes[port] = process
                await asyncio.sleep(ttl)  # shards settle before the next kill
        return {
            "cpu": cpu_model(),
            "rounds": rounds,
            "lease_ttl_s": ttl,
            "members": count,
            "served_again_s_median": round(statistics.median(times), 2),
            "served_again_s_max": round(max(times), 2),
            "callbacks_during_failovers": noticed,
            "member_generation_changes": generation_changes,
        }
    finally:
        for process in nodes.values():
            with suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        etcd.kill()
        etcd.wait()
        shutil.rmtree(root, ignore_errors=True)


async def _found(bootstrap: str) -> bool:
    return await owner_port(bootstrap, "bench") is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ttl", type=int, default=2)
    parser.add_argument("--members", type=int, default=3)
    args = parser.parse_args()
    quiet_logs()
    result = asyncio.run(run(args.rounds, args.ttl, args.members))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
