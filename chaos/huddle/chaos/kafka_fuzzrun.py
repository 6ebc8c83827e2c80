"""Fuzz a running Kafka listener: fuzzed Kafka frames over many connections, each answer
checked, and a bystander consumer of another group that must not notice.

Each connection sends a batch of ``KafkaFrameFuzzer`` frames and a valid probe request,
all in one write (its side shut only when the bytes end inside a frame), then reads what
the listener sends. ``kafka_oracle.expect`` says from the bytes alone what that must be:

- every request that reads is answered by a well-formed response of its API and version
  (read by kio), with its correlation id, in request order;
- the connection is closed after a request that does not read (or of an API or version
  not served, or a bad frame size), and only then (or after a refused acks=0 Produce);
- the answers come within a deadline: a few seconds, plus what the requests may rightly
  be held (a Fetch's ``max_wait``, a JoinGroup's rebalance timeout). A connection whose
  requests may be held longer than ``patience_s`` (a mutated timeout Kafka would honour)
  is checked up to the deadline and closed by this side (``held_back``).

The bystander (``kafka_bystander``) is a consumer group member on the Kafka wire, in its
own group, heartbeating every ``heartbeat_interval_s`` throughout: every heartbeat must be
answered NONE; the slowest is reported. Whoever runs the listener checks its log for
errors (``KafkaFuzzReport.violations`` holds what this side saw).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Final

from huddle.chaos.fuzzrun import FuzzReport
from huddle.chaos.kafka_bystander import HOST, Beats, Bystander
from huddle.chaos.kafka_fuzz import KafkaFrameFuzzer, KafkaFuzzed
from huddle.chaos.kafka_oracle import Expectation, expect
from huddle.coordinator.kafka.apis import Api
from huddle.protocol.framing import FrameReader

SOFT_CONNECTIONS: Final = 0.6  # connections whose frames are all answerable


@dataclass
class KafkaFuzzReport(FuzzReport):
    held_back: int = 0  # connections closed by the fuzzer: a request may be held for long

    @property
    def failure_kinds(self) -> list[str]:
        """The distinct refusals seen: closes, by reason, and error codes answered."""
        return sorted(k for k in self.answers if k.startswith(("closed:", "error:")))


class _Connection:
    """One fuzzed connection: its frames, what they must be answered, what came back."""

    def __init__(self, fuzzer: KafkaFrameFuzzer, count: int, soft: bool) -> None:
        fuzzer.connection()
        self.batch: list[KafkaFuzzed] = [fuzzer.next(soft=soft) for _ in range(count)]
        probe = fuzzer.frame(Api.API_VERSIONS, 3)
        self.stream = b"".join(f.data for f in self.batch) + probe
        self.expected: Expectation = expect(self.stream)
        self.responses: list[bytes] = []

    def describe(self) -> str:
        return ", ".join(f"{Api(f.api_key).name} v{f.version} {f.mutation}" for f in self.batch)


async def _one_connection(
    port: int,
    conn: _Connection,
    report: KafkaFuzzReport,
    deadline_s: float,
    patience_s: float,
) -> None:
    expected = conn.expected
    wait_s = deadline_s + expected.wait_ms / 1000
    patient = wait_s <= patience_s
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(conn.stream)
    if expected.ended_mid_frame:
        with contextlib.suppress(OSError):
            writer.write_eof()
    report.frames += len(conn.batch)
    report.connections += 1
    report.mutations.update(f.mutation for f in conn.batch)
    frames = FrameReader(1 << 30)
    closed = gave_up = False
    try:
        async with asyncio.timeout(min(wait_s, patience_s)):
            while expected.closes or len(conn.responses) < len(expected.answers):
                try:
                    data = await reader.read(1 << 20)
                except ConnectionResetError:
                    data = b""
                if not data:
                    closed = True
                    break
                conn.responses.extend(frames.feed(data))
    except TimeoutError:
        if patient:
            report.violations.append(
                f"no end to the answers within {wait_s:.1f} s: {len(conn.responses)} of "
                f"{len(expected.answers)} answers ({conn.describe()})"
            )
            return
        report.held_back += 1
        gave_up = True  # it may still rightly be held: what came is checked as a prefix
    finally:
        writer.close()
    _tally(conn, report, closed, gave_up)


def _tally(conn: _Connection, report: KafkaFuzzReport, closed: bool, gave_up: bool) -> None:
    expected = conn.expected
    problems, responses = expected.check(conn.responses, closed, gave_up=gave_up)
    for problem in problems:
        report.violations.append(f"{problem} ({conn.describe()})")
    report.replies += len(conn.responses)
    if expected.closes and closed:
        report.answers["closed:" + expected.close_kind] += 1
    for response in responses:
        code = getattr(response, "error_code", None)
        if code is not None and code.value:
            report.answers[f"error:{code.name}"] += 1


async def fuzz_kafka(
    port: int,
    *,
    frames: int,
    seed: int = 1,
    per_connection: int = 20,
    concurrency: int = 8,
    deadline_s: float = 10.0,
    patience_s: float = 30.0,
    heartbeat_interval_s: float = 0.05,
    bystander_process: bool = False,
) -> KafkaFuzzReport:
    """Send about ``frames`` fuzzed frames to the Kafka listener at 127.0.0.1:``port``;
    ``bystander_process``: the bystander runs in a process of its own."""
    report = KafkaFuzzReport()
    beats = Beats()
    started = time.perf_counter()
    connections = max(frames // per_connection, 1)
    fuzzers = [KafkaFrameFuzzer(seed * 1_000 + worker) for worker in range(concurrency)]

    async def worker(index: int) -> None:
        fuzzer = fuzzers[index]
        for _ in range(index, connections, concurrency):
            conn = _Connection(fuzzer, per_connection, fuzzer.rng.random() < SOFT_CONNECTIONS)
            await _one_connection(port, conn, report, deadline_s, patience_s)

    async with Bystander(port, beats, heartbeat_interval_s, process=bystander_process):
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    report.heartbeats, report.heartbeat_max_ms = beats.heartbeats, beats.slowest_ms
    report.violations += beats.violations
    report.seconds = time.perf_counter() - started
    return report
