"""What keeping topics and offsets (``huddle serve --data-dir``) costs.

Two sections. ``commit``: ``huddle serve`` as a child process (pinned to CPU 0, the client
to CPU 1) without a data dir, with one, and with one and ``--fsync``; one connection sends
OffsetCommit requests of 10 partitions back to back (one in flight), in alternating rounds;
reported: the median round trip per server and the ratio to memory only. ``replay``: a
journal of a million offset records is written, then opened (read, checked, decoded) and
replayed into a core. Run: ``python -m bench.journal``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import quiet_logs
from bench.rawclient import (
    huddle_serve,
    new_event_loop,
    open_connection,
    pin_to_cpu,
    server_process,
)
from huddle.coordinator.core import Coordinator
from huddle.coordinator.journal import Journal
from huddle.coordinator.records import OffsetRecord, Record, TopicRecord
from huddle.protocol.messages import (
    CreateTopicsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    TopicSpec,
)

PARTITIONS = 10


def _commit(offset: int) -> OffsetCommitRequest:
    partitions = [OffsetCommitPartition(partition=p, offset=offset) for p in range(PARTITIONS)]
    return OffsetCommitRequest(
        group_id="bench",
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
            response = await conn.call(_commit(first + i))
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
    p.add_argument("--records", type=int, default=1_000_000, help="replay section")
    args = p.parse_args()
    quiet_logs()
    pin_to_cpu(0, 1)  # this process (the client) on CPU 1; the servers on CPU 0
    commit_section(args.rounds, args.commits)
    replay_section(args.records)


if __name__ == "__main__":
    main()
