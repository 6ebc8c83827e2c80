"""What keeping topics and offsets (``huddle serve --data-dir``) costs.

Four sections. ``concurrent``: commits/s with 1, 10 and 100 connections committing at once
(each one commit in flight), with and without ``--fsync``, for the data dir written in
batches off the loop (huddle's group commit) and inline on the loop, one write per request
(the path before group commit; ``bench.journal_server --inline``), servers pinned to CPU 0.
``stall``: the event loop's longest stall (a 1 ms timer's worst lateness) while a journal
compaction of a million offsets runs, off the loop and (as before) on it.
``commit``: ``huddle serve`` as a child process (pinned to CPU 0, the client
to CPU 1) without a data dir, with one, and with one and ``--fsync``; one connection sends
OffsetCommit requests of 10 partitions back to back (one in flight), in alternating rounds;
reported: the median round trip per server and the ratio to memory only. ``replay``: a
journal of a million offset records is written, then opened (read, checked, decoded) and
replayed into a core. Run: ``python -m bench.journal``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.common import cpu_model, loop_stall, quiet_logs
from bench.processes import huddle_serve, new_event_loop, pin_to_cpu, server_process
from bench.rawclient import RawConnection, open_connection
from huddle.coordinator.config import GroupConfig, ServerConfig
from huddle.coordinator.core import Coordinator
from huddle.coordinator.server import CoordinatorServer
from huddle.coordinator.storage.journal import Journal
from huddle.coordinator.storage.records import OffsetRecord, Record, TopicRecord
from huddle.protocol.messages import (
    CreateTopicsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    TopicSpec,
)

PARTITIONS = 10


def commit_request(offset: int, group_id: str = "bench") -> OffsetCommitRequest:
    """An admin's commit (no generation) of ``offset`` for partitions 0-9 of topic t."""
    partitions = [OffsetCommitPartition(partition=p, offset=offset) for p in range(PARTITIONS)]
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id=-1,
        member_id="",
        topics=[OffsetCommitTopic(name="t", partitions=partitions)],
    )


async def _round(port: int, commits: int, first: int) -> list[float]:
    conn = await open_connection(port, "bench-journal")
    try:
        await conn.call(CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=PARTITIONS)]))
        times = []
        for i in range(commits):
            start = time.perf_counter()
            response = await conn.call(commit_request(first + i))
            times.append(time.perf_counter() - start)
            assert isinstance(response, OffsetCommitResponse)
        return times
    finally:
        await conn.close()


def commit_section(rounds: int, commits: int) -> None:
    with tempfile.TemporaryDirectory(prefix="huddle-bench-journal-") as tmp:
        servers = {
            "memory only": huddle_serve(),
            "--data-dir": huddle_serve("--data-dir", f"{tmp}/a"),
            "--data-dir --fsync": huddle_serve("--data-dir", f"{tmp}/b", "--fsync"),
        }
        medians: dict[str, list[float]] = {name: [] for name in servers}
        loop = new_event_loop()
        try:
            for r in range(rounds):
                for name, command in servers.items():
                    with server_process(name, command, cpu=0) as server:
                        times = loop.run_until_complete(_round(server.port, commits, r * commits))
                    medians[name].append(statistics.median(times))
        finally:
            loop.close()
    base = statistics.median(medians["memory only"])
    print(f"commit round trip, {PARTITIONS} partitions, {rounds} rounds x {commits} commits:")
    for name, values in medians.items():
        m = statistics.median(values)
        print(f"  {name:22} median {m * 1e6:8.1f} us   x{m / base:5.2f} of memory only")


def _journal_server(data_dir: str, *flags: str) -> Callable[[int], Sequence[str]]:
    def command(port: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "bench.journal_server",
            "--port",
            str(port),
            "--data-dir",
            data_dir,
            *flags,
        ]

    return command


async def _committers(port: int, connections: int, seconds: float) -> float:
    """Commits/s of ``connections`` connections committing back to back for ``seconds``."""
    conns = [await open_connection(port, f"bench-{i}") for i in range(connections)]
    try:
        await conns[0].call(
            CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=PARTITIONS)])
        )
        done = 0
        stop_at = time.perf_counter() + seconds

        async def committer(conn: RawConnection, first: int) -> None:
            nonlocal done
            offset = first
            while time.perf_counter() < stop_at:
                response = await conn.call(commit_request(offset))
                assert isinstance(response, OffsetCommitResponse)
                offset += 1
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(committer(c, i * 1_000_000) for i, c in enumerate(conns)))
        return done / (time.perf_counter() - start)
    finally:
        for conn in conns:
            await conn.close()


def concurrent_section(rounds: int, seconds: float) -> None:
    cases = [
        (mode, fsync, n)
        for fsync in (False, True)
        for n in (1, 10, 100)
        for mode in ("inline", "batched")
    ]
    rates: dict[tuple[str, bool, int], list[float]] = {case: [] for case in cases}
    loop = new_event_loop()
    try:
        with tempfile.TemporaryDirectory(prefix="huddle-bench-journal-") as tmp:
            for r in range(rounds):
                for mode, fsync, n in cases:
                    flags = (["--fsync"] if fsync else []) + (
                        ["--inline"] if mode == "inline" else []
                    )
                    data_dir = f"{tmp}/{r}-{mode}-{fsync}-{n}"
                    command = _journal_server(data_dir, *flags)
                    with server_process(mode, command, cpu=0) as server:
                        rate = loop.run_until_complete(_committers(server.port, n, seconds))
                    rates[(mode, fsync, n)].append(rate)
    finally:
        loop.close()
    print(f"commits/s ({PARTITIONS} partitions each), median of {rounds} rounds of {seconds:g} s,")
    print(f"  server on one CPU of: {cpu_model()}")
    print(f"  {'':8} {'committers':>10} {'inline (before)':>16} {'batched (now)':>14} {'ratio':>7}")
    for fsync in (False, True):
        for n in (1, 10, 100):
            before = statistics.median(rates[("inline", fsync, n)])
            now = statistics.median(rates[("batched", fsync, n)])
            name = "--fsync" if fsync else "no fsync"
            print(f"  {name:8} {n:>10} {before:>16,.0f} {now:>14,.0f} {now / before:>6.1f}x")


async def _stall_during_compaction(records: int, inline: bool) -> tuple[float, float]:
    """(longest loop stall, compaction time) in seconds."""
    with tempfile.TemporaryDirectory(prefix="huddle-bench-journal-") as tmp:
        config = ServerConfig(host="127.0.0.1", port=0, data_dir=tmp, group=GroupConfig())
        server = CoordinatorServer(config)
        await server.start()
        try:
            server.core.restore(
                [TopicRecord("t", 1_000)]
                + [OffsetRecord(f"g{i // 1_000}", "t", i % 1_000, i) for i in range(records)]
            )
            journal, commits = server.journal, server.commits
            assert journal is not None
            assert commits is not None
            journal.written = 5 * records  # as if the journal had grown well past the state
            async with loop_stall(0.001) as stall:
                await asyncio.sleep(0.05)
                start = time.perf_counter()
                if inline:
                    journal.compact(server.core.snapshot)
                else:
                    assert commits.compact_if_due(), "the compaction did not start"
                    await commits.compacted()
                took = time.perf_counter() - start
                await asyncio.sleep(0.01)
            return stall.worst, took
        finally:
            await server.close()


def stall_section(records: int, rounds: int) -> None:
    loop = new_event_loop()
    results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    try:
        for _ in range(rounds):
            for inline in (True, False):
                results[inline].append(
                    loop.run_until_complete(_stall_during_compaction(records, inline))
                )
    finally:
        loop.close()
    print(f"compaction of {records:,} offsets, median of {rounds}, CPU: {cpu_model()}")
    for inline, name in ((True, "on the loop (before)"), (False, "off the loop (now)")):
        stall = statistics.median(w for w, _ in results[inline])
        took = statistics.median(t for _, t in results[inline])
        print(f"  {name:22} longest loop stall {stall * 1e3:8.1f} ms   compaction {took:5.2f} s")


def replay_section(records: int) -> None:
    state: list[Record] = [TopicRecord("t", 1_000)]
    state += [OffsetRecord("g", "t", i % 1_000, i) for i in range(records)]
    with tempfile.TemporaryDirectory(prefix="huddle-bench-journal-") as tmp:
        journal = Journal.open(Path(tmp))
        start = time.perf_counter()
        for i in range(0, len(state), 1_000):
            journal.append(state[i : i + 1_000])
        written = time.perf_counter() - start
        journal.close()
        size = (Path(tmp) / "journal.bin").stat().st_size
        start = time.perf_counter()
        journal = Journal.open(Path(tmp))
        read = time.perf_counter() - start
        start = time.perf_counter()
        Coordinator().restore(journal.records)
        replayed = time.perf_counter() - start
        journal.close()
    n = len(state)
    print(f"journal of {n:,} records ({size / 2**20:.1f} MiB):")
    print(f"  append (1,000 per write)   {written:6.2f} s  {n / written:10,.0f} records/s")
    print(f"  open: read + check + decode {read:6.2f} s  {n / read:10,.0f} records/s")
    print(f"  replay into a core          {replayed:6.2f} s  {n / replayed:10,.0f} records/s")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.journal", description=__doc__)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--commits", type=int, default=2_000, help="commits per round")
    p.add_argument("--records", type=int, default=1_000_000, help="replay and stall sections")
    p.add_argument("--seconds", type=float, default=2.0, help="concurrent: seconds per case")
    p.add_argument(
        "--sections",
        default="concurrent,stall,commit,replay",
        help="comma-separated: concurrent, stall, commit, replay",
    )
    args = p.parse_args()
    quiet_logs()
    sections = set(args.sections.split(","))
    if "stall" in sections:  # in this process, before it is pinned to one CPU
        stall_section(args.records, 3)
    pin_to_cpu(0, 1)  # this process (the client) on CPU 1; the servers on CPU 0
    if "concurrent" in sections:
        concurrent_section(args.rounds, args.seconds)
    if "commit" in sections:
        commit_section(args.rounds, args.commits)
    if "replay" in sections:
        replay_section(args.records)


if __name__ == "__main__":
    main()
