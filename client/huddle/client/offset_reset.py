"""Planning an offset reset, as ``kafka-consumer-groups --reset-offsets`` does: which
partitions (``--topic T`` or ``T:0,2``), and where to (``--to-earliest``, ``--to-offset N``,
``--shift-by N``). Pure: the caller reads the topics and committed offsets and commits the
plan (``Admin.set_offsets``).

huddle keeps no records, only the offsets members commit, so *earliest* is offset 0, and a
shift of a partition with nothing committed starts from 0; no offset goes below 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import InvalidArgumentError

ResetKind = Literal["to-earliest", "to-offset", "shift-by"]


@dataclass(frozen=True, slots=True)
class Reset:
    kind: ResetKind
    value: int = 0

    def __post_init__(self) -> None:
        if self.kind == "to-offset" and self.value < 0:
            raise InvalidArgumentError(f"--to-offset must be 0 or more, not {self.value}")


@dataclass(frozen=True, slots=True)
class PlannedOffset:
    partition: TopicPartition
    current: int | None  # committed now; None: nothing
    new: int


def parse_topic(spec: str) -> tuple[str, list[int] | None]:
    """``"orders"`` -> every partition of orders; ``"orders:0,2"`` -> partitions 0 and 2.
    ValueError for a malformed spec."""
    topic, sep, rest = spec.partition(":")
    if not topic:
        raise InvalidArgumentError(f"--topic {spec!r}: no topic name (TOPIC or TOPIC:P,P)")
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(p) for p in rest.split(",") if p.strip()})
    except ValueError:
        raise InvalidArgumentError(
            f"--topic {spec!r}: partitions are numbers (TOPIC:0,1)"
        ) from None
    if not partitions or partitions[0] < 0:
        raise InvalidArgumentError(f"--topic {spec!r}: name partitions 0 or more (TOPIC:0,1)")
    return topic, partitions


def chosen_partitions(specs: Sequence[str], topics: Mapping[str, int]) -> list[TopicPartition]:
    """The partitions ``--topic`` specs name, checked against the topics' partition
    counts; ValueError for an unknown topic or partition."""
    chosen: set[TopicPartition] = set()
    for spec in specs:
        topic, partitions = parse_topic(spec)
        count = topics.get(topic)
        if count is None:
            raise InvalidArgumentError(f"no topic {topic!r}")
        if partitions is None:
            partitions = list(range(count))
        beyond = [p for p in partitions if p >= count]
        if beyond:
            raise InvalidArgumentError(f"topic {topic!r} has {count} partitions: no {beyond[0]}")
        chosen.update(TopicPartition(topic, p) for p in partitions)
    return sorted(chosen)


def plan(
    reset: Reset, partitions: Sequence[TopicPartition], current: Mapping[TopicPartition, int]
) -> list[PlannedOffset]:
    planned = []
    for tp in sorted(partitions):
        now = current.get(tp)
        if reset.kind == "to-earliest":
            new = 0
        elif reset.kind == "to-offset":
            new = reset.value
        else:
            new = max((now or 0) + reset.value, 0)
        planned.append(PlannedOffset(tp, now, new))
    return planned
