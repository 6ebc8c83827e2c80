"""What a transaction's shape costs in etcd: the same puts in one transaction, or in many at
once (what a cluster node did with a transaction per shard), fenced on owner keys as a node's
writes are.

    python -m bench.etcd_txns [--rounds 40]

Needs the ``etcd`` binary (``apt-get install etcd-server``). Prints the CPU model.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from bench.common import quiet_logs
from bench.failover import start_etcd
from huddle.coordinator.cluster.store import EtcdStore
from huddle.sim.cli import cpu_model

VALUE = b"v" * 40  # about an offset record's size
READY_S = 10.0


async def shapes(port: int, rounds: int) -> None:
    deadline = time.monotonic() + READY_S
    while True:
        try:
            store = await EtcdStore.connect([("127.0.0.1", port)], timeout_s=1)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
    try:
        owners = [f"/bench/shards/{s}".encode() for s in range(40)]
        for owner in owners:
            await store.put(owner, b"n1")
        epochs = {}
        for owner in owners:
            entry = await store.get(owner)
            assert entry is not None
            epochs[owner] = entry.revision

        async def txn(shards: range, per_shard: int) -> None:
            fences = {owners[s]: epochs[owners[s]] for s in shards}
            puts = {f"/bench/k/{s}/{i}".encode(): VALUE for s in shards for i in range(per_shard)}
            assert not await store.write_fenced_all(fences, puts)

        cases: dict[str, Callable[[], Awaitable[object]]] = {
            "1 txn, 1 shard x 10 puts": lambda: txn(range(1), 10),
            "1 txn, 10 shards x 10 puts": lambda: txn(range(10), 10),
            "10 txns at once, 1 shard x 10 puts each": lambda: asyncio.gather(
                *(txn(range(s, s + 1), 10) for s in range(10))
            ),
            "33 txns at once, 1 shard x 10 puts each": lambda: asyncio.gather(
                *(txn(range(s, s + 1), 10) for s in range(33))
            ),
            "4 txns at once, 9 shards x 10 puts each": lambda: asyncio.gather(
                *(txn(range(i, min(i + 9, 33)), 10) for i in range(0, 33, 9))
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(rounds):  # the cases in turn, each round
            for name, case in cases.items():
                began = time.perf_counter()
                await case()
                times[name].append(time.perf_counter() - began)
        print(f"etcd transactions, median of {rounds}; CPU: {cpu_model()}")
        for name, spent in times.items():
            print(f"  {name:42} {statistics.median(spent) * 1e3:7.2f} ms")
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    quiet_logs()
    with tempfile.TemporaryDirectory(prefix="huddle-bench-etcd-") as tmp:
        etcd, port = start_etcd(Path(tmp))
        try:
            asyncio.run(shapes(port, args.rounds))
        finally:
            etcd.terminate()
            try:
                etcd.wait(10)
            except subprocess.TimeoutExpired:
                etcd.kill()


if __name__ == "__main__":
    main()
