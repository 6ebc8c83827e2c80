"""``huddle serve --data-dir --kafka-port``: what kafka-python produced is still there
after a restart, from offset 0 (with and without ``--fsync``, whose Produce is answered
once its batches are on the disk)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.helpers import DEADLINE_S, serve_process, wait_until

_RECORDS = [b"one", b"two", b"three"]


async def _kafka_port(events: list[dict[str, Any]]) -> int:
    await wait_until(
        lambda: any(e["event"] == "kafka_listening" for e in events), what="the Kafka listener"
    )
    return int(next(e["port"] for e in events if e["event"] == "kafka_listening"))


def _produce(port: int) -> list[int]:
    bootstrap = f"127.0.0.1:{port}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("kept", num_partitions=2, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks=1)
    sent = [producer.send("kept", value, partition=1) for value in _RECORDS]
    producer.flush(timeout=DEADLINE_S)
    offsets = [future.get(timeout=DEADLINE_S).offset for future in sent]
    producer.close()
    return offsets


def _consume(port: int) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", enable_auto_commit=False)
    partition = TopicPartition("kept", 1)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    read: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(read) < len(_RECORDS) and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            read += [(record.offset, record.value) for record in batch]
    consumer.close()
    return read


@pytest.mark.parametrize("fsync", [False, True], ids=["page-cache", "fsync"])
async def test_the_log_is_kept_across_a_restart(tmp_path: Path, fsync: bool) -> None:
    flags = ["--data-dir", str(tmp_path), "--kafka-port", "0", *(["--fsync"] if fsync else [])]
    async with serve_process(*flags) as (process, _, events):
        offsets = await asyncio.to_thread(_produce, await _kafka_port(events))
        process.terminate()
        assert await asyncio.wait_for(process.wait(), DEADLINE_S) == 0
    assert offsets == [0, 1, 2]
    assert {"format", "kept-1"} <= {p.name for p in (tmp_path / "kafka-log").iterdir()}
    async with serve_process(*flags) as (_, _, events):
        read = await asyncio.to_thread(_consume, await _kafka_port(events))
    assert read == list(enumerate(_RECORDS))
