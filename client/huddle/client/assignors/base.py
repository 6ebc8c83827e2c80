"""What an assignor is: a pure function from the group's subscriptions to an assignment.

The leader decodes every member's ``Subscription`` into a ``MemberSubscription``, calls the
chosen assignor's ``assign`` with the partition count of every subscribed topic, and sends
each member its ``MemberAssignment``. Assignors hold no state between rounds: everything
they know comes in the subscriptions (owned partitions and the generation they were owned
in, user data).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar

from huddle.client.assignors._rules import CLAIM_RULES, ClaimRules
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import InvalidArgumentError


class RebalanceProtocol(IntEnum):
    """EAGER revokes everything before every rebalance; COOPERATIVE revokes only what moves."""

    EAGER = 0
    COOPERATIVE = 1


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    member_id: str
    topics: frozenset[str]
    owned: frozenset[TopicPartition] = frozenset()
    generation: int = -1  # the generation in which ``owned`` was owned; -1: none
    group_instance_id: str | None = None
    user_data: bytes = b""
    # KIP-441: lag of the member's local state per task (absent: no local state)
    lags: Mapping[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    partitions: frozenset[TopicPartition] = frozenset()
    revoked: frozenset[TopicPartition] = frozenset()
    scheduled_rebalance_delay_ms: int = 0
    user_data: bytes = b""
    standby: frozenset[TopicPartition] = frozenset()  # KIP-441: keep state warm, don't process
    warmup: frozenset[TopicPartition] = frozenset()  # KIP-441: catch up, then take over


def monotonic_ms() -> float:
    return time.monotonic() * 1000


GroupAssignment = dict[str, MemberAssignment]


class Assignor(ABC):
    """Subclasses set ``name`` and ``supported_protocols`` and implement ``assign``.

    Most assignors are pure functions of their arguments. Those that must remember across
    rounds (a running scheduled-rebalance delay, the previous assignment, when a probing
    rebalance is due) keep that in the instance, which lives as long as its member, and
    read time only through ``self.now_ms``. A member's core sets ``now_ms`` to return the
    time the core was last given, so an assignor never reads a clock of its own when a member
    runs it; an instance therefore belongs to one member (give each member its own).
    Assignors that honour previous owners settle their claims by ``claim_rules``.
    """

    name: ClassVar[str]
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)
    now_ms: Callable[[], float] = staticmethod(monotonic_ms)
    claim_rules: ClaimRules = CLAIM_RULES
    # whether it needs what only huddle's embedded format carries (task lags, revoked
    # partitions, a scheduled rebalance delay, standbys): such a one refuses Kafka's
    needs_huddle_format: ClassVar[bool] = False

    def subscription_user_data(
        self, topics: frozenset[str], owned: frozenset[TopicPartition]
    ) -> bytes:
        """Extra bytes this assignor wants in the member's subscription."""
        return b""

    @abstractmethod
    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> GroupAssignment:
        """Every member id in ``subscriptions`` gets an entry. Topics absent from
        ``partitions_per_topic`` do not exist (yet) and are assigned to nobody."""

    def on_assignment(  # noqa: B027 - an optional hook
        self, assignment: MemberAssignment, generation: int
    ) -> None:
        """Called on every member with its own assignment, before it is applied."""


@dataclass
class AssignorRegistry:
    by_name: dict[str, type[Assignor]] = field(default_factory=dict)

    def register(self, cls: type[Assignor]) -> type[Assignor]:
        self.by_name[cls.name] = cls
        return cls

    def create(self, name: str) -> Assignor:
        try:
            return self.by_name[name]()
        except KeyError:
            known = ", ".join(sorted(self.by_name))
            raise InvalidArgumentError(f"unknown assignor {name!r}; known: {known}") from None


ASSIGNORS = AssignorRegistry()
