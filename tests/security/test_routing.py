"""Every request is authorized before anything says where it can be served (Kafka's order:
authorization, then the coordinator check): a principal that may not use a group is told
so by every node, never NOT_COORDINATOR (which names who coordinates it) nor
COORDINATOR_LOAD_IN_PROGRESS."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from huddle.cli import main
from huddle.client.connection import connect
from huddle.client.security import Security
from huddle.coordinator.security.acls import Operation, ResourceType
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ErrorResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    Request,
    Response,
    SyncGroupRequest,
)
from tests.etcd import Etcd, etcd
from tests.helpers import (
    eventually,
    fast_server_config,
    join_request,
    running_server,
    serve_process,
)
from tests.security_setup import acl, keep

__all__ = ["etcd"]  # the fixture

USERS = {"alice": "alice-pw", "admin": "admin-pw"}
ALICE = Security(username="alice", password="alice-pw")
ADMIN = Security(username="admin", password="admin-pw")


def about(group: str) -> list[Request]:
    """A request of every kind that names ``group``."""
    commit = OffsetCommitTopic(name="t", partitions=[OffsetCommitPartition(partition=0, offset=1)])
    return [
        join_request(group_id=group),
        SyncGroupRequest(group_id=group, generation_id=1, member_id="m"),
        HeartbeatRequest(group_id=group, generation_id=1, member_id="m"),
        LeaveGroupRequest(group_id=group, members=[MemberIdentity(member_id="m")]),
        OffsetCommitRequest(group_id=group, topics=[commit]),
        OffsetFetchRequest(group_id=group),
        DescribeGroupsRequest(groups=[group]),
        DeleteGroupsRequest(groups=[group]),
        FindCoordinatorRequest(group_id=group),
    ]


def refused_for_the_group(answer: Response) -> bool:
    """Whether ``answer`` is GROUP_AUTHORIZATION_FAILED, for the request or its one group."""
    if isinstance(answer, DescribeGroupsResponse):
        return [g.error_code for g in answer.groups] == [ErrorCode.GROUP_AUTHORIZATION_FAILED]
    if isinstance(answer, DeleteGroupsResponse):
        return [g.error_code for g in answer.results] == [ErrorCode.GROUP_AUTHORIZATION_FAILED]
    return answer.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def elsewhere(request: Request) -> ErrorResponse | None:
    """Routing as a node that serves no group: every group is another node's."""
    groups = getattr(request, "groups", None) or [getattr(request, "group_id", "")]
    if not any(groups):
        return None
    return ErrorResponse(
        error_code=ErrorCode.NOT_COORDINATOR,
        error_message=f"node n1 does not coordinate {', '.join(map(repr, groups))}: node n2 does",
    )


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[CoordinatorServer]:
    """SCRAM and the authorizer; alice may READ (so DESCRIBE) group "mine" only."""
    await keep(tmp_path, USERS, [acl("User:alice", Operation.READ, ResourceType.GROUP, "mine")])
    config = fast_server_config(
        data_dir=str(tmp_path), sasl="SCRAM-SHA-512", authorizer=True, super_users="User:admin"
    )
    async with running_server(config) as running:
        yield running


async def test_no_request_is_routed_before_it_is_authorized(server: CoordinatorServer) -> None:
    server.gate = elsewhere  # every group lives on another node
    async with connect(f"127.0.0.1:{server.port}", security=ALICE, notices=False) as alice:
        for request in about("theirs"):
            answer = await alice.request(request)
            assert refused_for_the_group(answer), (type(request).__name__, answer)
            assert "n2" not in str(answer)
        # a group alice may use is routed, and a refused one is not named with it
        for request in about("mine")[:-2]:  # but DeleteGroups (no DELETE), FindCoordinator
            answer = await alice.request(request)
            assert answer.error_code == ErrorCode.NOT_COORDINATOR, (request, answer)
        answer = await alice.request(DescribeGroupsRequest(groups=["mine", "theirs"]))
        assert answer.error_code == ErrorCode.NOT_COORDINATOR
        assert "theirs" not in (answer.error_message or "")
        # nor is any request answered "loading" before it is authorized
        server.gate = None
        server.loading = True
        try:
            for request in about("theirs")[:-1]:
                answer = await alice.request(request)
                assert refused_for_the_group(answer), (type(request).__name__, answer)
            answer = await alice.request(DescribeGroupsRequest(groups=["mine"]))
            assert answer.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        finally:
            server.loading = False


PREFIX = "/routing"


@pytest.mark.e2e
async def test_a_node_that_does_not_own_the_group_refuses_a_principal_first(
    etcd: Etcd, tmp_path: Path
) -> None:
    endpoint = f"etcd://{etcd.host}:{etcd.port}"
    store = ["--etcd", endpoint, "--cluster-prefix", PREFIX]
    for name, password in USERS.items():
        (tmp_path / name).write_text(password)
        add = ["users", "add", name, "--password-file", str(tmp_path / name), *store]
        assert await asyncio.to_thread(main, add, {}) == 0
    flags = [
        *("--cluster", endpoint, "--cluster-prefix", PREFIX, "--shards", "6"),
        *("--lease-ttl-s", "2", "--sasl", "SCRAM-SHA-512", "--authorizer"),
        *("--super-users", "User:admin"),
    ]
    async with AsyncExitStack() as stack:
        nodes = [await stack.enter_async_context(serve_process(*flags)) for _ in range(2)]
        ports = [port for _, port, _ in nodes]

        async def ask(port: int, security: Security, request: Request) -> Any:
            async with connect(f"127.0.0.1:{port}", security=security, notices=False) as conn:
                return await conn.request(request)

        found: list[tuple[int, str]] = []

        async def settled() -> bool:
            """A group whose shard one node serves, as the other node knows."""
            for group in (f"g{i}" for i in range(12)):
                located = await ask(ports[0], ADMIN, FindCoordinatorRequest(group_id=group))
                if not isinstance(located, FindCoordinatorResponse) or located.error_code:
                    return False
                other = next(p for p in ports if p != located.port)
                if (await ask(other, ADMIN, DescribeGroupsRequest(groups=[group]))).error_code:
                    found[:] = [(other, group)]
                    return True
            return False

        await eventually(settled, what="a node to own a group the other one knows of")
        other, group = found[0]

        async def refused_first() -> bool:
            admin = await ask(other, ADMIN, DescribeGroupsRequest(groups=[group]))
            if admin.error_code != ErrorCode.NOT_COORDINATOR:
                return False  # the shard moved meanwhile: ask again
            for request in (
                DescribeGroupsRequest(groups=[group]),
                DeleteGroupsRequest(groups=[group]),
            ):
                answer = await ask(other, ALICE, request)
                assert refused_for_the_group(answer), answer
            return True

        await eventually(refused_first, what="the node to refuse alice for the group")
