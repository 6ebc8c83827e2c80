"""The ACLs on the log's APIs, which the Kafka wire answers itself (the other APIs go
through the core, which screens them: ``huddle.coordinator.security.access``).

Kafka's table: Produce needs WRITE on each topic, Fetch READ, ListOffsets DESCRIBE (READ,
WRITE, DELETE and ALTER imply it). Each topic refused is answered on each of its
partitions with TOPIC_AUTHORIZATION_FAILED (29); the others are served as usual. A Fetch
with a topic refused does not wait for records (Kafka answers errors at once).
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, Final, NamedTuple

from huddle.coordinator.effects import Peer
from huddle.coordinator.kafka import schemas
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.security.acls import Authorizer, Operation, ResourceType
from huddle.protocol.errors import ErrorCode

_REFUSED: Final = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


class _Shape(NamedTuple):
    """Where a request names its topics and partitions, and where its answer does."""

    operation: Operation
    topics: str  # the request's list of topics
    name: str  # a topic's name, in the request
    partitions: str  # a topic's partitions, in the request
    partition_index: str  # a partition's index, in the request
    answers: str  # the response's list of topics
    answer_name: str
    answer_partitions: str
    refusal: Callable[[int], Mapping[str, Any]]  # a partition's answer, refused


SHAPES: Final[dict[int, _Shape]] = {
    Api.PRODUCE: _Shape(
        Operation.WRITE,
        "topic_data",
        "name",
        "partition_data",
        "index",
        "responses",
        "name",
        "partition_responses",
        lambda i: {"index": i, "error_code": _REFUSED, "base_offset": -1, "record_errors": ()},
    ),
    Api.FETCH: _Shape(
        Operation.READ,
        "topics",
        "topic",
        "partitions",
        "partition",
        "responses",
        "topic",
        "partitions",
        lambda i: {
            "partition_index": i,
            "error_code": _REFUSED,
            "high_watermark": -1,
            "aborted_transactions": None,
            "records": None,
        },
    ),
    Api.LIST_OFFSETS: _Shape(
        Operation.DESCRIBE,
        "topics",
        "name",
        "partitions",
        "partition_index",
        "topics",
        "name",
        "partitions",
        lambda i: {"partition_index": i, "error_code": _REFUSED, "timestamp": -1, "offset": -1},
    ),
}

Refused = list[tuple[str, list[int]]]  # topics refused, with their partitions


def screen(auth: Authorizer, peer: Peer, api_key: int, request: Any) -> tuple[Any, Refused]:
    """The request with only the topics the principal may use, and the others."""
    shape = SHAPES[api_key]
    allowed, refused = [], []
    for topic in getattr(request, shape.topics):
        name = getattr(topic, shape.name)
        if auth.allowed(peer.principal, peer.host, shape.operation, ResourceType.TOPIC, name):
            allowed.append(topic)
            continue
        parts = [getattr(p, shape.partition_index) for p in getattr(topic, shape.partitions)]
        refused.append((name, parts))
    if not refused:
        return request, refused
    screened = dataclasses.replace(request, **{shape.topics: tuple(allowed)})
    if api_key == Api.FETCH:  # answered at once, with its refusals
        screened = dataclasses.replace(screened, max_wait=datetime.timedelta(0))
    return screened, refused


def put_back(api_key: int, version: int, response: Any, refused: Refused) -> Any:
    """``response`` with the refused topics' answers added."""
    if not refused:
        return response
    shape = SHAPES[api_key]
    entry = entry_class(api_key, version)
    added = tuple(
        schemas.build(
            entry,
            {
                shape.answer_name: name,
                shape.answer_partitions: [shape.refusal(i) for i in parts],
            },
        )
        for name, parts in refused
    )
    answers = getattr(response, shape.answers)
    return dataclasses.replace(response, **{shape.answers: (*answers, *added)})


@cache
def entry_class(api_key: int, version: int) -> Any:
    cls = schemas.response_class(api_key, version)
    hint = typing.get_type_hints(cls)[SHAPES[api_key].answers]
    return typing.get_args(hint)[0]
