"""Produce, Fetch and ListOffsets in a cluster: only a partition's leader answers for it.

Each node keeps the log of the partitions it leads (``leaders``: the same leader on every
node). A partition this node does not lead is taken out of the request before the log
sees it, and answered NOT_LEADER_OR_FOLLOWER (6), which Kafka's clients take as a cue to
read Metadata again and go to the leader it names. A Fetch with such a partition does not
wait for records (Kafka answers errors at once); a Produce with ``acks=0`` closes the
connection, as Kafka does (its client has no answer to read). A partition of a topic the
registry does not hold is left to the log, which answers UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode

from huddle.coordinator.kafka import schemas
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.log_access import SHAPES, Refused, entry_class

NOT_LEADER: Final = int(ErrorCode.not_leader_or_follower)

Leads = Callable[[str, int], bool]  # whether this node leads (topic, partition)


def screen(api_key: int, request: Any, leads: Leads) -> tuple[Any, Refused]:
    """The request with only the partitions this node leads, and the others."""
    shape = SHAPES[api_key]
    kept, others = [], []
    for topic in getattr(request, shape.topics):
        name = getattr(topic, shape.name)
        parts = getattr(topic, shape.partitions)
        indexes = [getattr(p, shape.partition_index) for p in parts]
        mine = [leads(name, i) for i in indexes]
        if not all(mine):
            others.append((name, [i for i, m in zip(indexes, mine, strict=True) if not m]))
            led = [p for p, m in zip(parts, mine, strict=True) if m]
            if led:
                kept.append(dataclasses.replace(topic, **{shape.partitions: tuple(led)}))
        else:
            kept.append(topic)
    if not others:
        return request, others
    screened = dataclasses.replace(request, **{shape.topics: tuple(kept)})
    if api_key == Api.FETCH:
        screened = dataclasses.replace(screened, max_wait=datetime.timedelta(0))
    return screened, others


def put_back(api_key: int, version: int, response: Any, others: Refused) -> Any:
    """``response`` with the partitions this node does not lead answered
    NOT_LEADER_OR_FOLLOWER, each in its topic's entry (one entry per topic)."""
    if not others:
        return response
    shape = SHAPES[api_key]
    entry = entry_class(api_key, version)
    answers = list(getattr(response, shape.answers))
    where = {getattr(a, shape.answer_name): i for i, a in enumerate(answers)}
    for name, parts in others:
        added = schemas.build(
            entry,
            {
                shape.answer_name: name,
                shape.answer_partitions: [
                    {**shape.refusal(i), "error_code": NOT_LEADER} for i in parts
                ],
            },
        )
        at = where.get(name)
        if at is None:
            where[name] = len(answers)
            answers.append(added)
            continue
        had = getattr(answers[at], shape.answer_partitions)
        joined = (*had, *getattr(added, shape.answer_partitions))
        answers[at] = dataclasses.replace(answers[at], **{shape.answer_partitions: joined})
    return dataclasses.replace(response, **{shape.answers: tuple(answers)})
