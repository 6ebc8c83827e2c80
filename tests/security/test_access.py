"""What each request needs of the ACLs, on the sans-IO core: allowed and denied, for GROUP,
TOPIC and CLUSTER resources, LITERAL and PREFIXED patterns, ALLOW and DENY."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from huddle.coordinator.config import GroupConfig
from huddle.coordinator.core import Coordinator
from huddle.coordinator.effects import Peer
from huddle.coordinator.security.acls import (
    CLUSTER_NAME,
    Acl,
    AclError,
    Authorizer,
    Operation,
    ResourceType,
)
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    AlterTopicsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListTopicsRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchTopic,
    Protocol,
    Reply,
    Request,
    SyncGroupRequest,
    TopicSpec,
)
from tests.security_setup import acl

Op, R = Operation, ResourceType
E = ErrorCode
ALICE = Peer(1, "c", "10.0.0.1", "User:alice")
ADMIN = Peer(2, "c", "10.0.0.2", "User:admin")


def core_with(*acls: Acl) -> Coordinator:
    core = Coordinator(GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100))
    core.authorizer = Authorizer(acls, super_users=["User:admin"])
    for name in ("t", "orders-eu", "orders-us", "secret"):
        core.handle(ADMIN, 0, CreateTopicsRequest(topics=[TopicSpec(name=name, partitions=2)]), 0)
    return core


def ask(core: Coordinator, request: Request, peer: Peer = ALICE) -> Any:
    """The response to ``request`` (typed loosely: each test reads its own type's fields)."""
    out = core.handle(peer, 7, request, 1.0)
    replies = [f for c, f in out if c == peer.conn_id and isinstance(f, Reply)]
    assert replies, out
    return replies[0].response


def code(response: Any) -> int:
    return int(response.error_code)


def join(group: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        member_id="m",
        protocol_type="consumer",
        protocols=[Protocol(name="range")],
        session_timeout_ms=1000,
    )


GROUP_REQUESTS: list[tuple[str, Any, Operation]] = [
    ("join", join, Op.READ),
    ("sync", lambda g: SyncGroupRequest(group_id=g, generation_id=1, member_id="m"), Op.READ),
    ("heartbeat", lambda g: HeartbeatRequest(group_id=g, generation_id=1, member_id="m"), Op.READ),
    (
        "leave",
        lambda g: LeaveGroupRequest(group_id=g, members=[MemberIdentity(member_id="m")]),
        Op.READ,
    ),
    (
        "commit",
        lambda g: OffsetCommitRequest(
            group_id=g,
            topics=[
                OffsetCommitTopic(
                    name="t", partitions=[OffsetCommitPartition(partition=0, offset=1)]
                )
            ],
        ),
        Op.READ,
    ),
    ("fetch", lambda g: OffsetFetchRequest(group_id=g), Op.DESCRIBE),
    ("find", lambda g: FindCoordinatorRequest(group_id=g), Op.DESCRIBE),
]


@pytest.mark.parametrize(
    ("kind", "make", "operation"), GROUP_REQUESTS, ids=[r[0] for r in GROUP_REQUESTS]
)
def test_each_group_request_needs_its_operation_on_the_group(
    kind: str, make: Any, operation: Operation
) -> None:
    topic_read = acl("User:alice", Op.READ, R.TOPIC, "t")
    # nothing allowed: denied with the request's own response type
    denied = ask(core_with(topic_read), make("g1"))
    assert code(denied) == E.GROUP_AUTHORIZATION_FAILED
    assert "User:alice" in (getattr(denied, "error_message", "") or "")
    # LITERAL ALLOW on this group
    allowed = ask(core_with(topic_read, acl("User:alice", operation, R.GROUP, "g1")), make("g1"))
    assert code(allowed) != E.GROUP_AUTHORIZATION_FAILED
    # PREFIXED ALLOW: g1 matches "g", another group does not match "h"
    prefixed = core_with(topic_read, acl("User:alice", operation, R.GROUP, "g", prefixed=True))
    assert code(ask(prefixed, make("g1"))) != E.GROUP_AUTHORIZATION_FAILED
    assert code(ask(prefixed, make("h1"))) == E.GROUP_AUTHORIZATION_FAILED
    # a DENY wins over an ALLOW
    both = core_with(
        topic_read,
        acl("User:*", Op.ALL, R.GROUP, "*"),
        acl("User:alice", operation, R.GROUP, "g1", deny=True),
    )
    assert code(ask(both, make("g1"))) == E.GROUP_AUTHORIZATION_FAILED
    assert code(ask(both, make("g2"))) != E.GROUP_AUTHORIZATION_FAILED
    # a super user needs no ACL
    assert code(ask(core_with(), make("g1"), ADMIN)) != E.GROUP_AUTHORIZATION_FAILED


def test_describe_is_implied_by_read_but_read_is_not_implied_by_describe() -> None:
    core = core_with(acl("User:alice", Op.READ, R.GROUP, "g"))
    assert code(ask(core, OffsetFetchRequest(group_id="g"))) == E.NONE
    core = core_with(acl("User:alice", Op.DESCRIBE, R.GROUP, "g"))
    assert code(ask(core, join("g"))) == E.GROUP_AUTHORIZATION_FAILED


def test_host_in_an_acl_restricts_where_from() -> None:
    core = core_with(acl("User:alice", Op.DESCRIBE, R.GROUP, "g", host="10.0.0.9"))
    assert code(ask(core, OffsetFetchRequest(group_id="g"))) == E.GROUP_AUTHORIZATION_FAILED
    core = core_with(acl("User:alice", Op.DESCRIBE, R.GROUP, "g", host="10.0.0.1"))
    assert code(ask(core, OffsetFetchRequest(group_id="g"))) == E.NONE


def test_commit_needs_read_on_each_topic_and_keeps_the_allowed_ones() -> None:
    core = core_with(
        acl("User:alice", Op.READ, R.GROUP, "g"), acl("User:alice", Op.READ, R.TOPIC, "t")
    )
    request = OffsetCommitRequest(
        group_id="g",
        topics=[
            OffsetCommitTopic(name=n, partitions=[OffsetCommitPartition(partition=0, offset=5)])
            for n in ("t", "secret")
        ],
    )
    response = ask(core, request)
    results = {t.name: t.partitions[0].error_code for t in response.topics}
    assert results == {"t": E.NONE, "secret": E.TOPIC_AUTHORIZATION_FAILED}
    fetched = ask(core, OffsetFetchRequest(group_id="g"))
    # fetching every offset leaves out the topic alice may not describe
    assert [t.name for t in fetched.topics] == ["t"]
    named = ask(
        core,
        OffsetFetchRequest(group_id="g", topics=[OffsetFetchTopic(name="secret", partitions=[0])]),
    )
    assert named.topics[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert ask(core, OffsetFetchRequest(group_id="g"), ADMIN).topics


def test_topic_requests_answer_each_topic() -> None:
    core = core_with(
        acl("User:alice", Op.CREATE, R.TOPIC, "orders-", prefixed=True),
        acl("User:alice", Op.ALTER, R.TOPIC, "orders-eu"),
        acl("User:alice", Op.DELETE, R.TOPIC, "orders-us"),
        acl("User:alice", Op.DESCRIBE, R.TOPIC, "orders-", prefixed=True),
    )
    created = ask(
        core,
        CreateTopicsRequest(
            topics=[
                TopicSpec(name="orders-new", partitions=1),
                TopicSpec(name="other", partitions=1),
            ]
        ),
    )
    assert {t.name: t.error_code for t in created.topics} == {
        "orders-new": E.NONE,
        "other": E.TOPIC_AUTHORIZATION_FAILED,
    }
    altered = ask(
        core,
        AlterTopicsRequest(
            topics=[
                TopicSpec(name="orders-eu", partitions=3),
                TopicSpec(name="orders-us", partitions=3),
            ]
        ),
    )
    assert {t.name: t.error_code for t in altered.topics} == {
        "orders-eu": E.NONE,
        "orders-us": E.TOPIC_AUTHORIZATION_FAILED,
    }
    deleted = ask(core, DeleteTopicsRequest(topics=["orders-us", "orders-eu"]))
    assert {t.name: t.error_code for t in deleted.topics} == {
        "orders-us": E.NONE,
        "orders-eu": E.TOPIC_AUTHORIZATION_FAILED,
    }
    listed = ask(core, ListTopicsRequest())
    assert sorted(t.name for t in listed.topics) == ["orders-eu", "orders-new"]
    named = ask(core, ListTopicsRequest(topics=["secret", "orders-eu"]))
    assert {t.name: t.error_code for t in named.topics} == {
        "secret": E.TOPIC_AUTHORIZATION_FAILED,
        "orders-eu": E.NONE,
    }


def test_create_on_the_cluster_creates_any_topic() -> None:
    core = core_with(acl("User:alice", Op.CREATE, R.CLUSTER, CLUSTER_NAME))
    created = ask(core, CreateTopicsRequest(topics=[TopicSpec(name="any", partitions=1)]))
    assert created.topics[0].error_code == E.NONE


def test_groups_are_listed_and_described_by_describe_on_each() -> None:
    core = core_with()
    for group in ("a1", "a2", "b1"):  # groups with offsets, committed by a super user
        commit = OffsetCommitRequest(
            group_id=group,
            topics=[
                OffsetCommitTopic(
                    name="t", partitions=[OffsetCommitPartition(partition=0, offset=1)]
                )
            ],
        )
        assert code(ask(core, commit, ADMIN)) == E.NONE
    core.authorizer = Authorizer([acl("User:alice", Op.DESCRIBE, R.GROUP, "a", prefixed=True)])
    listed = ask(core, ListGroupsRequest())
    assert sorted(g.group_id for g in listed.groups) == ["a1", "a2"]
    described = ask(core, DescribeGroupsRequest(groups=["a1", "b1"]))
    codes = {g.group_id: g.error_code for g in described.groups}
    assert codes == {"a1": E.NONE, "b1": E.GROUP_AUTHORIZATION_FAILED}
    core.authorizer = Authorizer([acl("User:alice", Op.DESCRIBE, R.CLUSTER, CLUSTER_NAME)])
    assert len(ask(core, ListGroupsRequest()).groups) == 3


def test_the_shards_of_a_cluster_need_describe_on_the_cluster() -> None:
    core = core_with()
    refused = ask(core, DescribeClusterRequest())
    assert code(refused) == E.CLUSTER_AUTHORIZATION_FAILED
    assert code(ask(core, DescribeClusterRequest(include_shards=False))) == E.NONE
    core = core_with(acl("User:alice", Op.DESCRIBE, R.CLUSTER, CLUSTER_NAME))
    assert code(ask(core, DescribeClusterRequest())) == E.NONE


def test_without_an_authorizer_everything_is_allowed() -> None:
    core = Coordinator()
    assert code(ask(core, OffsetFetchRequest(group_id="g"))) == E.NONE


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"principal": "alice"}, "TYPE:NAME"),
        ({"resource_name": ""}, "must not be empty"),
        ({"resource_type": "CLUSTER", "resource_name": "x"}, "huddle-cluster"),
        ({"pattern_type": "PREFIXED", "resource_name": "*"}, "PREFIXED"),
    ],
)
def test_an_acl_that_cannot_be_says_why(fields: dict[str, str], message: str) -> None:
    base: dict[str, Any] = {
        "resource_type": "GROUP",
        "resource_name": "g",
        "principal": "User:a",
        "operation": "READ",
    }
    with pytest.raises(AclError, match=message):
        Acl(**{**base, **fields})


def test_topic_notices_leave_out_topics_the_member_may_not_describe() -> None:
    from huddle.protocol.messages import TopicMetadataChanged

    core = core_with(
        acl("User:alice", Op.READ, R.GROUP, "g"), acl("User:alice", Op.READ, R.TOPIC, "t")
    )
    first = ask(core, msgspec.structs.replace(join("g"), member_id=""))
    answer = ask(core, msgspec.structs.replace(join("g"), member_id=first.member_id))
    assert answer.error_code == E.NONE
    out = core.handle(
        ADMIN,
        8,
        AlterTopicsRequest(
            topics=[TopicSpec(name="t", partitions=5), TopicSpec(name="secret", partitions=5)]
        ),
        2.0,
    )
    notices = [f for c, f in out if c == ALICE.conn_id and isinstance(f, TopicMetadataChanged)]
    assert [[t.name for t in n.topics] for n in notices] == [["t"]]
    out = core.handle(ADMIN, 9, DeleteTopicsRequest(topics=["secret"]), 3.0)
    assert not [f for c, f in out if c == ALICE.conn_id and isinstance(f, TopicMetadataChanged)]


def test_a_deny_on_topics_wins_over_an_allow_for_every_topic() -> None:
    core = core_with(
        acl("User:*", Op.ALL, R.TOPIC, "*"),
        acl("User:alice", Op.DESCRIBE, R.TOPIC, "orders-", prefixed=True, deny=True),
        acl("User:alice", Op.DELETE, R.TOPIC, "secret", deny=True),
    )
    listed = ask(core, ListTopicsRequest())
    assert sorted(t.name for t in listed.topics) == ["secret", "t"]
    deleted = ask(core, DeleteTopicsRequest(topics=["secret", "t"]))
    assert {t.name: t.error_code for t in deleted.topics} == {
        "secret": E.TOPIC_AUTHORIZATION_FAILED,
        "t": E.NONE,
    }
    # a DENY of one operation does not deny another: READ on orders-eu stays allowed
    commit = OffsetCommitRequest(
        group_id="g",
        topics=[
            OffsetCommitTopic(
                name="orders-eu", partitions=[OffsetCommitPartition(partition=0, offset=1)]
            )
        ],
    )
    core.authorizer = Authorizer(
        [*core.authorizer.acls, acl("User:alice", Op.READ, R.GROUP, "g")]  # type: ignore[union-attr]
    )
    assert ask(core, commit).topics[0].partitions[0].error_code == E.NONE
