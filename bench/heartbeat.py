"""Heartbeat throughput of ``huddle serve`` against a bare echo server.

Starts the coordinator (``huddle serve``, uvloop) and ``bench.echo`` (uvloop, the same
framing, one write per read) as child processes pinned to one CPU, and drives both from
this process pinned to the other CPU. One group of K members is formed on the coordinator
(one connection per member by default); then each connection keeps a bounded window of
pre-encoded HeartbeatRequest frames in flight, sending one more for every answer, for a
fixed time. The echo server gets the very same frames and echoes them. Rounds alternate
between the two servers; the figure of merit is median(huddle) / median(echo), also given
per second of server CPU time (steadier on a busy machine). Every heartbeat answer is
checked: the coordinator must answer with error code NONE (mismatches are decoded and
counted by code). Run: ``python -m bench.heartbeat``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from ssl import SSLContext

import msgspec

from bench.common import cpu_model, quiet_logs
from bench.processes import (
    ServerProcess,
    cancelled_by_sigterm,
    cpu_seconds,
    echo_command,
    exit_on_sigterm,
    huddle_serve,
    new_event_loop,
    pin_to_cpu,
    server_process,
)
from bench.rawclient import MemberSettings, RawConnection, RawMember, close_all, open_connection
from huddle.protocol.errors import ErrorCode, error_name
from huddle.protocol.framing import ClientCodec, FrameReader, frame_header
from huddle.protocol.messages import Call, HeartbeatRequest, HeartbeatResponse, Reply

CORRELATION_ID = 1  # every pre-encoded heartbeat carries the same one: the answers are equal
SERVER_CPU = 0
CLIENT_CPU = 1

# (index of the frame in its block, body) -> None if the answer is right, else what it is
Checker = Callable[[int, bytes], str | None]


@dataclass
class Tally:
    received: int = 0  # frames answered
    sent: int = 0
    errors: int = 0
    by_code: dict[str, int] = field(default_factory=dict)


class Blaster:
    """The load on one connection: ``window`` blocks of frames in flight, one block sent
    for every block answered, until ``stop()`` or ``limit`` frames sent."""

    def __init__(
        self,
        conn: RawConnection,
        block: bytes,
        expected: bytes,
        frames_per_block: int,
        window_blocks: int,
        check: Checker,
    ) -> None:
        self.conn = conn
        self.frames = frames_per_block
        self.window = window_blocks
        self.block_len = len(expected)
        self.blocks = [block * n for n in range(window_blocks + 1)]
        self.expected = [expected * n for n in range(window_blocks + 1)]
        self.check = check
        self.buffer = bytearray()
        self.tally = Tally()
        self.sending = False
        self.limit = 0
        self.drained: asyncio.Event = asyncio.Event()

    @property
    def outstanding(self) -> int:
        return self.tally.sent - self.tally.received

    def start(self, limit: int) -> None:
        assert self.conn.transport is not None
        self.tally = Tally()
        self.buffer.clear()
        self.drained.clear()
        self.sending = True
        self.limit = limit
        self.conn.sink = self.feed
        blocks = min(self.window, limit // self.frames)
        self.tally.sent = blocks * self.frames
        self.conn.transport.write(self.blocks[blocks])

    def stop(self) -> None:
        self.sending = False
        if self.outstanding == 0:
            self.drained.set()

    def feed(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        n = len(buffer) // self.block_len
        if not n:
            return
        size = n * self.block_len
        if n > self.window or not buffer.startswith(self.expected[n]):
            self._slow_check(bytes(buffer[:size]))
        del buffer[:size]
        tally = self.tally
        tally.received += n * self.frames
        if self.sending:
            blocks = min(n, (self.limit - tally.sent) // self.frames)
            if blocks > 0:
                tally.sent += blocks * self.frames
                transport = self.conn.transport
                assert transport is not None
                transport.write(self.blocks[blocks])
            else:
                self.sending = False
        if not self.sending and tally.sent <= tally.received:
            self.drained.set()

    def _slow_check(self, chunk: bytes) -> None:
        by_code = self.tally.by_code
        for index, body in enumerate(FrameReader().feed(chunk)):
            problem = self.check(index % self.frames, body)
            if problem is not None:
                self.tally.errors += 1
                by_code[problem] = by_code.get(problem, 0) + 1


def huddle_checker() -> Checker:
    """A heartbeat answer must be a Reply carrying a HeartbeatResponse with error NONE."""
    codec = ClientCodec()

    def check(_: int, body: bytes) -> str | None:
        try:
            frame = codec.decode(body)
        except msgspec.MsgspecError:
            return "UNDECODABLE"
        if isinstance(frame, Reply) and isinstance(frame.response, HeartbeatResponse):
            code = frame.response.error_code
            return None if code == ErrorCode.NONE else error_name(code)
        if isinstance(frame, Reply):
            return type(frame.response).__name__
        return type(frame).__name__

    return check


def echo_checker(bodies: list[bytes]) -> Checker:
    """An echoed frame must be the frame sent."""

    def check(index: int, body: bytes) -> str | None:
        return None if body == bodies[index] else "NOT_ECHOED"

    return check


async def probe(conn: RawConnection, block: bytes, frames: int) -> list[bytes]:
    """Send one block, return the bodies of the ``frames`` frames that come back."""
    reader = FrameReader()
    bodies: list[bytes] = []
    done = asyncio.Event()

    def collect(data: bytes) -> None:
        bodies.extend(reader.feed(data))
        if len(bodies) >= frames:
            done.set()

    conn.sink = collect
    assert conn.transport is not None
    conn.transport.write(block)
    await asyncio.wait_for(done.wait(), 10.0)
    if len(bodies) != frames:
        raise RuntimeError(f"probe: {len(bodies)} frames came back for {frames}")
    return bodies


def whole(bodies: list[bytes]) -> bytes:
    return b"".join(frame_header(len(b)) + b for b in bodies)


@dataclass(frozen=True)
class Round:
    rate: float  # answers per second
    server_cpu: float  # share of one CPU
    client_cpu: float
    errors: int
    lost: int
    by_code: dict[str, int]

    @property
    def per_cpu(self) -> float:
        """Answers per second of server CPU time: steadier than the rate on a busy machine."""
        return self.rate / self.server_cpu if self.server_cpu > 0 else 0.0


async def measure(
    blasters: list[Blaster], server: ServerProcess, seconds: float, warmup: float, limit: int
) -> Round:
    for blaster in blasters:
        blaster.start(limit)
    await asyncio.sleep(warmup)
    loop = asyncio.get_running_loop()
    r0, t0 = sum(b.tally.received for b in blasters), loop.time()
    s0, c0 = cpu_seconds(server.pid), time.process_time()
    await asyncio.sleep(seconds)
    r1, t1 = sum(b.tally.received for b in blasters), loop.time()
    s1, c1 = cpu_seconds(server.pid), time.process_time()
    for blaster in blasters:
        blaster.stop()
    with contextlib.suppress(TimeoutError):  # what stays unanswered is reported as lost
        await asyncio.wait_for(asyncio.gather(*(b.drained.wait() for b in blasters)), 10.0)
    by_code: dict[str, int] = {}
    for blaster in blasters:
        for code, count in blaster.tally.by_code.items():
            by_code[code] = by_code.get(code, 0) + count
    elapsed = t1 - t0
    return Round(
        rate=(r1 - r0) / elapsed,
        server_cpu=(s1 - s0) / elapsed,
        client_cpu=(c1 - c0) / elapsed,
        errors=sum(b.tally.errors for b in blasters),
        lost=sum(max(b.outstanding, 0) for b in blasters),
        by_code=by_code,
    )


async def form_group(
    port: int, members: int, connections: int, ssl: SSLContext | None = None
) -> list[RawMember]:
    conns = [await open_connection(port, f"hb-{i}", ssl=ssl) for i in range(connections)]
    settings = MemberSettings(group_id="heartbeat-bench", session_timeout_ms=60_000)
    group = [RawMember(conns[i % connections], settings) for i in range(members)]
    await asyncio.wait_for(asyncio.gather(*(m.join_and_sync() for m in group)), 30.0)
    generations = {m.synced_generation for m in group}
    if len(generations) != 1:
        raise RuntimeError(f"members synced different generations: {sorted(generations)}")
    return group


def heartbeat_frames(group: list[RawMember], conn: RawConnection) -> list[bytes]:
    codec = ClientCodec()
    return [
        codec.encode(
            Call(
                correlation_id=CORRELATION_ID,
                request=HeartbeatRequest(
                    group_id=m.settings.group_id,
                    generation_id=m.synced_generation,
                    member_id=m.member_id,
                ),
            )
        )
        for m in group
        if m.conn is conn
    ]


async def blasters_for(
    name: str,
    conns: list[RawConnection],
    blocks: list[list[bytes]],
    window: int,
    checker: Callable[[], Checker] | None = None,
) -> list[Blaster]:
    """A ``Blaster`` per connection; each answer is checked by ``checker()`` if given, else
    as a huddle heartbeat's (``name`` "huddle") or an echo's."""
    out: list[Blaster] = []
    for conn, frames in zip(conns, blocks, strict=True):
        block = b"".join(frames)
        bodies = await probe(conn, block, len(frames))
        if checker is not None:
            check = checker()
        elif name == "huddle":
            check = huddle_checker()
        else:
            check = echo_checker([f[4:] for f in frames])
        problems = [p for i, body in enumerate(bodies) if (p := check(i, body)) is not None]
        if problems:
            raise RuntimeError(f"{name}: the first frames were answered wrongly: {problems}")
        out.append(
            Blaster(conn, block, whole(bodies), len(frames), max(window // len(frames), 1), check)
        )
    return out


def add_compare_arguments(parser: argparse.ArgumentParser, rounds: int) -> None:
    """The options ``compare`` reads."""
    parser.add_argument("--members", type=int, default=16, help="members of the group")
    parser.add_argument("--connections", type=int, default=16, help="connections they share")
    parser.add_argument("--window", type=int, default=256, help="frames in flight per connection")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per round")
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured time per round")
    parser.add_argument("--rounds", type=int, default=rounds, help="rounds per server")
    parser.add_argument(
        "--max-frames", type=int, default=20_000_000, help="frames sent per round at most"
    )


@dataclass(frozen=True)
class Setup:
    """One coordinator of a same-run comparison: a name, its process, TLS to it if any."""

    name: str
    server: ServerProcess
    ssl: SSLContext | None = None


async def compare(args: argparse.Namespace, base: Setup, other: Setup) -> dict[str, list[Round]]:
    """Heartbeat rounds against two coordinators, alternating (``--members``,
    ``--connections``, ``--window``, ``--rounds``, ``--seconds``, ``--warmup``,
    ``--max-frames``); prints each round and the ratio of medians, other to base."""
    targets = {}
    conns: list[RawConnection] = []
    for setup in (base, other):
        group = await form_group(setup.server.port, args.members, args.connections, ssl=setup.ssl)
        group_conns = list(dict.fromkeys(m.conn for m in group))
        conns += group_conns
        blocks = [heartbeat_frames(group, c) for c in group_conns]
        blasters = await blasters_for("huddle", group_conns, blocks, args.window)
        targets[setup.name] = (setup.server, blasters)
    results: dict[str, list[Round]] = {base.name: [], other.name: []}
    order = (base.name, other.name)
    try:
        for index in range(args.rounds):
            for name in order if index % 2 == 0 else order[::-1]:
                server, blasters = targets[name]
                r = await measure(blasters, server, args.seconds, args.warmup, args.max_frames)
                results[name].append(r)
                print(
                    f"  round {index + 1} {name:>8}: {r.rate:>9,.0f} heartbeats/s "
                    f"({r.per_cpu:>9,.0f} per server CPU-s)  server CPU {r.server_cpu:4.0%}  "
                    f"errors {r.errors}  unanswered {r.lost}",
                    flush=True,
                )
    finally:
        await close_all(conns)
    rate = {k: statistics.median(r.rate for r in v) for k, v in results.items()}
    per_cpu = {k: statistics.median(r.per_cpu for r in v) for k, v in results.items()}
    # each round's two measurements are next to each other in time: their ratio is
    # steadier than the ratio of medians on a machine whose speed drifts
    pairs = [o.rate / b.rate for b, o in zip(results[base.name], results[other.name], strict=True)]
    print(
        f"heartbeats/s median: {base.name} {rate[base.name]:,.0f}, {other.name} "
        f"{rate[other.name]:,.0f}: {other.name} keeps {rate[other.name] / rate[base.name]:.1%} "
        f"(per server CPU-s: {per_cpu[other.name] / per_cpu[base.name]:.1%}); median of "
        f"the rounds' ratios {statistics.median(pairs):.1%} "
        f"(quartiles {_quartiles(pairs)})"
    )
    return results


def _quartiles(values: list[float]) -> str:
    if len(values) < 2:
        return "-"
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1:.1%} to {q3:.1%}"


def report(huddle: list[Round], echo: list[Round]) -> None:
    def median(rounds: list[Round], key: Callable[[Round], float]) -> float:
        return statistics.median(key(r) for r in rounds)

    def per_round(key: Callable[[Round], float]) -> str:
        return ", ".join(f"{key(h) / key(e):.0%}" for h, e in zip(huddle, echo, strict=True))

    def rate(r: Round) -> float:
        return r.rate

    def per_cpu(r: Round) -> float:
        return r.per_cpu

    def cpu(r: Round) -> float:
        return r.server_cpu

    ratio = median(huddle, rate) / median(echo, rate)
    cpu_ratio = median(huddle, per_cpu) / median(echo, per_cpu)
    failed = sum(r.errors + r.lost for r in huddle + echo)
    print(
        f"median huddle: {median(huddle, rate):>10,.0f} heartbeats/s  "
        f"{median(huddle, per_cpu):>10,.0f} per server CPU-s  "
        f"(server CPU {median(huddle, cpu):.0%})"
    )
    print(
        f"median echo:   {median(echo, rate):>10,.0f} frames/s      "
        f"{median(echo, per_cpu):>10,.0f} per server CPU-s  (server CPU {median(echo, cpu):.0%})"
    )
    print(f"ratio median(huddle)/median(echo): {ratio:.1%}  (per round: {per_round(rate)})")
    print(f"same, per server CPU-second:       {cpu_ratio:.1%}  (per round: {per_round(per_cpu)})")
    if median(echo, cpu) < 0.9:
        print(
            "note: the echo server was not saturated (under 90% of its CPU): the raw ratio "
            "flatters huddle; the per-CPU-second ratio is the steadier figure"
        )
    verdict = ", ".join(
        f"{name} {value:.1%} {'met' if value >= 0.30 else 'NOT met'}"
        for name, value in (("raw", ratio), ("per CPU-s", cpu_ratio))
    )
    print(f"target >= 30%: {verdict}; failed or unanswered heartbeats: {failed}")
    print(f"issue 28's target >= 40%: per CPU-s {'met' if cpu_ratio >= 0.40 else 'NOT met'}")


async def run(args: argparse.Namespace, huddle: ServerProcess, echo: ServerProcess) -> None:
    group = await form_group(huddle.port, args.members, args.connections)
    huddle_conns = list(dict.fromkeys(m.conn for m in group))
    blocks = [heartbeat_frames(group, c) for c in huddle_conns]
    echo_conns = [await open_connection(echo.port, handshake=False) for _ in huddle_conns]
    try:
        targets = {
            "huddle": (huddle, await blasters_for("huddle", huddle_conns, blocks, args.window)),
            "echo": (echo, await blasters_for("echo", echo_conns, blocks, args.window)),
        }
        per_block = len(blocks[0])
        print(
            f"heartbeat throughput: 1 group of {args.members} members over "
            f"{len(huddle_conns)} connections, window {per_block * targets['echo'][1][0].window}"
            f" frames per connection, {args.seconds:g} s per round after {args.warmup:g} s warm-up"
        )
        print(f"frame: {len(blocks[0][0])} bytes request, correlation id fixed; CPU: {cpu_model()}")
        results: dict[str, list[Round]] = {"huddle": [], "echo": []}
        for index in range(args.rounds):
            for name in ("huddle", "echo") if index % 2 == 0 else ("echo", "huddle"):
                server, blasters = targets[name]
                r = await measure(blasters, server, args.seconds, args.warmup, args.max_frames)
                results[name].append(r)
                codes = ", ".join(f"{k}={v}" for k, v in sorted(r.by_code.items())) or "-"
                print(
                    f"  round {index + 1} {name:>6}: {r.rate:>10,.0f}/s "
                    f"({r.per_cpu:>10,.0f} per server CPU-s)  server CPU {r.server_cpu:4.0%}  "
                    f"client CPU {r.client_cpu:4.0%}  errors {r.errors} ({codes})  "
                    f"unanswered {r.lost}",
                    flush=True,
                )
        report(results["huddle"], results["echo"])
    finally:
        await close_all(huddle_conns + echo_conns)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--members", type=int, default=16, help="members of the group")
    parser.add_argument("--connections", type=int, default=16, help="connections they share")
    parser.add_argument("--window", type=int, default=256, help="frames in flight per connection")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per round")
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured time per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per server")
    parser.add_argument(
        "--max-frames", type=int, default=20_000_000, help="frames sent per round at most"
    )
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    args = parser.parse_args()
    if not 1 <= args.connections <= args.members:
        parser.error("--connections must be between 1 and --members")
    quiet_logs()
    exit_on_sigterm()
    server_cpu = None if args.no_pin else SERVER_CPU
    if not args.no_pin:
        pin_to_cpu(0, CLIENT_CPU)
    with (
        server_process(
            "huddle", huddle_serve("--initial-rebalance-delay-ms", "300"), cpu=server_cpu
        ) as hs,
        server_process("echo", echo_command, cpu=server_cpu) as es,
        asyncio.Runner(loop_factory=new_event_loop) as runner,
    ):
        runner.run(cancelled_by_sigterm(run(args, hs, es)))


if __name__ == "__main__":
    main()
