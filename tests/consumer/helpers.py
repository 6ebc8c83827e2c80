"""Shared by the consumer-protocol core's tests: requests written short, and a client that
acts on its answers the way Kafka's consumer does."""

from __future__ import annotations

from dataclasses import dataclass, field

from huddle.coordinator.consumer import (
    Assignment,
    ConsumerCoordinator,
    HeartbeatAnswer,
    HeartbeatRequest,
    TopicView,
)
from huddle.protocol.errors import ErrorCode

GROUP = "g"
TOPICS = TopicView({"a": 6, "b": 3})


def join(
    member_id: str,
    topics: tuple[str, ...] | None = ("a", "b"),
    *,
    instance_id: str | None = None,
    regex: str | None = None,
    assignor: str | None = None,
    rebalance_timeout_ms: int = 10_000,
) -> HeartbeatRequest:
    return HeartbeatRequest(
        GROUP,
        member_id,
        0,
        instance_id=instance_id,
        rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=topics,
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        owned={},
    )


def beat(
    member_id: str,
    epoch: int,
    owned: Assignment | None,
    *,
    instance_id: str | None = None,
) -> HeartbeatRequest:
    return HeartbeatRequest(GROUP, member_id, epoch, instance_id=instance_id, owned=owned)


def flat(assignment: Assignment | None) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in (assignment or {}).items() for p in ps}


@dataclass
class Client:
    """One member as its process sees things: its epoch and what it owns. It revokes what an
    answer takes away and owns what it gives, at once (its callbacks are instant)."""

    member_id: str
    topics: tuple[str, ...] = ("a", "b")
    instance_id: str | None = None
    assignor: str | None = None
    epoch: int = 0
    owned: dict[str, frozenset[int]] = field(default_factory=dict)
    joined: bool = False
    last: HeartbeatAnswer | None = None

    def request(self) -> HeartbeatRequest:
        if not self.joined:
            return join(
                self.member_id, self.topics, instance_id=self.instance_id, assignor=self.assignor
            )
        return beat(self.member_id, self.epoch, dict(self.owned), instance_id=self.instance_id)

    def heartbeat(
        self, coordinator: ConsumerCoordinator, now: float, topics: TopicView = TOPICS
    ) -> HeartbeatAnswer:
        answer = coordinator.heartbeat(self.request(), now, topics)
        self.apply(answer)
        return answer

    def apply(self, answer: HeartbeatAnswer) -> None:
        self.last = answer
        if answer.error in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            self.lose_all()
            return
        if answer.error is not ErrorCode.NONE:
            return
        self.joined = True
        self.epoch = answer.member_epoch
        if answer.assignment is not None:
            self.owned = {t: ps for t, ps in answer.assignment.items() if ps}

    def lose_all(self) -> None:
        """Fenced: it gives up everything and rejoins with epoch 0."""
        self.owned = {}
        self.epoch = 0
        self.joined = False
