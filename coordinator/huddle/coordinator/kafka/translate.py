"""What every translation between a Kafka request and the core's requests is made of.

A translation reads one decoded Kafka request (kio's dataclass of its version: a field a
version lacks is read as its default, see ``get``) and returns a ``Plan``: the core's
requests it stands for (none, one, or one per group or key of a batched request) and how
the core's answers, in the same order, become the Kafka response's values (named as kio
names them; ``schemas.build`` keeps those the version has). A refusal made before the core
(an ACL, the data dir loading) comes back as an ``ErrorResponse`` in place of an answer:
every translation answers it with that error code where the version has one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol
from uuid import UUID

from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import ErrorResponse, Request, Response

Values = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Encoded:
    """An answer encoded already: the response's body (``metadata_encoding``)."""

    body: bytes


Answer = Callable[[Sequence[Response]], Values | Encoded]


@dataclass(frozen=True, slots=True)
class Plan:
    calls: Sequence[Request]
    answer: Answer


class Context(Protocol):
    """What the translations need of the listener."""

    @property
    def broker(self) -> tuple[int, str, int]:
        """This listener's broker: node id, advertised host and port."""

    def brokers(self) -> Sequence[tuple[int, str, int]]:
        """Every live broker (this one alone without a cluster), by node id."""

    def coordinator(self, node_id: str) -> tuple[int, str, int] | None:
        """The broker of the huddle node ``node_id``, if it has a Kafka listener."""

    def leaders(self, topic: str, count: int) -> Sequence[int]:
        """The leader of each of ``topic``'s ``count`` partitions (``leaders``)."""

    @property
    def topics(self) -> Mapping[str, int]:
        """huddle's topic registry: each topic's partition count."""

    @property
    def topic_names(self) -> Mapping[UUID, str]:
        """huddle's topic registry: the topic of each topic id."""

    @property
    def topic_ids(self) -> Mapping[str, UUID]:
        """huddle's topic registry: each topic's id."""

    @property
    def max_response_bytes(self) -> int:
        """The largest answer sent (``--max-response-bytes``)."""

    def topic_changed(self, topic: str) -> None:
        """The registry changed ``topic`` (created, resized, deleted): the log follows."""

    def consumer_offsets(
        self, group_id: str, member_id: str | None, epoch: int, version: int, *, commit: bool
    ) -> int | None:
        """An offset request's member and epoch checked against a consumer-protocol group
        (``consumer_groups.ConsumerGroups.check_offsets``): None if ``group_id`` is none,
        0 if they pass, else the error code."""


def get(request: Any, name: str, default: Any = None) -> Any:
    """A field of ``request``, or ``default`` when its version has none."""
    return getattr(request, name, default)


def code(response: Response) -> int:
    return int(response.error_code)


def refused(response: Response) -> ErrorResponse | None:
    """The refusal that stands in for the core's answer, if it is one."""
    return response if type(response) is ErrorResponse else None


def message(response: Response) -> str | None:
    return response.error_message or None if response.error_code else None


NO_ERROR = int(ErrorCode.NONE)
UNKNOWN_TOPIC_ID: Final = 100  # Kafka's (KIP-516): an id no topic has
