"""End to end with real ``Member`` objects: a group of N members, one more joins (and then
leaves); the time until every member is stable in one generation with every partition owned
exactly once. Run: ``python -m bench.members``.

All members run in this one process (each in a task of its own); the coordinator is a
``huddle serve`` child process on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import anyio
import anyio.abc
from huddle.testing import wait_settled

from bench.common import quiet_logs
from bench.processes import huddle_serve, raise_fd_limit, server_process
from huddle.client import Admin, Member, RebalanceListener, TopicPartition
from huddle.client.running import MemberTask


class Revocations(RebalanceListener):
    """Counts the partitions members stop processing (revoked or lost)."""

    def __init__(self) -> None:
        self.count = 0

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        self.count += len(revoked)

    async def on_partitions_lost(self, lost: frozenset[TopicPartition]) -> None:
        self.count += len(lost)


async def settle(members: Sequence[Member], topics: dict[str, int]) -> None:
    """Until settled, looked at every millisecond (the resolution of the times measured)."""
    await wait_settled(members, topics, within=60.0, poll_s=0.001)


async def measure(
    bootstrap: str, assignor: str, size: int, partitions: int, reps: int
) -> tuple[list[float], list[float], list[int], list[int]]:
    group = f"bench-{assignor}-{size}"
    stopped = Revocations()
    topics = {"orders": partitions}

    def new_member() -> Member:
        return Member(
            bootstrap,
            group_id=group,
            topics=["orders"],
            assignors=[assignor],
            session_timeout_ms=30_000,
            heartbeat_interval_ms=3_000,
            rebalance_timeout_ms=30_000,
            listener=stopped,
        )

    joins: list[float] = []
    leaves: list[float] = []
    generations: list[int] = []
    revoked: list[int] = []
    async with anyio.create_task_group() as tg:
        running = [await MemberTask(new_member()).start(tg) for _ in range(size)]
        members = [r.member for r in running]
        await settle(members, topics)
        for _ in range(reps):
            before = members[0].generation
            stopped.count = 0
            started = time.perf_counter()
            newcomer = await MemberTask(new_member()).start(tg)
            await settle([*members, newcomer.member], topics)
            joins.append(time.perf_counter() - started)
            generations.append(members[0].generation - before)
            revoked.append(stopped.count)
            started = time.perf_counter()
            await newcomer.stop()
            await settle(members, topics)
            leaves.append(time.perf_counter() - started)
        for r in running:
            await r.stop()
    return joins, leaves, generations, revoked


async def main_async(args: argparse.Namespace) -> None:
    raise_fd_limit(4 * args.members + 256)
    with server_process("huddle", huddle_serve("--initial-rebalance-delay-ms", "0")) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with Admin(bootstrap) as admin:
            await admin.create_topic("orders", args.partitions)
        print(
            f"real Member objects: {args.members} members, one joins then leaves, "
            f"{args.partitions} partitions, {args.reps} runs, heartbeat 3000 ms, notices on"
        )
        for assignor in args.assignors:
            joins, leaves, generations, revoked = await measure(
                bootstrap, assignor, args.members, args.partitions, args.reps
            )
            ms = [j * 1000 for j in joins]
            ls = [x * 1000 for x in leaves]
            print(
                f"  {assignor:>18}: join p50 {statistics.median(ms):7.1f} ms  max {max(ms):7.1f}"
                f" | leave p50 {statistics.median(ls):7.1f} ms  max {max(ls):7.1f}"
                f" | generations per join {sorted(set(generations))}"
                f" | partitions stopped per join {statistics.median(revoked):.0f}"
            )
            print(f"  {'':>18}  join runs (ms): {', '.join(f'{x:.1f}' for x in ms)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--assignors", nargs="+", default=["cooperative-sticky", "range"], metavar="NAME"
    )
    args = parser.parse_args()
    quiet_logs()
    anyio.run(main_async, args)


if __name__ == "__main__":
    main()
