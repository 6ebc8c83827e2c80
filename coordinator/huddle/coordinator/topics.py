"""Topics: named resource sets with a partition count.

A "topic" may stand for anything a group divides among its members (log partitions,
connector tasks, shards). The coordinator does not know who subscribes to what: any change
is announced to every connection that holds a group member.

Each topic gets an id when it is created (``topic_ids``: a random UUID, new for every
creation, so a topic deleted and created again is told apart from the old one), kept with
it; ``names`` finds a topic by its id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from uuid import UUID

import msgspec
import structlog

from huddle.coordinator.topic_ids import NewTopicId, kafka_text, new_topic_id
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    AlterTopicsRequest,
    AlterTopicsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ErrorResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    Reply,
    Response,
    TopicMetadata,
    TopicResult,
)

log = structlog.get_logger("huddle.topics")

E = ErrorCode
TopicRequest = CreateTopicsRequest | AlterTopicsRequest | DeleteTopicsRequest
# a topic, its partitions (0: deleted), before (0: none), and its id (a new one if created)
_Set = tuple[str, int, int, UUID | None]
_ENCODER = msgspec.msgpack.Encoder()  # as the connection encodes the answer
_LEGAL_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _failed(name: str, code: ErrorCode, message: str) -> TopicResult:
    return TopicResult(name=name, error_code=code, error_message=message)


def name_problem(name: str) -> str | None:
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if not _LEGAL_NAME.fullmatch(name):
        return (
            f"topic name {name!r} is illegal: use 1 to 249 characters from "
            "ASCII letters, digits, '.', '_' and '-'"
        )
    return None


def topics_digest(partitions: Mapping[str, int]) -> int:
    """Every topic's partition count, hashed (63 bits): the same on every node and across
    restarts for the same topics, whatever order they were created in."""
    encoded = msgspec.msgpack.encode(sorted(partitions.items()))
    return int.from_bytes(hashlib.blake2b(encoded, digest_size=8).digest(), "big") >> 1


class TopicRegistry:
    def __init__(self, max_partitions: int, new_id: NewTopicId = new_topic_id) -> None:
        self.partitions: dict[str, int] = {}
        self.ids: dict[str, UUID] = {}  # each topic's id (one restored without: none yet)
        self.names: dict[UUID, str] = {}  # the topic of each id
        self.new_id = new_id
        self.max_partitions = max_partitions
        # The transport's largest answer (``--max-response-bytes``); None: no limit.
        self.max_answer_bytes: int | None = None

    def _count_problem(self, count: int) -> str | None:
        if not 1 <= count <= self.max_partitions:
            return f"partition count {count} is outside [1, {self.max_partitions}]"
        return None

    def change(
        self,
        request: TopicRequest,
        correlation_id: int,
        finish: Callable[[Response], Response] | None = None,
    ) -> tuple[Response, list[TopicMetadata]]:
        """A topic request's answer, and the topics it changed. The answer is worked out
        before anything changes: one over ``max_answer_bytes`` (as the client would get it:
        ``finish`` puts back what its ACLs refused) is MESSAGE_TOO_LARGE, and nothing is
        changed (the answer would otherwise be that error, and the change made)."""
        match request:
            case CreateTopicsRequest():
                response, sets = self._plan_create(request)
            case AlterTopicsRequest():
                response, sets = self._plan_alter(request)
            case DeleteTopicsRequest():
                response, sets = self._plan_delete(request)
        limit = self.max_answer_bytes
        if limit is not None:
            answer = Reply(
                correlation_id=correlation_id,
                response=response if finish is None else finish(response),
            )
            size = len(_ENCODER.encode(answer))
            if size > limit:
                kind = type(request).__struct_config__.tag
                log.warning("topic_change_too_large", request=kind, size=size, limit=limit)
                message = (
                    f"the answer would be {size} bytes, over the limit of {limit} "
                    "(--max-response-bytes): nothing was changed; name fewer topics in one "
                    "request"
                )
                return ErrorResponse(error_code=E.MESSAGE_TOO_LARGE, error_message=message), []
        return response, self._apply(sets)

    def _plan_create(self, req: CreateTopicsRequest) -> tuple[Response, list[_Set]]:
        results: list[TopicResult] = []
        sets: list[_Set] = []
        seen: set[str] = set()
        for spec in req.topics:
            problem = name_problem(spec.name)
            count_problem = self._count_problem(spec.partitions)
            if problem is not None:
                result = _failed(spec.name, E.INVALID_TOPIC_EXCEPTION, problem)
            elif spec.name in seen:
                result = _failed(
                    spec.name,
                    E.INVALID_REQUEST,
                    f"topic {spec.name!r} is named twice in one request",
                )
            elif spec.name in self.partitions:
                result = _failed(
                    spec.name, E.TOPIC_ALREADY_EXISTS, f"topic {spec.name!r} already exists"
                )
            elif count_problem is not None:
                result = _failed(spec.name, E.INVALID_PARTITIONS, count_problem)
            else:
                topic_id = self._unused_id({s[3] for s in sets})
                sets.append((spec.name, spec.partitions, 0, topic_id))
                result = TopicResult(name=spec.name, topic_id=topic_id)
            seen.add(spec.name)
            results.append(result)
        return CreateTopicsResponse(topics=results), sets

    def _plan_alter(self, req: AlterTopicsRequest) -> tuple[Response, list[_Set]]:
        results: list[TopicResult] = []
        sets: list[_Set] = []
        counts = dict(self.partitions)  # as the request's earlier items leave them
        for spec in req.topics:
            count_problem = self._count_problem(spec.partitions)
            old = counts.get(spec.name)
            if old is None:
                result = _failed(spec.name, E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {spec.name!r}")
            elif count_problem is not None:
                result = _failed(spec.name, E.INVALID_PARTITIONS, count_problem)
            else:
                if old != spec.partitions:
                    counts[spec.name] = spec.partitions
                    sets.append((spec.name, spec.partitions, old, None))
                result = TopicResult(name=spec.name)
            results.append(result)
        return AlterTopicsResponse(topics=results), sets

    def _plan_delete(self, req: DeleteTopicsRequest) -> tuple[Response, list[_Set]]:
        results: list[TopicResult] = []
        sets: list[_Set] = []
        gone: set[str] = set()
        for name in req.topics:
            if name not in self.partitions or name in gone:
                results.append(_failed(name, E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}"))
                continue
            gone.add(name)
            sets.append((name, 0, self.partitions[name], None))
            results.append(TopicResult(name=name))
        return DeleteTopicsResponse(topics=results), sets

    def _unused_id(self, taken: set[UUID | None]) -> UUID:
        while True:  # a repeat is all but impossible; a repeat would be two topics' id
            topic_id = self.new_id()
            if topic_id not in self.names and topic_id not in taken:
                return topic_id

    def _apply(self, sets: list[_Set]) -> list[TopicMetadata]:
        changed: list[TopicMetadata] = []
        for name, partitions, old, topic_id in sets:
            if not partitions:
                self.remove(name)
                changed.append(TopicMetadata(name=name, error_code=E.UNKNOWN_TOPIC_OR_PARTITION))
                log.info("topic_deleted", topic=name)
                continue
            self.put(name, partitions, topic_id)
            changed.append(self.metadata(name))
            if old:
                log.info("topic_altered", topic=name, old_partitions=old, partitions=partitions)
            else:
                shown = kafka_text(self.ids[name])
                log.info("topic_created", topic=name, partitions=partitions, topic_id=shown)
        return changed

    def put(self, name: str, partitions: int, topic_id: UUID | None = None) -> None:
        """``name`` has ``partitions`` (above 0) and, if given, the id ``topic_id`` (None:
        it keeps the one it has, if any)."""
        self.partitions[name] = partitions
        if topic_id is not None and self.ids.get(name) != topic_id:
            old = self.ids.get(name)
            if old is not None:
                self.names.pop(old, None)
            self.ids[name] = topic_id
            self.names[topic_id] = name

    def remove(self, name: str) -> bool:
        """``name`` is deleted (its id with it); False if there was no such topic."""
        topic_id = self.ids.pop(name, None)
        if topic_id is not None:
            self.names.pop(topic_id, None)
        return self.partitions.pop(name, None) is not None

    def give_ids(self) -> list[tuple[str, int, UUID]]:
        """Give an id to each topic that has none (restored from a data dir written before
        topics had ids): each topic, its partitions and the id it was given."""
        given = []
        for name in sorted(self.partitions.keys() - self.ids.keys()):
            topic_id = self._unused_id(set())
            self.put(name, self.partitions[name], topic_id)
            given.append((name, self.partitions[name], topic_id))
            log.info("topic_id_given", topic=name, topic_id=kafka_text(topic_id))
        return given

    def describe(self, names: Iterable[str]) -> list[TopicMetadata]:
        return [self.metadata(name) for name in names]

    def metadata(self, name: str) -> TopicMetadata:
        count = self.partitions.get(name)
        if count is None:
            return TopicMetadata(name=name, error_code=E.UNKNOWN_TOPIC_OR_PARTITION)
        return TopicMetadata(name=name, partitions=count, topic_id=self.ids.get(name))

    def list(self, req: ListTopicsRequest) -> ListTopicsResponse:
        names = sorted(self.partitions) if req.topics is None else req.topics
        return ListTopicsResponse(topics=self.describe(names))
