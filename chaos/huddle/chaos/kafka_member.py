"""One chaos member run by a real Kafka client: ``python -m huddle.chaos.kafka_member
SETTINGS_JSON``.

``SETTINGS_JSON`` is a ``huddle.chaos.worker.WorkerSettings`` whose ``client`` names the
Kafka client (kafka-python, aiokafka or confluent-kafka) and whose ``bootstrap`` is the
coordinator's Kafka listener; ``protocol`` is the client's assignment strategy (range,
roundrobin, cooperative-sticky where the client has it), or ``consumer``: confluent-kafka's
``group.protocol=consumer``, where the coordinator assigns. The process runs that client's
consumer driver (``huddle.chaos.kafka_workers``) in itself, so a SIGKILL or a SIGSTOP of
this process hits the client, and writes ``events/<NAME>.jsonl`` with the same events as
huddle's own worker (``huddle.chaos.events``), through ``EventSink``:

- ``joined`` for each new generation, with the member id (``leader`` is always false: the
  clients do not say); under the ``consumer`` protocol (KIP-848) there is no group-wide
  generation and ``generation`` is the member's epoch, which librdkafka tells in the same
  place;
- ``assigned`` / ``revoked`` / ``lost`` from the client's rebalance callbacks;
- ``processed``: each batch of records the consumer read from a partition, with their
  Kafka offsets (the records are real: the run's producer appends them to huddle's log);
- ``committed``: one per partition of each commit of the positions after a batch,
  accepted or refused (e.g. fenced after a rebalance).

SIGTERM or SIGINT close the consumer (revoke, commit, leave); SIGKILL ends it mid-line.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import structlog

from huddle.chaos import events as ev
from huddle.chaos.clients import KAFKA_CLIENTS
from huddle.chaos.events import EventLog, events_dir
from huddle.chaos.kafka_workers import launch
from huddle.chaos.kafka_workers.emit import Partition, Reporter
from huddle.chaos.kafka_workers.options import DriverOptions
from huddle.chaos.worker import WorkerSettings, parse_settings, started_event
from huddle.logs import configure_logging
from huddle.protocol.errors import InvalidArgumentError

log = structlog.get_logger("huddle.chaos.kafka_member")


PartitionEvent = ev.Processed | ev.Committed  # the events of one partition's offset


def _pairs(partitions: Iterable[Partition]) -> list[tuple[str, int]]:
    return [(t, p) for t, p in sorted(partitions)]


class EventSink(Reporter):
    """A driver's reporter that writes chaos events instead of printing driver lines.

    It keeps the member id and generation the client last told (``joined``) and stamps every
    event with them, as huddle's worker does with its ``Member``'s. Callbacks of any thread
    may call it."""

    def __init__(self, client: str, events: EventLog) -> None:
        super().__init__(client)
        self.events = events
        self.member_id = ""
        self.generation = -1
        self._write_lock = threading.Lock()

    def _write(self, event: ev.Event) -> None:
        with self._write_lock:
            self.events.write(event)

    def emit(self, event: str, **fields: Any) -> None:
        """A driver line (started, left, error, ...): to this process's log, not stdout."""
        if event == "error":
            log.warning("client_error", client=self.client, **fields)
        else:
            log.info(f"client_{event}", client=self.client, **fields)

    def joined(self, member_id: str | None, generation: int | None, **extra: Any) -> None:
        if member_id:
            self.member_id = member_id
        if generation is None or generation < 0 or generation == self.generation:
            return  # between generations, not told, or told already
        self.generation = generation
        self._write(ev.Joined(member_id=self.member_id, generation=generation, leader=False))

    def assigned(self, partitions: Iterable[Partition]) -> None:
        added = set(partitions)
        self.owned |= added
        self._write(
            ev.Assigned(
                member_id=self.member_id, generation=self.generation, partitions=_pairs(added)
            )
        )

    def _take(self, event: str, taken: set[Partition]) -> None:
        self.owned -= taken
        kind = ev.Revoked if event == "revoked" else ev.Lost
        self._write(
            kind(member_id=self.member_id, generation=self.generation, partitions=_pairs(taken))
        )

    def _at(
        self, kind: type[PartitionEvent], topic: str, partition: int, offset: int, **fields: Any
    ) -> None:
        """One event of a partition's offset, stamped with the member id and generation."""
        self._write(
            kind(
                member_id=self.member_id,
                generation=self.generation,
                topic=topic,
                partition=partition,
                offset=offset,
                **fields,
            )
        )

    def read(self, topic: str, partition: int, offset: int, end: int) -> None:
        self._at(ev.Processed, topic, partition, offset, count=end - offset)

    def committed(self, offsets: Iterable[tuple[str, int, int]]) -> None:
        self._commits(offsets, None)

    def commit_failed(self, error: str, offsets: Iterable[tuple[str, int, int]] = ()) -> None:
        self._commits(offsets, error)

    def _commits(self, offsets: Iterable[tuple[str, int, int]], error: str | None) -> None:
        for topic, partition, offset in sorted(offsets):
            self._at(ev.Committed, topic, partition, offset, accepted=error is None, error=error)


def driver_options(args: WorkerSettings) -> DriverOptions:
    """The driver's options for these worker settings (InvalidArgumentError if the client
    cannot run them)."""
    if args.client not in KAFKA_CLIENTS:
        raise InvalidArgumentError(
            f"client {args.client!r}: this worker runs one of {', '.join(KAFKA_CLIENTS)}"
        )
    client = launch.CLIENTS[args.client]
    if args.protocol not in client.strategies:
        raise InvalidArgumentError(
            f"client {args.client} has no protocol {args.protocol!r}: "
            f"one of {', '.join(client.strategies)}"
        )
    return DriverOptions(
        bootstrap=args.bootstrap,
        group=args.group,
        topic=args.topic,
        strategy=args.protocol,
        session_ms=args.session_timeout_ms,
        heartbeat_ms=args.heartbeat_interval_ms,
        rebalance_ms=args.rebalance_timeout_ms,
        instance_id=args.instance_id,
        client_id=args.name,
        max_seconds=args.max_seconds,
    )


def run(args: WorkerSettings, options: DriverOptions) -> None:
    """The client's driver until a signal or ``max_seconds``, writing the event file."""
    module = launch.CLIENTS[args.client].module
    assert module is not None
    driver = importlib.import_module(module)
    with EventLog(events_dir(Path(args.run_dir)) / f"{args.name}.jsonl", args.name) as events:
        events.write(started_event(args))
        started = time.monotonic()
        outcome = driver.run(options, EventSink(args.client, events))
        if inspect.iscoroutine(outcome):  # aiokafka's driver is a coroutine
            asyncio.run(outcome)
        # the driver closes on SIGTERM or SIGINT, or by itself after max_seconds
        late = time.monotonic() - started >= args.max_seconds
        events.write(ev.ProcessStopped(reason="deadline" if late else "signal"))


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if len(words) != 1 or words[0] in ("-h", "--help"):
        usage = "usage: python -m huddle.chaos.kafka_member SETTINGS_JSON"
        print(f"{usage}\n\n{__doc__}", file=sys.stderr)
        return 2
    try:
        args = parse_settings(words[0])
        options = driver_options(args)
    except ValueError as exc:
        print(f"huddle.chaos.kafka_member: bad settings: {exc}", file=sys.stderr)
        return 2
    configure_logging("json", "info", stream=sys.stderr)
    structlog.contextvars.bind_contextvars(proc=args.name)
    run(args, options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
