"""Checks of one argument's value, for every constructor and method of the client library
(``huddle.client.arguments`` checks whole sets of them): a bad one is an
``InvalidArgumentError`` (also a ``ValueError``; of the wrong kind, an
``InvalidArgumentTypeError``, also a ``TypeError``), raised where it is given."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence

from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import InvalidArgumentError, InvalidArgumentTypeError

MAX_INT32 = 2**31 - 1  # Kafka's int settings (session.timeout.ms, ...) and int32 fields
MAX_INT64 = 2**63 - 1  # an offset, as Kafka's


def require_type(name: str, value: object, kind: type | tuple[type, ...], what: str) -> None:
    if not isinstance(value, kind):
        raise InvalidArgumentTypeError(f"{name} must be {what}, not {type(value).__name__}")


def require_number(
    name: str, value: object, *, positive: bool, whole: bool = False, most: int | None = None
) -> None:
    """``value`` is a finite number (not a bool; with ``whole``, an int), more than 0 if
    ``positive``, else at least 0, and at most ``most`` if given."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentTypeError(f"{name} must be a number, not {type(value).__name__}")
    if whole and not isinstance(value, int):
        raise InvalidArgumentTypeError(f"{name} must be a whole number (an int), not {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgumentError(f"{name} must be a finite number, not {value!r}")
    if value < 0 or (positive and value == 0):
        least = "more than 0" if positive else "0 or more"
        raise InvalidArgumentError(f"{name} must be {least}, not {value!r}")
    if most is not None and value > most:
        raise InvalidArgumentError(f"{name} must be at most {most}, not {value!r}")


def _is_partition(tp: object) -> bool:
    return (
        type(tp) is TopicPartition
        and type(tp[0]) is str
        and type(tp[1]) is int
        and 0 <= tp[1] <= MAX_INT32
    )


def checked_offsets(offsets: object) -> list[tuple[TopicPartition, int]]:
    """``Member.commit``'s offsets, as a list: a mapping of ``TopicPartition`` to an offset,
    a whole number from 0 to 2**63 - 1 (Kafka's). One pass of plain comparisons: about
    0.1 us a partition, little next to building the request."""
    if not isinstance(offsets, Mapping):
        raise InvalidArgumentTypeError(
            f"offsets must be a mapping of TopicPartition to offset, not {type(offsets).__name__}"
        )
    items = list(offsets.items())
    for tp, offset in items:
        if (
            type(offset) is int
            and 0 <= offset <= MAX_INT64
            and type(tp) is TopicPartition
            and type(tp[0]) is str
            and type(tp[1]) is int
            and 0 <= tp[1] <= MAX_INT32
        ):
            continue
        if not _is_partition(tp):
            raise InvalidArgumentTypeError(
                f"offsets must be keyed by TopicPartition(topic, partition), not {tp!r}"
            )
        require_number(f"the offset of {tp}", offset, positive=False, whole=True, most=MAX_INT64)
    return items


def checked_partitions(partitions: object) -> list[TopicPartition]:
    """``Member.committed``'s partitions, each once, in order: ``TopicPartition`` values."""
    if isinstance(partitions, str | bytes) or not isinstance(partitions, Iterable):
        raise InvalidArgumentTypeError(
            f"partitions must be an iterable of TopicPartition, not {type(partitions).__name__}"
        )
    wanted = list(partitions)
    for tp in wanted:
        if not _is_partition(tp):
            raise InvalidArgumentTypeError(
                f"partitions must be TopicPartition(topic, partition) values, not {tp!r}"
            )
    return list(dict.fromkeys(wanted))


def checked_topic_names(topics: Sequence[str]) -> list[str]:
    """A list of topic names (non-empty strings; one string is not a list of them)."""
    if isinstance(topics, str) or not all(isinstance(t, str) and t for t in topics):
        raise InvalidArgumentError("topics is a list of topic names (non-empty strings)")
    return list(topics)


def checked_pattern(
    topics: Sequence[str] | None, pattern: str | re.Pattern[str] | None
) -> str | None:
    """The pattern of a subscription that is topics or a pattern (one of them), as the
    regular expression a consumer-protocol coordinator matches (RE2: a whole-name match,
    Kafka's ``SubscriptionPattern``); None: topics."""
    if (topics is None) == (pattern is None) or topics == []:
        raise InvalidArgumentError("give topics or a pattern (one of them)")
    if isinstance(pattern, re.Pattern):
        return pattern.pattern
    if pattern is not None and (not isinstance(pattern, str) or not pattern):
        raise InvalidArgumentError("pattern is a non-empty str or a compiled re.Pattern")
    return pattern
