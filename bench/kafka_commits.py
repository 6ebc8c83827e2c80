"""Offset commits per second through ``huddle serve``'s Kafka listener and its huddle
listener, the same server process, the same run.

As ``bench.kafka_heartbeat`` (two groups of K members, one member per connection, one
group per wire; the server on one CPU, this process on the other; rounds alternating
between the wires), with an OffsetCommit in place of each heartbeat: one topic of 6
partitions (created first, through the Kafka listener), every partition committed in each
request. OffsetCommit v8 on the Kafka wire (flexible, as the Java client and librdkafka
send it). Every answer is checked (error code NONE for every partition). There is no
target; the figure says what the Kafka wire's codec costs a commit. Run:
``python -m bench.kafka_commits``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from bench.heartbeat import Blaster, Checker, blasters_for, form_group
from bench.kafka_heartbeat import (
    CORRELATION_ID,
    GROUP,
    KafkaCalls,
    alternate,
    command,
    kafka_answer,
    kafka_frame,
    kafka_member,
)
from bench.processes import ServerProcess
from bench.rawclient import RawConnection, RawMember, close_all, open_connection
from huddle.protocol.framing import ClientCodec
from huddle.protocol.messages import (
    Call,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
)

OFFSET_COMMIT = (8, 8)  # (API key, version)
CREATE_TOPICS = (19, 5)
TOPIC = "kafka-commits-bench"
PARTITIONS = 6
OFFSET = 1_000


async def create_topic(port: int) -> None:
    conn = await open_connection(port, handshake=False)
    try:
        made = await KafkaCalls(conn).call(
            CREATE_TOPICS,
            topics=[
                {
                    "name": TOPIC,
                    "num_partitions": PARTITIONS,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            timeout=10_000,
        )
    finally:
        await close_all([conn])
    if made.topics[0].error_code != 0:
        raise RuntimeError(f"CreateTopics answered {made.topics[0].error_code}")


def kafka_checker() -> Checker:
    def check(_: int, body: bytes) -> str | None:
        try:
            answer = kafka_answer(OFFSET_COMMIT, body)
        except Exception as exc:
            return f"UNDECODABLE ({type(exc).__name__})"
        codes = {int(p.error_code) for t in answer.topics for p in t.partitions}
        return None if codes == {0} else f"errors {sorted(codes)}"

    return check


def huddle_checker() -> Checker:
    codec = ClientCodec()

    def check(_: int, body: bytes) -> str | None:
        response: Any = getattr(codec.decode(body), "response", None)
        if type(response) is not OffsetCommitResponse:
            return type(response).__name__
        codes = {response.error_code} | {
            p.error_code for t in response.topics for p in t.partitions
        }
        return None if codes == {0} else f"errors {sorted(codes)}"

    return check


async def kafka_committers(port: int, members: int, window: int) -> list[Blaster]:
    conns = [await open_connection(port, handshake=False) for _ in range(members)]
    formed = await asyncio.gather(*(kafka_member(KafkaCalls(c)) for c in conns))
    partitions = [
        {
            "partition_index": p,
            "committed_offset": OFFSET + p,
            "committed_leader_epoch": -1,
            "committed_metadata": "",
        }
        for p in range(PARTITIONS)
    ]
    blocks = [
        [
            kafka_frame(
                OFFSET_COMMIT,
                CORRELATION_ID,
                group_id=GROUP,
                generation_id_or_member_epoch=generation,
                member_id=member_id,
                group_instance_id=None,
                topics=[{"name": TOPIC, "partitions": partitions}],
            )
        ]
        for member_id, generation in formed
    ]
    return await blasters_for("kafka", conns, blocks, window, checker=kafka_checker)


async def huddle_committers(group: list[RawMember], window: int) -> list[Blaster]:
    codec = ClientCodec()
    partitions = [OffsetCommitPartition(partition=p, offset=OFFSET + p) for p in range(PARTITIONS)]
    blocks = [
        [
            codec.encode(
                Call(
                    correlation_id=CORRELATION_ID,
                    request=OffsetCommitRequest(
                        group_id=m.settings.group_id,
                        generation_id=m.synced_generation,
                        member_id=m.member_id,
                        topics=[OffsetCommitTopic(name=TOPIC, partitions=partitions)],
                    ),
                )
            )
        ]
        for m in group
    ]
    conns: list[RawConnection] = [m.conn for m in group]
    return await blasters_for("huddle", conns, blocks, window, checker=huddle_checker)


async def compare(args: argparse.Namespace, server: ServerProcess, kafka_port: int) -> list[str]:
    group = await form_group(server.port, args.members, args.members)
    await create_topic(kafka_port)  # the Kafka listener is up by now
    targets = {
        "huddle wire": await huddle_committers(group, args.window),
        "Kafka wire": await kafka_committers(kafka_port, args.members, args.window),
    }
    try:
        results = await alternate(targets, server, args, "commits")
    finally:
        await close_all([b.conn for blasters in targets.values() for b in blasters])
    per_cpu = {k: statistics.median(r.per_cpu for r in v) for k, v in results.items()}
    failed = sum(r.errors + r.lost for v in results.values() for r in v)
    return [
        f"Offset commits per second ({PARTITIONS} partitions each), one huddle serve, "
        f"{args.members} members each on its own connection, window {args.window}, "
        f"{args.hb_seconds:g} s x {args.hb_rounds} rounds per wire, alternating:",
        f"  huddle listener {per_cpu['huddle wire']:>10,.0f} per server CPU-s",
        f"  Kafka listener  {per_cpu['Kafka wire']:>10,.0f} per server CPU-s",
        f"  Kafka / huddle  {per_cpu['Kafka wire'] / per_cpu['huddle wire']:.0%}; "
        f"failed or unanswered: {failed}",
    ]


def main() -> None:
    command(__doc__, compare)


if __name__ == "__main__":
    main()
