"""One client's burst against everyone else: how long a bystander's heartbeat waits.

Starts ``huddle serve`` (uvloop) pinned to one CPU; this process, on the other, commits
``--offsets`` offsets to group ``big``, forms group ``calm`` of one member, and then:

1. **burst**: one connection writes ``--fetches`` requests for every offset of ``big`` in one
   write and reads the answers; meanwhile the bystander heartbeats back to back (one in
   flight). Printed: the burst's duration, the bystander's heartbeat round trips (median, p99,
   max) and the server's peak RSS.
2. **largest request**: round trips of one fetch naming ``max_request_partitions`` (20,000)
   partitions, alone: the cost of the largest request a connection may send, which with the
   input slice (5 ms) bounds what one connection's input takes of a loop pass.
3. **amplification**: a fetch naming partition 0 a million times (refused whole: over the
   request limit).

Run: ``python -m bench.fairness``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import cpu_model, quiet_logs
from bench.processes import huddle_serve, new_event_loop, pin_to_cpu, server_process
from bench.rawclient import MemberSettings, RawConnection, RawMember, open_connection
from huddle.protocol.errors import ErrorCode
from huddle.protocol.framing import ClientCodec, FrameReader
from huddle.protocol.messages import (
    Call,
    CreateTopicsRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    TopicSpec,
)

LIMIT = 20_000  # the coordinator's default max_request_partitions


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _setup(port: int, offsets: int) -> None:
    admin = await open_connection(port, "admin")
    await admin.call(CreateTopicsRequest(topics=[TopicSpec(name="wide", partitions=offsets)]))
    for start in range(0, offsets, LIMIT):
        partitions = [
            OffsetCommitPartition(partition=p, offset=p)
            for p in range(start, min(start + LIMIT, offsets))
        ]
        await admin.call(
            OffsetCommitRequest(
                group_id="big", topics=[OffsetCommitTopic(name="wide", partitions=partitions)]
            )
        )
    await admin.close()


async def _burst(
    port: int, fetches: int, bystander: RawMember, attackers: int = 1
) -> dict[str, float | bool]:
    """``fetches`` fetches of every offset of ``big``, spread over ``attackers``
    connections, each writing its share in one write."""
    conns = [await open_connection(port, f"attacker-{i}") for i in range(attackers)]
    frames = [FrameReader() for _ in conns]
    answered = 0
    all_answered = asyncio.get_running_loop().create_future()

    def sink_for(reader: FrameReader) -> Callable[[bytes], None]:
        def sink(data: bytes) -> None:
            nonlocal answered
            answered += len(reader.feed(data))
            if answered >= fetches and not all_answered.done():
                all_answered.set_result(None)

        return sink

    codec = ClientCodec()
    shares = [fetches // attackers + (i < fetches % attackers) for i in range(attackers)]
    beat = HeartbeatRequest(
        group_id="calm", generation_id=bystander.generation, member_id=bystander.member_id
    )
    round_trips: list[float] = []
    errors = 0
    started = time.perf_counter()
    for conn, reader, share in zip(conns, frames, shares, strict=True):
        conn.sink = sink_for(reader)
        conn.write(
            b"".join(
                codec.encode(Call(correlation_id=i, request=OffsetFetchRequest(group_id="big")))
                for i in range(1, share + 1)
            )
        )
    dropped = False
    while not all_answered.done():
        if any(conn.closed.done() for conn in conns):
            dropped = True
            break
        sent = time.perf_counter()
        answer = await bystander.conn.call(beat)
        round_trips.append(time.perf_counter() - sent)
        if not isinstance(answer, HeartbeatResponse) or answer.error_code != ErrorCode.NONE:
            errors += 1
    duration = time.perf_counter() - started
    for conn in conns:
        await conn.close()
    round_trips.sort()
    return {
        "duration_s": duration,
        "heartbeats": len(round_trips),
        "errors": errors,
        "answered": answered,
        "dropped": dropped,
        "median_ms": statistics.median(round_trips) * 1000,
        "p99_ms": round_trips[int(len(round_trips) * 0.99)] * 1000,
        "max_ms": round_trips[-1] * 1000,
    }


def _print_round(round_: int, figures: dict[str, float | bool]) -> None:
    print(
        f"  round {round_ + 1}: {figures['duration_s']:.2f} s; bystander "
        f"{figures['heartbeats']:.0f} heartbeats ({figures['errors']:.0f} errors), "
        f"round trip median {figures['median_ms']:.2f} ms, "
        f"p99 {figures['p99_ms']:.2f} ms, max {figures['max_ms']:.2f} ms; "
        f"{figures['answered']:.0f} answered"
        + (", then the server dropped the connection" if figures["dropped"] else "")
    )


async def _one_request(conn: RawConnection, request: OffsetFetchRequest, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        sent = time.perf_counter()
        answer = await conn.call(request)
        times.append(time.perf_counter() - sent)
        assert isinstance(answer, OffsetFetchResponse), answer
    return statistics.median(times) * 1000


async def main(args: argparse.Namespace) -> None:
    with server_process("huddle", huddle_serve(), cpu=0) as server:
        pin_to_cpu(0, 1)  # this process: the other CPU
        await _setup(server.port, args.offsets)
        conn = await open_connection(server.port, "bystander")
        bystander = RawMember(conn, MemberSettings(group_id="calm", session_timeout_ms=6_000))
        await bystander.join_and_sync()
        print(f"CPU: {cpu_model()}; server pinned to CPU 0, this script to CPU 1")
        print(f"burst: {args.fetches} fetches of {args.offsets:,} offsets each, in one write")
        for round_ in range(args.rounds):
            figures = await _burst(server.port, args.fetches, bystander)
            _print_round(round_, figures)
        print(f"the same {args.fetches} fetches from {args.attackers} connections at once:")
        for round_ in range(args.rounds):
            figures = await _burst(server.port, args.fetches, bystander, args.attackers)
            _print_round(round_, figures)
        print(f"  server peak RSS: {_peak_rss_mib(server.pid):.0f} MiB")
        largest = OffsetFetchRequest(
            group_id="big",
            topics=[OffsetFetchTopic(name="wide", partitions=list(range(LIMIT)))],
        )
        ms = await _one_request(conn, largest, args.requests)
        print(f"largest request ({LIMIT:,} partitions), alone: median {ms:.1f} ms")
        amplified = OffsetFetchRequest(
            group_id="big", topics=[OffsetFetchTopic(name="wide", partitions=[0] * 1_000_000)]
        )
        ms = await _one_request(conn, amplified, args.requests)
        print(f"a fetch naming partition 0 a million times (refused): median {ms:.1f} ms")
        await conn.close()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offsets", type=int, default=10_000)
    parser.add_argument("--fetches", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--attackers", type=int, default=100)
    parser.add_argument("--requests", type=int, default=10)
    return parser.parse_args(argv)


if __name__ == "__main__":
    quiet_logs()
    loop = new_event_loop()
    try:
        loop.run_until_complete(main(parse()))
    finally:
        loop.close()
