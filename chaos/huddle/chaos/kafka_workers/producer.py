"""The records of a chaos run with real Kafka clients: ``python -m
huddle.chaos.kafka_workers.producer --bootstrap HOST:PORT --topic T --partitions N --rate R
--max-seconds S``.

Appends ``rate`` records per second to every partition of the topic (values ``P-I``), a
step every ``TICK_S``, with kafka-python's producer (acks=1, so a record is on the log
before the producer counts it sent). It stops on SIGTERM or SIGINT, or after
``max_seconds``. A send that fails (the coordinator restarting) is logged on stderr and the
producer goes on: the run's consumers only ever see what the log holds, so a record that was
never appended is not one they could lose.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any, Final

from huddle.chaos.kafka_workers.emit import StopFlag

TICK_S: Final = 0.02
CLOSE_S: Final = 5.0


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="producer", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True, help="HOST:PORT of a Kafka listener")
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--rate", type=float, default=50.0, help="records/s per partition")
    p.add_argument("--max-seconds", type=float, default=600.0)
    a = p.parse_args(list(argv))
    if a.partitions < 1 or a.rate <= 0 or a.max_seconds <= 0:
        p.error("--partitions, --rate and --max-seconds must be positive")
    return a


def _failed(error: Exception) -> None:
    print(f"producer: send failed: {error!r}", file=sys.stderr, flush=True)


def run(a: argparse.Namespace) -> int:
    """Produce until stopped; returns how many records were sent (asked, not acknowledged)."""
    from kafka import KafkaProducer

    stop = StopFlag(a.max_seconds)
    producer: Any = KafkaProducer(
        bootstrap_servers=a.bootstrap.split(","),
        acks=1,
        linger_ms=5,
        client_id="huddle-chaos-producer",
    )
    start = time.monotonic()
    sent = 0  # per partition
    try:
        while not stop.stopped:
            due = int((time.monotonic() - start) * a.rate)
            for i in range(sent, due):
                for p in range(a.partitions):
                    future = producer.send(a.topic, value=f"{p}-{i}".encode(), partition=p)
                    future.add_errback(_failed)
            sent = max(sent, due)
            stop.wait(TICK_S)  # pacing the records
    finally:
        producer.close(timeout=CLOSE_S)
    return int(sent * a.partitions)


def main(argv: Sequence[str] | None = None) -> int:
    a = parse(sys.argv[1:] if argv is None else argv)
    with warnings.catch_warnings():
        # kafka-python 3.0.12 loads its schemas with importlib.resources calls that Python
        # 3.11 deprecates: a warning per request, not ours to fix
        warnings.simplefilter("ignore", DeprecationWarning)
        run(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
