"""The aiokafka consumer driver: ``python -m huddle.chaos.kafka_workers.aiokafka_driver
--bootstrap HOST:PORT --group G --topic T [...]`` (flags: ``options``; lines: the package's
docstring). Strategies: range, roundrobin (aiokafka has no cooperative protocol); static
membership."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from huddle.chaos.kafka_workers.emit import Partition, Reporter
from huddle.chaos.kafka_workers.options import (
    RANGE,
    ROUNDROBIN,
    DriverOptions,
    consumer_settings,
    parse,
)

CLIENT = "aiokafka"
STRATEGIES = (RANGE, ROUNDROBIN)
POLL_MS = 200


def _tps(partitions: Any) -> list[Partition]:
    return [(tp.topic, tp.partition) for tp in partitions]


def _membership(consumer: Any) -> tuple[str | None, int]:
    """The consumer's member id (None before it has one) and generation. aiokafka 0.14 tells
    them only through its private group coordinator (no public accessor; its assignors'
    ``on_assignment`` is given neither): the driver's one reach into aiokafka's objects."""
    coordinator = consumer._coordinator
    return coordinator.member_id or None, coordinator.generation


async def run(options: DriverOptions, report: Reporter) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.abc import ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    assignor = {RANGE: RangePartitionAssignor, ROUNDROBIN: RoundRobinPartitionAssignor}
    consumer = AIOKafkaConsumer(
        **consumer_settings(options, CLIENT),
        rebalance_timeout_ms=options.rebalance_ms,
        partition_assignment_strategy=(assignor[options.strategy],),
    )

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            report.revoked(_tps(revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            report.joined(*_membership(consumer))
            report.assigned(_tps(assigned))

    report.started(strategy=options.strategy, instance_id=options.instance_id)
    consumer.subscribe([options.topic], listener=Listener())
    await consumer.start()
    deadline = time.monotonic() + options.max_seconds
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=POLL_MS)
            member_id, generation = _membership(consumer)
            if generation >= 0:  # a generation that called no listener is told here
                report.joined(member_id, generation)
            positions = {}
            for tp, records in batches.items():
                if records:
                    positions[tp] = records[-1].offset + 1
                    report.read(tp.topic, tp.partition, records[0].offset, positions[tp])
            if options.commit and positions:
                triples = [(tp.topic, tp.partition, o) for tp, o in positions.items()]
                try:
                    await consumer.commit(positions)
                except Exception as exc:  # fenced, rebalancing: say so and go on
                    report.commit_failed(repr(exc), triples)
                else:
                    report.committed(triples)
    finally:
        await consumer.stop()
        report.left()


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv, CLIENT, STRATEGIES)
    asyncio.run(run(options, Reporter(CLIENT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
