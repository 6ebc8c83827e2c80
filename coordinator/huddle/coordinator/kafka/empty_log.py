"""ListOffsets and Fetch over an empty log, so that Kafka consumers can poll.

Until the listener keeps record batches (``huddle.coordinator.kafka_log``), every
partition of huddle's topic registry is an empty log: its start and end are offset 0, and
a Fetch finds nothing. A Fetch then waits its ``max_wait_ms`` before it is answered, as a
broker with nothing new does, so that a polling consumer does not spin. A topic or
partition the registry does not hold is UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from huddle.coordinator.kafka import schemas
from huddle.coordinator.kafka.translate import Context, Plan, Values
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import Response

_MAX_WAIT_MS: Final = 30_000  # a Fetch is answered within this, whatever it asks


def _known(topics: Mapping[str, int], name: str, partition: int) -> int:
    count = topics.get(name)
    if count is None or not 0 <= partition < count:
        return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return 0


def list_offsets(req: Any, version: int, ctx: Context) -> Plan:
    known = dict(ctx.topics)

    def answer(parts: Sequence[Response]) -> Values:
        return {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": _known(known, t.name, p.partition_index),
                            "timestamp": -1,
                            "offset": 0,
                            "leader_epoch": 0,
                        }
                        for p in t.partitions
                    ],
                }
                for t in req.topics
            ]
        }

    return Plan([], answer)


def fetch(req: Any, version: int, ctx: Context) -> Plan:
    known = dict(ctx.topics)

    def answer(parts: Sequence[Response]) -> Values:
        return {
            "error_code": 0,
            "session_id": 0,  # no fetch session: every Fetch names its partitions
            "responses": [
                {
                    "topic": t.topic,
                    "partitions": [
                        {
                            "partition_index": p.partition,
                            "error_code": _known(known, t.topic, p.partition),
                            "high_watermark": 0,
                            "last_stable_offset": 0,
                            "log_start_offset": 0,
                            "aborted_transactions": None,
                            "preferred_read_replica": -1,
                            "records": b"",  # not null: kafka-python reads its length
                        }
                        for p in t.partitions
                    ],
                }
                for t in req.topics
            ],
        }

    wait = min(max(schemas.milliseconds(req.max_wait), 0), _MAX_WAIT_MS)
    return Plan([], answer, wait_ms=wait)
