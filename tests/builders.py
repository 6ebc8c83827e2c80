"""Builders for assignor tests: partitions from text, subscriptions, groups."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from huddle.client.assignors.base import MemberSubscription
from huddle.protocol.embedded import TopicPartition


def tps(text: str) -> frozenset[TopicPartition]:
    """'t0-0 t1-2' -> {TopicPartition('t0', 0), TopicPartition('t1', 2)}."""
    found = set()
    for word in text.split():
        topic, _, partition = word.rpartition("-")
        found.add(TopicPartition(topic, int(partition)))
    return frozenset(found)


def subscription(
    member_id: str,
    topics: Iterable[str],
    owned: str = "",
    generation: int = -1,
    instance: str | None = None,
    lags: Mapping[str, int] | None = None,
) -> MemberSubscription:
    """A member's subscription; ``owned`` and the keys of ``lags`` as text for ``tps``."""
    return MemberSubscription(
        member_id=member_id,
        topics=frozenset(topics),
        owned=tps(owned),
        generation=generation,
        group_instance_id=instance,
        lags={next(iter(tps(word))): lag for word, lag in (lags or {}).items()},
    )


def group(*members: MemberSubscription) -> dict[str, MemberSubscription]:
    return {m.member_id: m for m in members}
