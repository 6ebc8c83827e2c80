"""What keeping the Kafka listener's small log in the data dir costs: Produce throughput.

In one process, on one event loop, ``--producers`` producers each send Produce requests
(acks=-1, one batch of ``--records`` records of ``--value-bytes`` each, to one of
``--partitions`` partitions) one after the other, each waiting for its answer: through
``kafka_log.handlers.produce`` and, when the store says so, ``waiting.kept`` (what the
Kafka listener runs; the wire's framing and codec are not measured). Three stores: memory
only, a data dir, a data dir with ``--fsync``. Reported: Produce requests per second and
MB/s of batches, the median of ``--rounds`` rounds of ``--seconds`` each, and the CPU.
Run: ``python -m bench.kafka_log``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import io
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kio.index import load_payload_module
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_batch
from kio.static.constants import EntityType
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from bench.common import cpu_model, quiet_logs
from huddle.coordinator.kafka_log import handlers, waiting
from huddle.coordinator.kafka_log.disk import LogDisk
from huddle.coordinator.kafka_log.shapes import PRODUCE, make
from huddle.coordinator.kafka_log.store import LogStore

VERSION = 9


def one_batch(records: int, value_bytes: int) -> bytes:
    now = TZAwareMicros.parse(datetime.datetime.now(datetime.UTC))
    new = NewRecordBatch(
        producer_id=i64(-1),
        producer_epoch=i16(-1),
        base_sequence=i32(-1),
        attributes=i16(0),
        records=tuple(
            Record(
                attributes=i8(0),
                timestamp=now,
                offset=i64(index),
                key=None,
                value=b"v" * value_bytes,
                headers=(),
            )
            for index in range(records)
        ),
    )
    buffer = io.BytesIO()
    write_batch(buffer, new)
    return buffer.getvalue()


def produce(partition: int, data: bytes) -> Any:
    module = load_payload_module(PRODUCE, VERSION, EntityType.request)
    parts = (make(module, "PartitionProduceData", index=partition, records=data),)
    topic = make(module, "TopicProduceData", name="bench", partition_data=parts)
    return make(
        module,
        "ProduceRequest",
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(topic,),
    )


async def _round(store: LogStore, requests: list[Any], producers: int, seconds: float) -> int:
    done = 0
    until = time.perf_counter() + seconds

    async def producer(index: int) -> None:
        nonlocal done
        request = requests[index % len(requests)]
        while time.perf_counter() < until:
            answer = handlers.produce(store, request, VERSION)
            if store.unkept:
                answer = await waiting.kept(store, answer)  # type: ignore[arg-type]
            else:
                await asyncio.sleep(0)  # let the others in, as a socket read would
            done += 1

    await asyncio.gather(*(producer(index) for index in range(producers)))
    return done


def run(args: argparse.Namespace) -> None:
    data = one_batch(args.records, args.value_bytes)
    requests = [produce(partition, data) for partition in range(args.partitions)]
    registry = {"bench": args.partitions}
    stores: dict[str, Callable[[Path], LogStore]] = {
        "memory only": lambda _: LogStore(registry.get),
        "--data-dir": lambda d: LogStore(registry.get, disk=LogDisk.open(d)),
        "--data-dir --fsync": lambda d: LogStore(registry.get, disk=LogDisk.open(d, fsync=True)),
    }
    print(
        f"Produce acks=-1, {args.producers} producers one request in flight each, "
        f"{args.partitions} partitions, one batch of {args.records} x {args.value_bytes} B "
        f"({len(data)} B) a request; median of {args.rounds} rounds of {args.seconds} s; "
        f"CPU: {cpu_model()}"
    )
    for name, make_store in stores.items():
        rates = []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="huddle-bench-log-") as directory:
                store = make_store(Path(directory))
                count = asyncio.run(_round(store, requests, args.producers, args.seconds))
                store.close()
            rates.append(count / args.seconds)
        rate = statistics.median(rates)
        print(f"{name:>20}: {rate:10,.0f} produces/s  {rate * len(data) / 1e6:8.1f} MB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    quiet_logs()
    run(parser.parse_args())


if __name__ == "__main__":
    main()
