"""Coordinator memory per idle member.

Two sections. ``core``: builds groups of idle, synced members in the sans-IO core (one
connection per member, subscription metadata and assignments of realistic size) and
reports the heap the core holds per member, measured with tracemalloc. ``server``: starts
``huddle serve`` as a child process, reads its VmRSS, connects 10,000 idle members that
join and sync in a few groups (100 connections of 100 members, then one connection per
member), reads VmRSS again once they sit still, and reports the growth per member: the
whole process (core, connections, transport buffers, allocator slack). Run:
``python -m bench.memory``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import tracemalloc
from pathlib import Path

from bench.common import cpu_model, quiet_logs
from bench.processes import (
    cancelled_by_sigterm,
    exit_on_sigterm,
    huddle_serve,
    new_event_loop,
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
from huddle.coordinator.config import GroupConfig
from huddle.coordinator.core import Coordinator, Peer
from huddle.protocol.messages import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    Protocol,
    Reply,
    SyncGroupAssignment,
    SyncGroupRequest,
)

METADATA = b"\x00\x01" + b"orders,payments,inventory" + b"\x00" * 38  # ~64 bytes
ASSIGNMENT = b"\x00\x01" + b"orders:0,1,2;payments:3" + b"\x00" * 39  # ~64 bytes


def build(members: int, groups: int) -> Coordinator:
    """``members`` idle members spread over ``groups`` Stable groups."""
    core = Coordinator(GroupConfig(initial_rebalance_delay_ms=1))
    now = 0.0
    per_group = members // groups
    conn = 0
    for g in range(groups):
        group_id = f"group-{g}"
        held: list[tuple[Peer, int]] = []
        ids: list[str] = []
        for _ in range(per_group):
            conn += 1
            peer = Peer(conn, client_id=f"client-{conn}", host="127.0.0.1")

            def join(member_id: str, group_id: str = group_id) -> JoinGroupRequest:
                return JoinGroupRequest(
                    group_id=group_id,
                    member_id=member_id,
                    protocol_type="consumer",
                    protocols=[Protocol(name="cooperative-sticky", metadata=METADATA)],
                    session_timeout_ms=45_000,
                    rebalance_timeout_ms=300_000,
                )

            ((_, first),) = core.handle(peer, 1, join(""), now)
            assert isinstance(first, Reply)
            assert isinstance(first.response, JoinGroupResponse)
            core.handle(peer, 2, join(first.response.member_id), now)
            held.append((peer, 2))
            ids.append(first.response.member_id)
        out = []
        while (deadline := core.next_deadline()) is not None and deadline <= now + 10.0:
            now = deadline
            out += core.advance(now)
        responses = {c: f.response for c, f in out if isinstance(f, Reply)}
        leader = next(r.leader for r in responses.values() if isinstance(r, JoinGroupResponse))
        generation = next(
            r.generation_id for r in responses.values() if isinstance(r, JoinGroupResponse)
        )
        for (peer, _), member_id in zip(held, ids, strict=True):
            assignments = []
            if member_id == leader:
                assignments = [SyncGroupAssignment(member_id=m, assignment=ASSIGNMENT) for m in ids]
            core.handle(
                peer,
                3,
                SyncGroupRequest(
                    group_id=group_id,
                    generation_id=generation,
                    member_id=member_id,
                    assignments=assignments,
                ),
                now,
            )
        assert core.groups[group_id].state.value == "Stable"
    return core


def measure(members: int, groups: int) -> float:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    core = build(members, groups)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert sum(g.size for g in core.groups.values()) == members
    return (after - before) / members


# --- the server process ---------------------------------------------------------------

SESSION_TIMEOUT_MS = 300_000  # idle members send no heartbeats
SETTLE_S = 60.0  # the longest the members may take to form their groups


def vm_rss(pid: int) -> int:
    """Resident set size of a process in bytes, from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def settled_rss(pid: int, samples: int = 5, every_s: float = 0.4) -> int:
    """The last of a few VmRSS readings taken while the server sits idle."""
    readings = []
    for _ in range(samples):
        time.sleep(every_s)
        readings.append(vm_rss(pid))
    return readings[-1]


async def stable_groups(admin: RawConnection, groups: int, per_group: int) -> bool:
    answer = await admin.call(DescribeGroupsRequest(groups=[f"idle-{g}" for g in range(groups)]))
    assert isinstance(answer, DescribeGroupsResponse), answer
    return all(g.state == "Stable" and len(g.members) == per_group for g in answer.groups)


async def fill(port: int, pid: int, members: int, connections: int, groups: int) -> tuple[int, int]:
    """VmRSS before and after ``members`` idle members join ``groups`` groups."""
    loop = asyncio.get_running_loop()
    admin = await open_connection(port, "memory-admin")
    # Warm up: one member through join, sync and leave, so that what is built once per
    # process (codecs, caches, the first group) is in the baseline, not in the figure.
    warm = RawMember(admin, MemberSettings(group_id="warm-up", heartbeat_interval_ms=None))
    await warm.join_and_sync()
    await warm.leave()
    gc.collect()
    before = settled_rss(pid)
    per_conn = -(-members // connections)
    conns = await open_connections(port, connections, "idle")
    settings = [
        MemberSettings(
            group_id=f"idle-{g}",
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=60_000,
            heartbeat_interval_ms=None,
            metadata=METADATA,
            assignment=ASSIGNMENT,
        )
        for g in range(groups)
    ]
    crowd = [RawMember(conns[i // per_conn], settings[i % groups]) for i in range(members)]
    until = loop.time() + SETTLE_S + 30.0

    async def live(member: RawMember) -> None:
        await member.join_and_sync()
        await member.run(until)  # no heartbeats: only rejoins when told to

    tasks = [asyncio.create_task(live(m)) for m in crowd]
    try:
        deadline = loop.time() + SETTLE_S
        while not (
            all(m.synced_generation > 0 and not m.rejoin.is_set() for m in crowd)
            and await stable_groups(admin, groups, members // groups)
        ):
            failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception()]
            if failed:
                raise RuntimeError(f"a member failed: {failed[0].exception()}")
            if loop.time() > deadline:
                raise RuntimeError(f"the groups did not settle within {SETTLE_S} s")
            await asyncio.sleep(0.25)
        after = await asyncio.to_thread(settled_rss, pid)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await close_all([*conns, admin])
    return before, after


def measure_server(members: int, connections: int, groups: int) -> tuple[int, int]:
    flags = (
        "--initial-rebalance-delay-ms",
        "2000",
        "--max-session-timeout-ms",
        str(SESSION_TIMEOUT_MS),
        "--max-connections",
        str(connections + 100),
        "--max-members-per-connection",
        str(-(-members // connections)),
    )
    with (
        server_process("huddle", huddle_serve(*flags)) as server,
        asyncio.Runner(loop_factory=new_event_loop) as runner,
    ):
        return runner.run(
            cancelled_by_sigterm(fill(server.port, server.pid, members, connections, groups))
        )


def server_section(members: int, groups: int, layouts: list[int]) -> None:
    raise_fd_limit(max(layouts) + 1_000)
    print(f"huddle serve memory per idle member, {members} members in {groups} groups")
    print("(VmRSS of the server process; 64-byte subscription and assignment per member)")
    for connections in layouts:
        before, after = measure_server(members, connections, groups)
        per_member = (after - before) / members
        print(
            f"  {connections:>6} connection(s) of {members // connections:>5} member(s): "
            f"{per_member:>8,.0f} bytes/member  (VmRSS {before / 2**20:.1f} MiB -> "
            f"{after / 2**20:.1f} MiB)",
            flush=True,
        )
        if connections == members:
            verdict = "met" if per_member < 2048 else "NOT met"
            print(f"  issue 28's target, one connection each: < 2 KiB per member: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--sections", nargs="+", choices=("core", "server"), default=["core", "server"]
    )
    parser.add_argument("--groups", type=int, default=10, help="server section: groups")
    parser.add_argument(
        "--connections",
        type=int,
        nargs="+",
        default=[100, 10_000],
        help="server section: connection counts to try (members spread evenly over them)",
    )
    args = parser.parse_args()
    quiet_logs()
    exit_on_sigterm()
    print(f"CPU: {cpu_model()}")
    if "core" in args.sections:
        core_section(args.members, args.runs)
    if "server" in args.sections:
        server_section(args.members, args.groups, args.connections)


def core_section(members: int, runs: int) -> None:
    print(f"coordinator core memory per idle member, {members} members")
    print("(tracemalloc; 64-byte subscription and 64-byte assignment per member)")
    for groups in (1, 100):
        figures = [measure(members, groups) for _ in range(runs)]
        print(
            f"  {groups:>4} group(s) of {members // groups:>6}: "
            f"median {statistics.median(figures):,.0f} bytes/member "
            f"(runs: {', '.join(f'{f:,.0f}' for f in figures)})"
        )


if __name__ == "__main__":
    main()
