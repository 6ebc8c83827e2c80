"""Topics: named resource sets with a partition count.

A "topic" may stand for anything a group divides among its members (log partitions,
connector tasks, shards). The coordinator does not know who subscribes to what: any change
is announced to every connection that holds a group member.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

import msgspec
import structlog

from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    AlterTopicsRequest,
    AlterTopicsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    TopicMetadata,
    TopicResult,
)

log = structlog.get_logger("huddle.topics")

E = ErrorCode
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
    def __init__(self, max_partitions: int) -> None:
        self.partitions: dict[str, int] = {}
        self.max_partitions = max_partitions

    def _count_problem(self, count: int) -> str | None:
        if not 1 <= count <= self.max_partitions:
            return f"partition count {count} is outside [1, {self.max_partitions}]"
        return None

    def create(self, req: CreateTopicsRequest) -> tuple[CreateTopicsResponse, list[TopicMetadata]]:
        results: list[TopicResult] = []
        changed: list[TopicMetadata] = []
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
                self.partitions[spec.name] = spec.partitions
                changed.append(TopicMetadata(name=spec.name, partitions=spec.partitions))
                log.info("topic_created", topic=spec.name, partitions=spec.partitions)
                result = TopicResult(name=spec.name)
            seen.add(spec.name)
            results.append(result)
        return CreateTopicsResponse(topics=results), changed

    def alter(self, req: AlterTopicsRequest) -> tuple[AlterTopicsResponse, list[TopicMetadata]]:
        results: list[TopicResult] = []
        changed: list[TopicMetadata] = []
        for spec in req.topics:
            count_problem = self._count_problem(spec.partitions)
            old = self.partitions.get(spec.name)
            if old is None:
                result = _failed(spec.name, E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {spec.name!r}")
            elif count_problem is not None:
                result = _failed(spec.name, E.INVALID_PARTITIONS, count_problem)
            else:
                if old != spec.partitions:
                    self.partitions[spec.name] = spec.partitions
                    changed.append(TopicMetadata(name=spec.name, partitions=spec.partitions))
                    log.info(
                        "topic_altered",
                        topic=spec.name,
                        old_partitions=old,
                        partitions=spec.partitions,
                    )
                result = TopicResult(name=spec.name)
            results.append(result)
        return AlterTopicsResponse(topics=results), changed

    def delete(self, req: DeleteTopicsRequest) -> tuple[DeleteTopicsResponse, list[TopicMetadata]]:
        results: list[TopicResult] = []
        changed: list[TopicMetadata] = []
        for name in req.topics:
            if self.partitions.pop(name, None) is None:
                results.append(_failed(name, E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}"))
                continue
            changed.append(TopicMetadata(name=name, error_code=E.UNKNOWN_TOPIC_OR_PARTITION))
            log.info("topic_deleted", topic=name)
            results.append(TopicResult(name=name))
        return DeleteTopicsResponse(topics=results), changed

    def describe(self, names: Iterable[str]) -> list[TopicMetadata]:
        return [self.metadata(name) for name in names]

    def metadata(self, name: str) -> TopicMetadata:
        count = self.partitions.get(name)
        if count is None:
            return TopicMetadata(name=name, error_code=E.UNKNOWN_TOPIC_OR_PARTITION)
        return TopicMetadata(name=name, partitions=count)

    def list(self, req: ListTopicsRequest) -> ListTopicsResponse:
        names = sorted(self.partitions) if req.topics is None else req.topics
        return ListTopicsResponse(topics=self.describe(names))
