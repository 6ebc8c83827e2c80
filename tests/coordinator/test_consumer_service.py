"""The server's consumer-protocol service, without a wire: the ACLs of a heartbeat (as on
the Kafka wire), and which members it names to be told that their next heartbeat would be
answered differently (each once per change)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, cast

from huddle.coordinator.consumer import HeartbeatRequest
from huddle.coordinator.consumer_service import ConsumerService
from huddle.coordinator.effects import Peer
from huddle.coordinator.security.acls import Authorizer, Operation, ResourceType
from huddle.coordinator.storage.kept_consumer_groups import ConsumerKept
from huddle.coordinator.storage.records import Record
from huddle.protocol.errors import ErrorCode


class Denies:
    def __init__(self, *denied: tuple[Operation, ResourceType, str]) -> None:
        self.denied = set(denied)

    def allowed(
        self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str
    ) -> bool:
        return (op, rtype, name) not in self.denied


class Host:
    def __init__(self, authorizer: Any = None) -> None:
        self.authorizer = cast("Authorizer | None", authorizer)
        self.topic_partitions: Mapping[str, int] = {"t": 4, "secret": 1}
        self.topic_names: Mapping[uuid.UUID, str] = {}
        self.topic_ids: Mapping[str, uuid.UUID] = {}
        self.topics_version = 1
        self.consumer_kept = ConsumerKept()
        self.kept: list[Record] = []

    def now_ms(self) -> float:
        return 0.0

    def classic_members(self, group_id: str) -> int:
        return 0

    def classic_snapshot(self, group_id: str) -> tuple[ErrorCode, str]:
        return ErrorCode.GROUP_ID_NOT_FOUND, "no classic group"

    def drop_classic(self, group_id: str) -> None:
        raise AssertionError("no classic group to drop")

    def to_classic(self, group_id: str, group: object, clients: object) -> None:
        raise AssertionError("no classic member to downgrade to")

    def keep(self, records: list[Record], *, outside: bool) -> None:
        self.kept += records

    def not_served(self, group_id: str) -> tuple[ErrorCode, str] | None:
        return None


PEER = Peer(conn_id=1, principal="User:alice")


def _join(member_id: str, *topics: str) -> HeartbeatRequest:
    return HeartbeatRequest(
        "g", member_id, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=topics, owned={}
    )


async def test_a_heartbeat_needs_read_on_the_group_and_describe_on_each_topic() -> None:
    no_group = ConsumerService(Host(Denies((Operation.READ, ResourceType.GROUP, "g"))))
    answer = no_group.heartbeat(_join("a", "t"), PEER)
    assert answer.error == ErrorCode.GROUP_AUTHORIZATION_FAILED
    no_topic = ConsumerService(Host(Denies((Operation.DESCRIBE, ResourceType.TOPIC, "secret"))))
    answer = no_topic.heartbeat(_join("a", "t", "secret"), PEER)
    assert answer.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert "g" not in no_topic.core.groups
    assert no_topic.heartbeat(_join("a", "t"), PEER).error == ErrorCode.NONE
    no_topic.close()


async def test_each_member_is_told_once_per_change() -> None:
    service = ConsumerService(Host())
    told: list[tuple[str, int]] = []
    service.watchers.append(lambda group, member, epoch: told.append((member, epoch)))
    a = service.heartbeat(_join("a", "t"), PEER)
    assert a.member_epoch == 1
    assert told == []  # a is reconciled: nothing to tell
    service.heartbeat(_join("b", "t"), PEER)
    assert told == [("a", 2)]  # a must revoke: told once
    service.heartbeat(_join("c", "t"), PEER)  # the target moves again: a and b told
    assert sorted(told[1:]) == [("a", 3), ("b", 3)]
    service.close()
