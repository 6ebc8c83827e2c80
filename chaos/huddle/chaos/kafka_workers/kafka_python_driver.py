"""The kafka-python consumer driver: ``python -m huddle.chaos.kafka_workers.kafka_python_driver
--bootstrap HOST:PORT --group G --topic T [...]`` (flags: ``options``; lines: the package's
docstring). Strategies: range, roundrobin, cooperative-sticky (KIP-429); static membership.

kafka-python 3.0 (3.0.12, and its main branch in August 2026) can strand a rejoin: when its
leader rejoins because a subscribed topic's partitions changed and ``poll`` gives up while
the SyncGroup is in flight, the assignment it made has already taken the new metadata as the
assigned one, so ``need_rejoin()`` turns false and no later ``poll`` reads the finished join
(``join_group_async`` keeps it in ``_join_task`` only for a ``poll`` that rejoins). The
consumer then never applies its assignment and never heartbeats again (heartbeats stay off
during a join), and the coordinator removes it when its session expires. The driver notices
that state after each ``poll`` (``rescue_stranded_join``), says so in an ``error`` line and
asks for a rejoin (the Java client's ``rejoinNeededOrPending`` counts a pending join, and
its metadata check asks for the rejoin, so it has no such state). docs/kafka.md, "Client
notes", has the sequence.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Final

from huddle.chaos.kafka_workers.emit import Partition, Reporter, StopFlag
from huddle.chaos.kafka_workers.options import (
    COOPERATIVE_STICKY,
    RANGE,
    ROUNDROBIN,
    DriverOptions,
    consumer_settings,
    parse,
)

CLIENT = "kafka-python"
STRATEGIES = (RANGE, ROUNDROBIN, COOPERATIVE_STICKY)
POLL_MS = 200


def _assignor(name: str) -> Any:
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    return {
        RANGE: RangePartitionAssignor,
        ROUNDROBIN: RoundRobinPartitionAssignor,
        COOPERATIVE_STICKY: CooperativeStickyAssignor,
    }[name]


def _tps(partitions: Any) -> list[Partition]:
    return [(tp.topic, tp.partition) for tp in partitions]


STRANDED: Final = (
    "kafka-python left a finished JoinGroup/SyncGroup unread (need_rejoin() is false, "
    "heartbeats are off): asking it to rejoin"
)


def rescue_stranded_join(consumer: Any) -> bool:
    """Whether ``consumer``'s coordinator holds a finished join that no ``poll`` will read
    (see the module's docstring); if so, it is asked to rejoin, which the next ``poll`` does."""
    coordinator: Any = getattr(consumer, "_coordinator", None)
    task = getattr(coordinator, "_join_task", None)
    if task is None or not task.is_done or coordinator.need_rejoin():
        return False
    coordinator.request_rejoin()
    return True


def run(options: DriverOptions, report: Reporter) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata
    from kafka.consumer.subscription_state import ConsumerRebalanceListener

    stop = StopFlag(options.max_seconds)
    consumer = KafkaConsumer(
        **consumer_settings(options, CLIENT),
        partition_assignment_strategy=[_assignor(options.strategy)],
    )

    def note_generation() -> None:
        meta = consumer.group_metadata()
        if meta.generation_id >= 0:  # -1: between generations (a join under way)
            report.joined(meta.member_id or None, meta.generation_id)

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            report.revoked(_tps(revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            note_generation()
            report.assigned(_tps(assigned))

        def on_partitions_lost(self, lost: Any) -> None:
            report.lost(_tps(lost))

    report.started(strategy=options.strategy, instance_id=options.instance_id)
    consumer.subscribe([options.topic], listener=Listener())
    try:
        while not stop.stopped:
            batches = consumer.poll(timeout_ms=POLL_MS)
            if rescue_stranded_join(consumer):
                report.error(STRANDED)
            # a generation without new partitions (KIP-429's second round) calls no listener
            note_generation()
            positions = {}
            for tp, records in batches.items():
                if records:
                    positions[tp] = records[-1].offset + 1
                    report.read(tp.topic, tp.partition, records[0].offset, positions[tp])
            if options.commit and positions:
                commit = {tp: OffsetAndMetadata(o, "", -1) for tp, o in positions.items()}
                triples = [(tp.topic, tp.partition, o) for tp, o in positions.items()]
                try:
                    consumer.commit(commit)
                except Exception as exc:  # fenced, rebalancing: say so and go on
                    report.commit_failed(repr(exc), triples)
                else:
                    report.committed(triples)
    finally:
        consumer.close()
        report.left()


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv, CLIENT, STRATEGIES)
    run(options, Reporter(CLIENT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
