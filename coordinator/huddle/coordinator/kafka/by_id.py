"""Kafka requests that name topics by id (KIP-516): Fetch v13+, here.

A topic's id is the one huddle gave it at its creation (``huddle.coordinator.topic_ids``),
which Metadata v10+ answers with. A Fetch of v13 or later names each topic by that id:
``by_name`` turns it into a request of topic names that the rest of the way (the ACLs, the
partitions another node leads, the log) reads as it reads a v12 one, and ``FetchById``
turns the log's v12 answer back into the version asked for, each topic named by its id.
A topic whose id is not known here (never created, or deleted: a topic created again has
another id) is answered UNKNOWN_TOPIC_ID for each of its partitions, before anything else
is checked, as Kafka's ``KafkaApis.handleFetchRequest`` answers it.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any, Final
from uuid import UUID

from kio.schema.errors import ErrorCode

from huddle.coordinator.kafka_log.shapes import FETCH, build, response

FETCH_BY_ID_VERSIONS: Final = range(13, 19)  # kio's newest is 18 (Kafka 4.1's)
FETCH_BY_ID_FROM: Final = FETCH_BY_ID_VERSIONS[0]
BY_NAME: Final = FETCH_BY_ID_FROM - 1  # the version the log answers a Fetch by id in
_UNKNOWN: Final = ErrorCode.unknown_topic_id


@dataclasses.dataclass(frozen=True, slots=True)
class Named:
    """A topic of a Fetch by id, named (the fields the log, the ACLs and the leaders read)."""

    topic: str
    partitions: tuple[Any, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class FetchById:
    """How a Fetch by id of ``version`` is answered from the log's answer by name."""

    version: int
    asked: tuple[tuple[UUID, str | None, tuple[int, ...]], ...]  # (id, its topic, partitions)

    def answer(self, by_name: Any) -> Any:
        """The log's v12 answer as the version asked for: each topic by its id, in the
        order asked, unknown ids answered UNKNOWN_TOPIC_ID."""
        answered: dict[str, list[Any]] = {}
        for entry in by_name.responses:
            answered.setdefault(entry.topic, []).extend(entry.partitions)
        ids = {name: topic_id for topic_id, name, _ in self.asked if name is not None}
        topics, done = [], set()
        for topic_id, name, indexes in self.asked:
            if name is None:
                parts = [self._partition(_UNKNOWN_VALUES | {"partition_index": i}) for i in indexes]
                topics.append(self._topic(topic_id, parts))
            elif name not in done:
                done.add(name)
                parts = [self._partition(_fields(p)) for p in answered.pop(name, ())]
                topics.append(self._topic(topic_id, parts))
        for name, rest in answered.items():  # none: every topic answered was asked
            parts = [self._partition(_fields(p)) for p in rest]
            topics.append(self._topic(ids.get(name, UUID(int=0)), parts))
        return response(
            FETCH,
            self.version,
            "FetchResponse",
            throttle_time=by_name.throttle_time,
            error_code=by_name.error_code,
            session_id=by_name.session_id,
            responses=tuple(topics),
        )

    def _partition(self, values: Mapping[str, Any]) -> Any:
        return build(FETCH, self.version, "PartitionData", **values)

    def _topic(self, topic_id: UUID, partitions: list[Any]) -> Any:
        return build(
            FETCH,
            self.version,
            "FetchableTopicResponse",
            topic_id=topic_id,
            partitions=tuple(partitions),
        )


_UNKNOWN_VALUES: Final[dict[str, Any]] = {
    "error_code": _UNKNOWN,
    "high_watermark": -1,
    "last_stable_offset": -1,
    "log_start_offset": -1,
    "aborted_transactions": (),
    "preferred_read_replica": -1,
    "records": b"",
}


def _fields(partition: Any) -> dict[str, Any]:
    """A partition's answer's plain fields (its nested tagged ones keep their defaults:
    the log sets none)."""
    values = {}
    for field in dataclasses.fields(partition):
        value = getattr(partition, field.name)
        if not dataclasses.is_dataclass(value):
            values[field.name] = value
    return values


def by_name(request: Any, version: int, names: Mapping[UUID, str]) -> tuple[Any, FetchById]:
    """A Fetch by id as one by name (the topics whose id is not known left out), and how
    its answer is made."""
    asked, kept = [], []
    for topic in request.topics:
        name = names.get(topic.topic_id)
        indexes = tuple(p.partition for p in topic.partitions)
        asked.append((topic.topic_id, name, indexes))
        if name is not None:
            kept.append(Named(name, tuple(topic.partitions)))
    named = dataclasses.replace(request, topics=tuple(kept))
    if len(kept) < len(asked):  # answered at once, with its errors (as Kafka answers)
        named = dataclasses.replace(named, max_wait=datetime.timedelta(0))
    return named, FetchById(version, tuple(asked))
