"""The confluent-kafka (librdkafka) consumer driver: ``python -m
huddle.chaos.kafka_workers.confluent_driver --bootstrap HOST:PORT --group G --topic T [...]``
(flags: ``options``; lines: the package's docstring). Strategies: range, roundrobin,
cooperative-sticky, and ``consumer``: KIP-848's protocol (``group.protocol=consumer``, the
coordinator assigns; session timeout and heartbeat interval are the coordinator's), and
``consumer-deferred``/``consumer-paced``, which ask for that server assignor
(``group.remote.assignor``); static
membership. librdkafka tells the generation only inside its
serialized group metadata (``generation``); where that cannot be read, ``joined`` carries a
null generation."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from huddle.chaos.kafka_workers.emit import Partition, Reporter, StopFlag
from huddle.chaos.kafka_workers.options import (
    CONSUMER_PROTOCOL,
    CONSUMER_PROTOCOLS,
    COOPERATIVE_STICKY,
    RANGE,
    ROUNDROBIN,
    DriverOptions,
    is_consumer,
    parse,
)

CLIENT = "confluent-kafka"
STRATEGIES = (RANGE, ROUNDROBIN, COOPERATIVE_STICKY, *CONSUMER_PROTOCOLS)
POLL_S = 0.05  # consume() waits for BATCH records or this long: how long a read record waits
BATCH = 500


CGMD_MAGIC = b"CGMDv2:"  # librdkafka's serialized consumer group metadata, version 2


def generation(consumer: Consumer) -> int | None:
    """The consumer's generation, or None (between generations, or not readable).

    confluent-kafka has no accessor for it; ``consumer_group_metadata()`` gives librdkafka's
    serialization (``rd_kafka_consumer_group_metadata_write``): the magic ``CGMDv2:``, then
    the generation as a 32-bit integer in the machine's byte order, then the ids."""
    raw = consumer.consumer_group_metadata()
    if not isinstance(raw, bytes) or not raw.startswith(CGMD_MAGIC):
        return None
    field = raw[len(CGMD_MAGIC) : len(CGMD_MAGIC) + 4]
    if len(field) != 4:
        return None
    value = int.from_bytes(field, sys.byteorder, signed=True)
    return value if value >= 0 else None


def _tps(partitions: list[TopicPartition]) -> list[Partition]:
    return [(tp.topic, tp.partition) for tp in partitions]


def config(options: DriverOptions) -> dict[str, str | int | bool]:
    conf: dict[str, str | int | bool] = {
        "bootstrap.servers": options.bootstrap,
        "group.id": options.group,
        "client.id": options.client_id or CLIENT,
        "session.timeout.ms": options.session_ms,
        "heartbeat.interval.ms": options.heartbeat_ms,
        "max.poll.interval.ms": max(options.rebalance_ms, options.session_ms),
        "partition.assignment.strategy": options.strategy,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if is_consumer(options.strategy):  # the coordinator's settings and assignor
        for classic in ("session.timeout.ms", "heartbeat.interval.ms"):
            del conf[classic]
        del conf["partition.assignment.strategy"]
        conf["group.protocol"] = CONSUMER_PROTOCOL
        assignor = CONSUMER_PROTOCOLS[options.strategy]
        if assignor is not None:  # else: the coordinator's default
            conf["group.remote.assignor"] = assignor
    if options.instance_id is not None:
        conf["group.instance.id"] = options.instance_id
    return conf


def _commit(consumer: Consumer, report: Reporter, positions: dict[Partition, int]) -> None:
    offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
    try:
        result = consumer.commit(offsets=offsets, asynchronous=False)
    except Exception as exc:  # fenced, rebalancing: say so and go on
        report.commit_failed(repr(exc), ((t, p, o) for (t, p), o in positions.items()))
        return
    failed = [tp for tp in result if tp.error is not None]
    if failed:
        tried = ((tp.topic, tp.partition, tp.offset) for tp in failed)
        report.commit_failed(repr(failed[0].error), tried)
    report.committed((tp.topic, tp.partition, tp.offset) for tp in result if tp.error is None)


def run(options: DriverOptions, report: Reporter) -> None:
    stop = StopFlag(options.max_seconds)
    consumer = Consumer(config(options))

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        report.joined(c.memberid() or None, generation(c))
        report.assigned(_tps(partitions))

    def on_revoke(_: Consumer, partitions: list[TopicPartition]) -> None:
        report.revoked(_tps(partitions))

    def on_lost(_: Consumer, partitions: list[TopicPartition]) -> None:
        report.lost(_tps(partitions))

    report.started(strategy=options.strategy, instance_id=options.instance_id)
    consumer.subscribe([options.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    try:
        while not stop.stopped:
            messages: list[Message] = consumer.consume(BATCH, timeout=POLL_S)
            current = generation(consumer)
            if current is not None:  # a generation that called no callback is told here
                report.joined(consumer.memberid() or None, current)
            firsts: dict[Partition, int] = {}
            positions: dict[Partition, int] = {}
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        report.error(str(error))
                    continue
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                if topic is None or partition is None or offset is None:
                    continue
                firsts.setdefault((topic, partition), offset)
                positions[(topic, partition)] = offset + 1
            for (topic, partition), first in firsts.items():
                report.read(topic, partition, first, positions[(topic, partition)])
            if options.commit and positions:
                _commit(consumer, report, positions)
    finally:
        consumer.close()
        report.left()


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv, CLIENT, STRATEGIES)
    run(options, Reporter(CLIENT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
