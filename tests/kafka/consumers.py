"""Real Kafka consumers for tests: each in its own thread, polling until stopped, with
its assignment readable at any time."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

from huddle.chaos.kafka_workers.kafka_python_driver import rescue_stranded_join

Partition = tuple[str, int]
log = logging.getLogger(__name__)


class PythonConsumer:
    """A kafka-python ``KafkaConsumer`` subscribed to ``topic`` in ``group``, polling in a
    thread. ``work`` runs queued calls on that thread (the consumer is not thread-safe)."""

    def __init__(self, port: int, group: str, topic: str, **config: Any) -> None:
        self._consumer = KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{port}",
            group_id=group,
            client_id=f"{group}-consumer",
            heartbeat_interval_ms=200,
            session_timeout_ms=6_000,
            fetch_max_wait_ms=100,
            enable_auto_commit=False,
            **config,
        )
        self._consumer.subscribe([topic])
        self.assignment: frozenset[Partition] = frozenset()
        self.records: list[tuple[str, int, int, bytes]] = []  # consumed, in order
        self.failure: BaseException | None = None
        self._calls: list[tuple[Callable[[KafkaConsumer], Any], list[Any], threading.Event]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"consumer-{group}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer = self._consumer
        try:
            while not self._stop.is_set():
                for batch in consumer.poll(timeout_ms=500).values():
                    self.records.extend((r.topic, r.partition, r.offset, r.value) for r in batch)
                # kafka-python 3.0 can leave a leader's rejoin unread (docs/kafka.md, "Client
                # notes"): ask it to rejoin, as the driver does
                if rescue_stranded_join(consumer):
                    log.warning("kafka_python_join_stranded")
                self.assignment = frozenset(
                    (tp.topic, tp.partition) for tp in consumer.assignment()
                )
                while self._calls:
                    call, result, done = self._calls.pop(0)
                    result.append(call(consumer))
                    done.set()
        except BaseException as exc:  # the test reads it
            log.exception("consumer_failed")
            self.failure = exc
        finally:
            consumer.close()  # a clean leave: LeaveGroup

    def work(self, call: Callable[[KafkaConsumer], Any], timeout_s: float = 10.0) -> Any:
        result: list[Any] = []
        done = threading.Event()
        self._calls.append((call, result, done))
        if not done.wait(timeout_s):
            raise AssertionError("the consumer's thread did not run the call")
        return result[0]

    def commit(self, partition: Partition, offset: int) -> None:
        tp = TopicPartition(*partition)
        self.work(lambda c: c.commit({tp: OffsetAndMetadata(offset, "", -1)}))

    def position(self, partition: Partition) -> tuple[int | None, int]:
        """The committed offset and the position the consumer fetches from."""
        tp = TopicPartition(*partition)
        committed, position = self.work(lambda c: (c.committed(tp), c.position(tp)))
        return committed, int(position)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError("the consumer did not stop")
