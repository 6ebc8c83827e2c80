"""What the log's handlers read from kio's request classes, and how they build responses.

kio generates one class per API version. The handlers read requests through the Protocols
here (every version they serve has these fields: mypy checks kio's classes against them)
and build each response from the version's own module, passing the fields that version has
(a field a version lacks is left out; one it adds and the handler does not set keeps kio's
default).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import timedelta
from functools import cache
from types import ModuleType
from typing import Protocol, cast

from kio.index import load_payload_module
from kio.static.constants import EntityType
from kio.static.protocol import ResponsePayload

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2


class ProducePartition(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def records(self) -> bytes | None: ...


class ProduceTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partition_data(self) -> Sequence[ProducePartition]: ...


class ProduceRequest(Protocol):
    @property
    def transactional_id(self) -> str | None: ...
    @property
    def acks(self) -> int: ...
    @property
    def topic_data(self) -> Sequence[ProduceTopic]: ...


class FetchPartition(Protocol):
    @property
    def partition(self) -> int: ...
    @property
    def fetch_offset(self) -> int: ...
    @property
    def partition_max_bytes(self) -> int: ...


class FetchTopic(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def partitions(self) -> Sequence[FetchPartition]: ...


class FetchRequest(Protocol):
    @property
    def max_wait(self) -> timedelta: ...
    @property
    def min_bytes(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def topics(self) -> Sequence[FetchTopic]: ...


class ListOffsetsPartition(Protocol):
    @property
    def partition_index(self) -> int: ...
    @property
    def timestamp(self) -> int: ...


class ListOffsetsTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> Sequence[ListOffsetsPartition]: ...


class ListOffsetsRequest(Protocol):
    @property
    def topics(self) -> Sequence[ListOffsetsTopic]: ...


@cache
def _responses(api_key: int, version: int) -> ModuleType:
    return load_payload_module(api_key, version, EntityType.response)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(field.name for field in dataclasses.fields(cls))


def make(module: ModuleType, name: str, /, **values: object) -> object:
    """An instance of the class ``name`` of a kio module (one API version's request or
    response), with those of ``values`` that the version has."""
    cls = getattr(module, name)
    names = _field_names(cls)
    return cls(**{key: value for key, value in values.items() if key in names})


def build(api_key: int, version: int, name: str, /, **values: object) -> object:
    """``make`` for a class of the API version's response module."""
    return make(_responses(api_key, version), name, **values)


def response(api_key: int, version: int, name: str, /, **values: object) -> ResponsePayload:
    """The response payload itself (``build`` for the top-level class)."""
    return cast(ResponsePayload, build(api_key, version, name, **values))
