"""Heartbeats per second through ``huddle serve``'s Kafka listener and its huddle listener,
the same server process, the same run.

One ``huddle serve --kafka-port`` (uvloop, pinned to one CPU, this process on the other) holds
two groups of K members, one member per connection: one formed over the huddle wire (as
``bench.heartbeat`` does), one over the Kafka wire (JoinGroup v5 with its MEMBER_ID_REQUIRED
round, SyncGroup v3, encoded with kio). Each connection then keeps a window of pre-encoded
heartbeats in flight (Heartbeat v4 on the Kafka wire, flexible), one more for every answer,
with ``bench.heartbeat``'s ``Blaster``; rounds alternate between the two wires. Every answer
is checked (error code NONE). The issue's target: the Kafka listener keeps at least half of
the huddle listener's rate. Run: ``python -m bench.kafka_heartbeat``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import struct
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from huddle.testing import free_port
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from bench.common import cpu_model, quiet_logs
from bench.heartbeat import (
    CLIENT_CPU,
    SERVER_CPU,
    Blaster,
    Checker,
    Round,
    blasters_for,
    form_group,
    heartbeat_frames,
    measure,
)
from bench.processes import (
    ServerProcess,
    cancelled_by_sigterm,
    exit_on_sigterm,
    huddle_serve,
    new_event_loop,
    pin_to_cpu,
    server_process,
)
from bench.rawclient import RawConnection, close_all, open_connection
from huddle.coordinator.kafka.schemas import build
from huddle.protocol.framing import FrameReader

JOIN_GROUP = (11, 5)  # (API key, version): the last versions that are not flexible
SYNC_GROUP = (14, 3)
HEARTBEAT = (12, 4)  # the flexible one the Java client and librdkafka pick
MEMBER_ID_REQUIRED = 79
CORRELATION_ID = 1
GROUP = "kafka-heartbeat-bench"
# ConsumerProtocolSubscription v0: no topics, no user data
SUBSCRIPTION = struct.pack(">hii", 0, 0, -1)


def kafka_frame(api: tuple[int, int], correlation_id: int, **fields: Any) -> bytes:
    """A Kafka request of ``api`` (key, version) from plain values, with its header, framed."""
    key, version = api
    schema = load_request_schema(key, version)
    header_class = schema.__header_schema__
    header = header_class(
        request_api_key=i16(key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id="bench",
    )
    out = io.BytesIO()
    entity_writer(header_class)(out, header)
    entity_writer(schema)(out, build(schema, fields))
    body = out.getvalue()
    return struct.pack(">i", len(body)) + body


def kafka_answer(api: tuple[int, int], body: bytes) -> Any:
    """The response of ``api`` in ``body`` (a frame's body: correlation id first)."""
    schema = load_response_schema(*api)
    offset = 5 if schema.__flexible__ else 4  # response header v1 carries tagged fields
    return entity_reader(schema)(body, offset)[0]


class KafkaCalls:
    """Request and answer, one at a time, on a raw connection to the Kafka listener."""

    def __init__(self, conn: RawConnection) -> None:
        self.conn = conn
        self.reader = FrameReader()
        self.answers: asyncio.Queue[bytes] = asyncio.Queue()
        conn.sink = self._feed

    def _feed(self, data: bytes) -> None:
        for body in self.reader.feed(data):
            self.answers.put_nowait(bytes(body))

    async def call(self, api: tuple[int, int], **fields: Any) -> Any:
        assert self.conn.transport is not None
        self.conn.transport.write(kafka_frame(api, CORRELATION_ID, **fields))
        return kafka_answer(api, await asyncio.wait_for(self.answers.get(), 30.0))


async def _join(calls: KafkaCalls, member_id: str = "") -> Any:
    return await calls.call(
        JOIN_GROUP,
        group_id=GROUP,
        session_timeout=60_000,
        rebalance_timeout=60_000,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": SUBSCRIPTION}],
    )


async def kafka_member(calls: KafkaCalls) -> tuple[str, int]:
    """Join (two rounds) and sync: the member id and generation."""
    first = await _join(calls)
    if first.error_code != MEMBER_ID_REQUIRED:
        raise RuntimeError(f"JoinGroup without a member id answered {first.error_code}")
    joined = await _join(calls, first.member_id)
    if joined.error_code != 0:
        raise RuntimeError(f"JoinGroup answered {joined.error_code}")
    assignments = [{"member_id": m.member_id, "assignment": b""} for m in joined.members]
    synced = await calls.call(
        SYNC_GROUP,
        group_id=GROUP,
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        group_instance_id=None,
        assignments=assignments,
    )
    if synced.error_code != 0:
        raise RuntimeError(f"SyncGroup answered {synced.error_code}")
    return joined.member_id, joined.generation_id


def kafka_checker() -> Checker:
    """A heartbeat answer on the Kafka wire must carry error code NONE."""

    def check(_: int, body: bytes) -> str | None:
        try:
            code = kafka_answer(HEARTBEAT, body).error_code
        except Exception as exc:
            return f"UNDECODABLE ({type(exc).__name__})"
        return None if code == 0 else f"error {int(code)}"

    return check


async def kafka_blasters(port: int, members: int, window: int) -> list[Blaster]:
    """A Kafka group of ``members``, one connection each, and a ``Blaster`` per connection."""
    conns = [await open_connection(port, handshake=False) for _ in range(members)]
    formed = await asyncio.gather(*(kafka_member(KafkaCalls(c)) for c in conns))
    blocks = [
        [
            kafka_frame(
                HEARTBEAT,
                CORRELATION_ID,
                group_id=GROUP,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=None,
            )
        ]
        for member_id, generation in formed
    ]
    return await blasters_for("kafka", conns, blocks, window, checker=kafka_checker)


async def compare(args: argparse.Namespace, server: ServerProcess, kafka_port: int) -> list[str]:
    """Alternating rounds, huddle wire and Kafka wire; returns the summary lines."""
    group = await form_group(server.port, args.members, args.members)
    huddle_conns = [m.conn for m in group]
    blocks = [heartbeat_frames(group, c) for c in huddle_conns]
    targets = {
        "huddle wire": await blasters_for("huddle", huddle_conns, blocks, args.window),
        "Kafka wire": await kafka_blasters(kafka_port, args.members, args.window),
    }
    try:
        results = await alternate(targets, server, args, "heartbeats")
    finally:
        await close_all(huddle_conns + [b.conn for b in targets["Kafka wire"]])
    return summary(results, args)


async def alternate(
    targets: dict[str, list[Blaster]], server: ServerProcess, args: argparse.Namespace, what: str
) -> dict[str, list[Round]]:
    """``args.hb_rounds`` rounds of each target, in alternating order; each round's line
    (``what`` names the requests) on stderr."""
    results: dict[str, list[Round]] = {name: [] for name in targets}
    for index in range(args.hb_rounds):
        order = list(targets) if index % 2 == 0 else list(targets)[::-1]
        for name in order:
            r = await measure(targets[name], server, args.hb_seconds, 0.5, 20_000_000)
            results[name].append(r)
            print(
                f"# {what} round {index + 1} {name}: {r.rate:,.0f}/s, server CPU "
                f"{r.server_cpu:.0%}, errors {r.errors} {r.by_code or ''}, unanswered {r.lost}",
                file=sys.stderr,
                flush=True,
            )
    return results


def summary(results: dict[str, list[Round]], args: argparse.Namespace) -> list[str]:
    huddle, kafka = results["huddle wire"], results["Kafka wire"]
    rate = {k: statistics.median(r.rate for r in v) for k, v in results.items()}
    per_cpu = {k: statistics.median(r.per_cpu for r in v) for k, v in results.items()}
    pairs = ", ".join(f"{k.rate / h.rate:.0%}" for h, k in zip(huddle, kafka, strict=True))
    ratio = rate["Kafka wire"] / rate["huddle wire"]
    cpu_ratio = per_cpu["Kafka wire"] / per_cpu["huddle wire"]
    verdict = ", ".join(
        f"{name} {'met' if value >= 0.5 else 'NOT met'}"
        for name, value in (("raw", ratio), ("per server CPU-s", cpu_ratio))
    )
    failed = sum(r.errors + r.lost for r in huddle + kafka)
    return [
        f"Heartbeats per second, one huddle serve, {args.members} members each on its own "
        f"connection, window {args.window}, {args.hb_seconds:g} s x {args.hb_rounds} rounds "
        f"per wire, alternating:",
        f"  huddle listener {rate['huddle wire']:>10,.0f}/s "
        f"({per_cpu['huddle wire']:,.0f} per server CPU-s)",
        f"  Kafka listener  {rate['Kafka wire']:>10,.0f}/s "
        f"({per_cpu['Kafka wire']:,.0f} per server CPU-s)",
        f"  Kafka / huddle  {ratio:.0%} (per round: {pairs}; per server CPU-s: "
        f"{cpu_ratio:.0%}, the steadier on a busy machine); target >= 50%: {verdict}; "
        f"failed or unanswered: {failed}",
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--members", type=int, default=16, help="members per wire")
    parser.add_argument("--window", type=int, default=256, help="heartbeats in flight each")
    parser.add_argument("--hb-seconds", type=float, default=3.0, help="measured s per round")
    parser.add_argument("--hb-rounds", type=int, default=3, help="heartbeat rounds per wire")


def heartbeats(args: argparse.Namespace, *, pin: bool = True) -> list[str]:
    """Run the comparison (its own ``huddle serve``) and return the summary lines."""
    return on_both_listeners(args, compare, pin=pin)


Compare = Callable[[argparse.Namespace, ServerProcess, int], Coroutine[Any, Any, list[str]]]


def on_both_listeners(args: argparse.Namespace, run: Compare, *, pin: bool = True) -> list[str]:
    """``run(args, server, kafka_port)`` against its own ``huddle serve`` with a Kafka
    listener (the server on one CPU, this process on the other): its summary lines."""
    kafka_port = free_port()
    flags: tuple[str, ...] = ("--initial-rebalance-delay-ms", "300")
    flags += ("--kafka-port", str(kafka_port), "--kafka-host", "127.0.0.1")
    if pin:
        pin_to_cpu(0, CLIENT_CPU)
    with (
        server_process("huddle", huddle_serve(*flags), cpu=SERVER_CPU if pin else None) as hs,
        asyncio.Runner(loop_factory=new_event_loop) as runner,
    ):
        return runner.run(cancelled_by_sigterm(run(args, hs, kafka_port)))


def command(doc: str | None, run: Compare) -> None:
    """A benchmark's command line (``doc``'s first line describes it): ``run`` on both
    listeners, then the CPU and its summary lines printed."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    args = parser.parse_args()
    quiet_logs()
    exit_on_sigterm()
    lines = on_both_listeners(args, run, pin=not args.no_pin)
    print(f"CPU: {cpu_model()}")
    print("\n".join(lines))


def main() -> None:
    command(__doc__, compare)


if __name__ == "__main__":
    main()
