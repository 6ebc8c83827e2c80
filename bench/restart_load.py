"""What a restart on a large data dir costs (``huddle serve --data-dir``).

A journal of kept groups (``--groups`` groups of ``--members`` members, 6 s sessions, the
smallest Kafka allows by default) is loaded as huddle loads it (``CoordinatorServer.start``:
the journal read off the loop, the replay, the groups and then their members' sessions in
slices of a few milliseconds with requests answered in between, the garbage collector
paused) and, for comparison first, as before: read off the loop, then replayed and loaded
in one go on the loop with the collector on, every session started from one time taken
before the load. Reported: the time until the coordinator serves, the loop's longest stall
meanwhile (how late a 5 ms timer fires at worst), and how many members' sessions had run
out by the time it served (each is removed at the first look, its group rebalanced).
Run: ``python -m bench.restart_load``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.common import cpu_model, loop_stall, quiet_logs
from huddle.coordinator.config import GroupConfig, ServerConfig
from huddle.coordinator.core import Coordinator
from huddle.coordinator.server import CoordinatorServer
from huddle.coordinator.storage.journal import Journal
from huddle.coordinator.storage.records import GroupRecord, KeptMember
from huddle.protocol.embedded import Subscription, encode

SESSION_MS = 6_000


def write_data_dir(directory: Path, groups: int, members: int) -> int:
    """A journal of ``groups`` kept groups of ``members`` each; its size in bytes."""
    subscription = encode(Subscription(topics=["orders"]))
    journal = Journal.open(directory)
    for first in range(0, groups, 1_000):
        batch = []
        for g in range(first, min(first + 1_000, groups)):
            kept = [
                KeptMember(
                    f"member-{uuid.uuid4()}",
                    None,
                    "client",
                    "10.0.0.1",
                    SESSION_MS,
                    30_000,
                    [("range", subscription)],
                    b"",
                )
                for _ in range(members)
            ]
            batch.append(GroupRecord(f"group-{g}", 3, "consumer", "range", kept[0].member_id, kept))
        journal.append(batch)
    journal.close()
    return (directory / "journal.bin").stat().st_size


def _expired(core: Coordinator, served_ms: float) -> int:
    return sum(
        1
        for group in core.groups.values()
        for m in group.members.values()
        if (core.timers.deadline(m.session_key) or 0.0) <= served_ms
    )


Loaded = tuple[Coordinator, float, float, Callable[[], Awaitable[None]]]


async def _measured(load: Callable[[], Awaitable[Loaded]]) -> str:
    """Runs ``load`` (returns the core, when it began and when it served, loop ms, and
    what stops it) with a probe on the loop; a line of figures."""
    async with loop_stall(0.005) as stall:
        core, began, served, stop = await load()
    await stop()
    worst = stall.worst
    members = sum(g.size for g in core.groups.values())
    return (
        f"serves after {(served - began) / 1000:6.2f} s   longest loop stall "
        f"{worst * 1e3:8.1f} ms   members {members:,}, sessions run out {_expired(core, served):,}"
    )


async def _one_go(directory: Path) -> Loaded:
    loop = asyncio.get_running_loop()
    began = loop.time() * 1000
    journal = await asyncio.to_thread(Journal.open, directory)
    core = Coordinator(GroupConfig())
    core.keep_groups()
    core.restore(journal.records)
    core.start(loop.time() * 1000)  # as before: right after the replay, then the load
    served = loop.time() * 1000

    async def stop() -> None:
        journal.close()

    return core, began, served, stop


async def _huddle(directory: Path) -> Loaded:
    config = ServerConfig(host="127.0.0.1", port=0, data_dir=str(directory), group=GroupConfig())
    server = CoordinatorServer(config)
    loop = asyncio.get_running_loop()
    began = loop.time() * 1000
    await server.start()
    served = loop.time() * 1000
    return server.core, began, served, server.close


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.restart_load", description=__doc__)
    p.add_argument("--groups", type=int, default=60_000)
    p.add_argument("--members", type=int, default=10)
    args = p.parse_args()
    quiet_logs()
    with tempfile.TemporaryDirectory(prefix="huddle-bench-load-") as tmp:
        start = time.perf_counter()
        size = write_data_dir(Path(tmp), args.groups, args.members)
        print(
            f"data dir of {args.groups:,} groups x {args.members} members, {SESSION_MS} ms "
            f"sessions ({size / 2**20:.1f} MiB, written in {time.perf_counter() - start:.1f} s), "
            f"CPU: {cpu_model()}"
        )
        before = asyncio.run(_measured(lambda: _one_go(Path(tmp))))
        print(f"  in one go on the loop (before)  {before}")
        gc.collect()
        now = asyncio.run(_measured(lambda: _huddle(Path(tmp))))
        print(f"  in slices (now)                 {now}")


if __name__ == "__main__":
    main()
