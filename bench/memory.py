"""Coordinator memory per idle member.

Builds groups of idle, synced members in the sans-IO core (one connection per member,
subscription metadata and assignments of realistic size) and reports the heap the core
holds per member, measured with tracemalloc. Run: ``python -m bench.memory``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tracemalloc

from bench.common import quiet_logs
from coordinator.config import GroupConfig
from coordinator.core import Coordinator, Peer
from protocol.messages import (
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    quiet_logs()
    print(f"coordinator core memory per idle member, {args.members} members")
    print("(tracemalloc; 64-byte subscription and 64-byte assignment per member)")
    for groups in (1, 100):
        figures = [measure(args.members, groups) for _ in range(args.runs)]
        print(
            f"  {groups:>4} group(s) of {args.members // groups:>6}: "
            f"median {statistics.median(figures):,.0f} bytes/member "
            f"(runs: {', '.join(f'{f:,.0f}' for f in figures)})"
        )


if __name__ == "__main__":
    main()
