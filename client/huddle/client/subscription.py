"""What a member subscribes to: a list of topics, or every topic a pattern matches.

A pattern subscription follows the topics the coordinator has: it is matched against the
whole topic list before each join (``ListTopics``) and kept current between rebalances by
the coordinator's ``TopicMetadataChanged`` notices (created, altered, deleted). A topic
name matches when the pattern matches all of it, as Kafka's ``subscribe(Pattern)`` does.
Topics announced deleted are remembered, so the member can give their partitions up before
it joins (KIP-429) instead of in a follow-up rebalance.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from huddle.protocol.errors import InvalidArgumentError, InvalidArgumentTypeError


class Subscription:
    def __init__(self, topics: Sequence[str] | None, pattern: str | re.Pattern[str] | None) -> None:
        if (topics is None) == (pattern is None):
            raise InvalidArgumentError("give topics or a pattern (one of them)")
        self.pattern: re.Pattern[str] | None = None
        self.topics: list[str] = []
        self.deleted: set[str] = set()
        self._matched: set[str] = set()  # topics the coordinator has that the pattern matches
        if pattern is not None:
            if not isinstance(pattern, str | re.Pattern):
                raise InvalidArgumentTypeError(
                    f"pattern is a str or a compiled re.Pattern, not {type(pattern).__name__}"
                )
            try:
                self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            except re.error as exc:
                raise InvalidArgumentError(
                    f"the pattern {pattern!r} is not a regular expression: {exc}"
                ) from None
        else:
            self.topics = checked_topics(topics)

    def use(self, topics: Sequence[str]) -> list[str]:
        """A fixed list from now on (any pattern is dropped); the list, checked."""
        self.topics = checked_topics(topics)
        self.pattern = None
        self._matched.clear()
        return self.topics

    def current(self) -> list[str]:
        """The topics to subscribe to now."""
        return sorted(self._matched) if self.pattern is not None else list(self.topics)

    def listed(self, names: Iterable[str]) -> None:
        """Every topic the coordinator has (a ``ListTopics`` answer)."""
        if self.pattern is not None:
            self._matched = {name for name in names if self.pattern.fullmatch(name)}

    def changed(self, counts: Mapping[str, int]) -> None:
        """A ``TopicMetadataChanged`` notice: topic -> partitions (0: deleted)."""
        for name, partitions in counts.items():
            if partitions > 0:
                self.deleted.discard(name)
            else:
                self.deleted.add(name)
            if self.pattern is not None and self.pattern.fullmatch(name):
                if partitions > 0:
                    self._matched.add(name)
                else:
                    self._matched.discard(name)

    def gone(self) -> frozenset[str]:
        """Topics announced deleted (and not created again since)."""
        return frozenset(self.deleted)


def checked_topics(topics: Sequence[str] | None) -> list[str]:
    if topics is None or isinstance(topics, str):
        raise InvalidArgumentTypeError("topics is a sequence of topic names, not one string")
    if not isinstance(topics, Iterable):
        raise InvalidArgumentTypeError(
            f"topics is a sequence of topic names, not {type(topics).__name__}"
        )
    names = list(topics)
    if any(not isinstance(name, str) or not name for name in names):
        raise InvalidArgumentError(f"topic names must be non-empty strings: {names!r}")
    return names
