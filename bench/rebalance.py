"""Rebalance latency: how long until a group that gains a member works again.

For each group size, a group of simulated members (``bench.rawclient.RawMember``: one
connection per member by default, many members in this one process) is formed against a
``huddle serve`` child process (``--initial-rebalance-delay-ms 0``). Members heartbeat
every 3 s (Kafka's default interval) and rejoin at once on a ``RebalanceStarted`` notice
(notices on) or on a ``REBALANCE_IN_PROGRESS`` heartbeat answer (``--no-notices``).

One measurement: a new member joins; the time runs from its first JoinGroup send until
every member, old and new, holds a SyncGroup response of the new generation. The new
member then leaves cleanly (a second, "leave" latency, to the moment every remaining member
has synced again). With notices off, each trigger waits a random part of the heartbeat
interval first, so the figure is that of a join at a random moment. Run:
``python -m bench.rebalance``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import time
from dataclasses import dataclass, field

from bench.common import cpu_model, quiet_logs
from bench.processes import (
    ServerProcess,
    cancelled_by_sigterm,
    cpu_seconds,
    exit_on_sigterm,
    huddle_serve,
    new_event_loop,
    pin_to_cpu,
    raise_fd_limit,
    server_process,
)
from bench.rawclient import (
    MemberSettings,
    RawConnection,
    RawMember,
    close_all,
    open_connection,
    open_connections,
)
from huddle.protocol.messages import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    LeaveGroupRequest,
    MemberIdentity,
)

SERVER_CPU = 0
CLIENT_CPU = 1
WAIT_S = 60.0  # the longest any one rebalance may take before the run is declared failed


class Tracker:
    """Counts, per generation, the members that hold a SyncGroup response of it."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.expected = 0
        self.after = -1
        self.done = asyncio.Event()
        self.generation = -1
        self.at = 0.0
        self.error: BaseException | None = None

    def arm(self, expected: int, after_generation: int) -> None:
        self.expected = expected
        self.after = after_generation
        self.generation = -1
        self.done.clear()
        for generation, count in self.counts.items():
            if generation > after_generation and count >= expected:
                self.generation = generation
                self.done.set()

    def synced(self, _: RawMember, generation: int, at: float) -> None:
        count = self.counts[generation] = self.counts.get(generation, 0) + 1
        if not self.done.is_set() and generation > self.after and count == self.expected:
            self.generation = generation
            self.at = at
            self.done.set()

    def fail(self, error: BaseException) -> None:
        """A member gave up: stop waiting for it."""
        if self.error is None:
            self.error = error
        self.done.set()

    async def wait(self) -> tuple[int, float]:
        await asyncio.wait_for(self.done.wait(), WAIT_S)
        if self.error is not None:
            raise RuntimeError(f"a member failed: {self.error}") from self.error
        return self.generation, self.at

    async def live(self, member: RawMember, until: float) -> None:
        """A member's life: join, sync, heartbeat and rejoin until ``until``."""
        try:
            await member.join_and_sync()
            await member.run(until)
        except Exception as exc:
            self.fail(exc)
            raise


@dataclass
class SizeResult:
    size: int
    formed_s: float = 0.0
    join_ms: list[float] = field(default_factory=list)
    leave_ms: list[float] = field(default_factory=list)
    server_cpu_ms: list[float] = field(default_factory=list)  # during each join measured
    client_cpu_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)


async def describe(admin: RawConnection, group_id: str) -> tuple[str, int, int]:
    answer = await admin.call(DescribeGroupsRequest(groups=[group_id]))
    assert isinstance(answer, DescribeGroupsResponse), answer
    (group,) = answer.groups
    return group.state, group.generation_id, len(group.members)


class Bench:
    def __init__(self, args: argparse.Namespace, server: ServerProcess, notices: bool) -> None:
        self.args = args
        self.port = server.port
        self.pid = server.pid
        self.notices = notices
        self.interval_s = args.heartbeat_ms / 1000
        self.deadline = asyncio.get_running_loop().time() + args.budget_s

    def settings(self, group_id: str) -> MemberSettings:
        return MemberSettings(
            group_id=group_id,
            session_timeout_ms=self.args.session_ms,
            rebalance_timeout_ms=int(WAIT_S * 1000),
            heartbeat_interval_ms=self.args.heartbeat_ms,
        )

    async def pause(self) -> None:
        """Notices off: trigger at a random point of the heartbeat cycle; on: settle briefly."""
        await asyncio.sleep(random.uniform(0, self.interval_s) if not self.notices else 0.05)

    async def size(self, size: int, reps: int, admin: RawConnection) -> SizeResult:
        loop = asyncio.get_running_loop()
        result = SizeResult(size)
        group_id = f"rebalance-{size}-{'on' if self.notices else 'off'}"
        settings = self.settings(group_id)
        tracker = Tracker()
        per_conn = self.args.members_per_connection
        conns = await open_connections(self.port, -(-size // per_conn), f"m{size}")
        members = [
            RawMember(conns[i // per_conn], settings, on_synced=tracker.synced) for i in range(size)
        ]
        tasks: list[asyncio.Task[None]] = []
        try:
            tracker.arm(size, 0)
            started = time.perf_counter()
            tasks = [asyncio.create_task(tracker.live(m, self.deadline)) for m in members]
            generation, at = await tracker.wait()
            result.formed_s = at - started
            await self.check(admin, group_id, generation, size)
            for _ in range(reps):
                if loop.time() > self.deadline - 2 * WAIT_S:
                    break
                generation = await self.one(result, tracker, settings, generation, size)
            await self.check(admin, group_id, generation, size)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for member in members:
                for code, count in member.errors.items():
                    result.errors[code] = result.errors.get(code, 0) + count
            if members and members[0].member_id:
                with contextlib.suppress(Exception):
                    await admin.call(
                        LeaveGroupRequest(
                            group_id=group_id,
                            members=[MemberIdentity(member_id=m.member_id) for m in members],
                        )
                    )
            await close_all(conns)
        return result

    async def one(
        self,
        result: SizeResult,
        tracker: Tracker,
        settings: MemberSettings,
        generation: int,
        size: int,
    ) -> int:
        """One new member joins, then leaves; both latencies recorded. Returns the generation."""
        conn = await open_connection(self.port, "newcomer")
        newcomer = RawMember(conn, settings, on_synced=tracker.synced)
        task: asyncio.Task[None] | None = None
        try:
            await self.pause()
            tracker.arm(size + 1, generation)
            server_cpu, client_cpu = cpu_seconds(self.pid), time.process_time()
            started = time.perf_counter()
            task = asyncio.create_task(tracker.live(newcomer, self.deadline))
            generation, at = await tracker.wait()
            result.join_ms.append((at - started) * 1000)
            result.server_cpu_ms.append((cpu_seconds(self.pid) - server_cpu) * 1000)
            result.client_cpu_ms.append((time.process_time() - client_cpu) * 1000)

            await self.pause()
            tracker.arm(size, generation)
            started = time.perf_counter()
            await newcomer.leave()
            generation, at = await tracker.wait()
            result.leave_ms.append((at - started) * 1000)
        finally:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await conn.close()
        return generation

    @staticmethod
    async def check(admin: RawConnection, group_id: str, generation: int, size: int) -> None:
        state, seen, members = await describe(admin, group_id)
        if (state, seen, members) != ("Stable", generation, size):
            raise RuntimeError(
                f"{group_id}: expected Stable at generation {generation} with {size} members, "
                f"found {state} at {seen} with {members}"
            )


def reps_for(args: argparse.Namespace, size: int) -> int:
    return int(args.reps_large if size >= args.large else args.reps)


async def run_mode(
    args: argparse.Namespace, server: ServerProcess, notices: bool
) -> list[SizeResult]:
    bench = Bench(args, server, notices)
    admin = await open_connection(server.port, "bench-admin")
    results = []
    try:
        for size in args.sizes:
            r = await bench.size(size, reps_for(args, size), admin)
            results.append(r)
            print_size("on" if notices else "off", r)
    finally:
        await admin.close()
    return results


def print_size(mode: str, r: SizeResult) -> None:
    def figures(values: list[float]) -> str:
        if not values:
            return "no measurement"
        return f"p50 {statistics.median(values):8.1f} ms  max {max(values):8.1f} ms"

    errors = ", ".join(f"{k}={v}" for k, v in sorted(r.errors.items())) or "none"
    print(f"  notices {mode:>3}, {r.size:>5} members: formed in {r.formed_s:.2f} s", flush=True)
    print(f"      join  ({len(r.join_ms)} runs): {figures(r.join_ms)}", flush=True)
    print(f"      leave ({len(r.leave_ms)} runs): {figures(r.leave_ms)}", flush=True)
    print(f"      runs (join ms): {', '.join(f'{x:.1f}' for x in r.join_ms)}", flush=True)
    if r.join_ms:
        print(
            f"      CPU during a join, median: server {statistics.median(r.server_cpu_ms):.0f} ms,"
            f" this client (all members) {statistics.median(r.client_cpu_ms):.0f} ms",
            flush=True,
        )
    print(f"      member errors: {errors}", flush=True)


def summary(results: dict[str, list[SizeResult]]) -> None:
    print("summary: new member join -> every member synced the new generation, p50 (max)")
    for mode, sizes in results.items():
        cells = "  ".join(
            f"{r.size}: {statistics.median(r.join_ms):.1f} ms ({max(r.join_ms):.1f})"
            for r in sizes
            if r.join_ms
        )
        print(f"  notices {mode:>3}: {cells}")
    on = {r.size: r for r in results.get("on", [])}
    if 100 in on and on[100].join_ms:
        p50 = statistics.median(on[100].join_ms)
        verdict = "met" if p50 < 50 else "NOT met"
        print(f"target: notices on, 100 members, p50 < 50 ms: {p50:.1f} ms, {verdict}")
    if 1000 in on and on[1000].join_ms:
        p50 = statistics.median(on[1000].join_ms)
        verdict = "met" if p50 <= 35 else "NOT met"
        print(
            f"issue 28's target: notices on, 1,000 members, p50 <= 35 ms: {p50:.1f} ms, {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--reps", type=int, default=7, help="joins measured per size")
    parser.add_argument("--reps-large", type=int, default=3, help="joins for sizes >= --large")
    parser.add_argument("--large", type=int, default=1000)
    parser.add_argument("--modes", nargs="+", choices=("on", "off"), default=["on", "off"])
    parser.add_argument("--heartbeat-ms", type=int, default=3000, help="heartbeat interval")
    parser.add_argument("--session-ms", type=int, default=45_000, help="session timeout")
    parser.add_argument("--members-per-connection", type=int, default=1)
    parser.add_argument("--budget-s", type=float, default=600.0, help="time limit per mode")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    args = parser.parse_args()
    quiet_logs()
    exit_on_sigterm()
    limit = raise_fd_limit(max(args.sizes) * 2 + 256)
    needed = -(-max(args.sizes) // args.members_per_connection) + 64
    if limit < needed:
        parser.error(f"open-file limit {limit} is below the {needed} connections needed")
    server_cpu = None if args.no_pin else SERVER_CPU
    if not args.no_pin:
        pin_to_cpu(0, CLIENT_CPU)
    print(
        f"rebalance latency: heartbeat {args.heartbeat_ms} ms, session {args.session_ms} ms, "
        f"{args.members_per_connection} member(s) per connection, loopback; CPU: {cpu_model()}"
    )
    results: dict[str, list[SizeResult]] = {}
    started = time.monotonic()
    for mode in args.modes:
        flags = ["--initial-rebalance-delay-ms", "0", "--max-connections", str(needed + 1000)]
        if mode == "off":
            flags.append("--no-notices")
        with (
            server_process("huddle", huddle_serve(*flags), cpu=server_cpu) as server,
            asyncio.Runner(loop_factory=new_event_loop) as runner,
        ):
            results[mode] = runner.run(cancelled_by_sigterm(run_mode(args, server, mode == "on")))
    summary(results)
    print(f"(whole run {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
