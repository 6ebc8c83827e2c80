"""A member the coordinator refuses for good stops with ``MemberFailedError`` carrying the
refusal's code (issue 24, item 20), whichever request it answered: a JoinGroup, a heartbeat,
the search for the coordinator or the authentication. The error is raised by
``wait_stable()`` and by the ``async with`` block, whose code is woken whatever it awaits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from huddle.chaos.proxy import fault_proxy
from huddle.client import Admin, Member, MemberFailedError, RebalanceListener, TopicPartition
from huddle.client.connection import RequestTimeoutError
from huddle.client.member_core import FATAL, MemberConfig, MemberCore
from huddle.client.security import NO_SECURITY, Security
from huddle.coordinator.security.acls import Operation, ResourceType
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    NotCoordinatorError,
    RebalanceInProgressError,
    ServerError,
)
from huddle.protocol.messages import JoinGroupResponse
from tests.client.test_flow import Host
from tests.helpers import FAST_GROUP, fast_server_config, member, running_server
from tests.security_setup import acl, keep

E = ErrorCode
USERS = {"alice": "alice-secret", "admin": "admin-secret"}


async def stops(m: Member, *, then_start: Member | None = None) -> MemberFailedError:
    """Run ``m`` until it fails (once stable, with ``then_start`` started inside its block):
    the block is woken from whatever it awaits and raises; ``wait_stable`` raises the same."""

    async def run() -> None:
        async with m:
            with anyio.fail_after(10):
                if then_start is not None:
                    await m.wait_stable()
                    async with then_start:
                        await then_start.wait_stable()
                        await anyio.sleep_forever()
                await anyio.sleep_forever()

    with pytest.raises(MemberFailedError) as caught:
        await run()
    with pytest.raises(MemberFailedError) as again:
        await m.wait_stable(1)
    assert again.value is caught.value
    assert type(caught.value) is MemberFailedError
    return caught.value


async def topic(bootstrap: str, security: Security = NO_SECURITY) -> None:
    async with Admin(bootstrap, security=security) as admin:
        await admin.create_topic("t", 2)


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[str]:
    """SASL (SCRAM-SHA-512) and the authorizer: alice may read group "a" and topic "t"."""
    data = tmp_path / "data"
    read, group, topic_ = Operation.READ, ResourceType.GROUP, ResourceType.TOPIC
    await keep(
        data, USERS, [acl("User:alice", read, group, "a"), acl("User:alice", read, topic_, "t")]
    )
    config = fast_server_config(
        data_dir=str(data), sasl="SCRAM-SHA-512", authorizer=True, super_users="User:admin"
    )
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await topic(bootstrap, Security(username="admin", password=USERS["admin"]))
        yield bootstrap


async def test_fenced_by_its_own_instance_id(bootstrap: str) -> None:
    await topic(bootstrap)
    old = member(bootstrap, instance_id="i-1")
    failed = await stops(old, then_start=member(bootstrap, instance_id="i-1"))  # restarted
    assert failed.code is E.FENCED_INSTANCE_ID


async def test_an_assignor_the_group_does_not_share(bootstrap: str) -> None:
    await topic(bootstrap)
    async with member(bootstrap, assignors=["range"]) as first:
        await first.wait_stable(10)
        failed = await stops(member(bootstrap, assignors=["roundrobin"]))
    assert failed.code is E.INCONSISTENT_GROUP_PROTOCOL


async def test_a_session_timeout_the_coordinator_does_not_allow() -> None:
    config = fast_server_config(group=replace(FAST_GROUP, max_session_timeout_ms=1_000))
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await topic(bootstrap)
        failed = await stops(member(bootstrap, session_timeout_ms=2_000))
    assert failed.code is E.INVALID_SESSION_TIMEOUT


async def test_a_full_group() -> None:
    async with running_server(
        fast_server_config(group=replace(FAST_GROUP, max_group_size=1))
    ) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await topic(bootstrap)
        async with member(bootstrap) as first:
            await first.wait_stable(10)
            failed = await stops(member(bootstrap))
    assert failed.code is E.GROUP_MAX_SIZE_REACHED


async def test_a_group_the_principal_may_not_read(guarded: str) -> None:
    """Refused when it looks for its coordinator (FindCoordinator): the code is on the
    error, not only on its ``__cause__``."""
    alice = Security(username="alice", password=USERS["alice"])
    failed = await stops(member(guarded, group_id="b", security=alice))
    assert failed.code is E.GROUP_AUTHORIZATION_FAILED
    assert isinstance(failed.__cause__, ServerError)
    assert failed.__cause__.code is E.GROUP_AUTHORIZATION_FAILED
    async with member(guarded, group_id="a", security=alice) as allowed:  # the control
        await allowed.wait_stable(10)


async def test_credentials_the_coordinator_refuses(guarded: str) -> None:
    wrong = Security(username="alice", password="not-alices")
    failed = await stops(member(guarded, group_id="a", security=wrong))
    assert failed.code is E.SASL_AUTHENTICATION_FAILED
    assert "SASL_AUTHENTICATION_FAILED" in str(failed)


@pytest.mark.parametrize("code", sorted(FATAL))
def test_every_fatal_code_answering_a_join_stops_the_flow_with_that_code(code: ErrorCode) -> None:
    """The shared main loop: whatever fatal code answers a JoinGroup, the member stops with
    it (``Failed(code)``, which ``Member`` raises as ``MemberFailedError(code)``)."""
    from huddle.client.assignors.base import ASSIGNORS
    from huddle.client.driver import MemberDriver
    from huddle.client.flow import Failed, MemberFlow
    from huddle.client.subscription import Subscription

    core = MemberCore(MemberConfig(group_id="g", topics=["t"]), [ASSIGNORS.create("range")])
    flow = MemberFlow(MemberDriver(core, Subscription(["t"], None)), Host()).serve()
    next(flow)  # the JoinGroup
    assert flow.send(JoinGroupResponse(error_code=code, error_message="no")) == Failed(code, "no")


class Raises(RebalanceListener):
    """Lets ``error`` out of on_partitions_assigned, as a callback whose own commit failed."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        NotCoordinatorError("the application's own commit failed"),  # taken for a refusal
        RebalanceInProgressError("the application's own commit failed"),
        RequestTimeoutError("the application's own commit timed out"),  # for a lost connection
        CoordinatorNotAvailableError("the application's own commit failed"),
    ],
    ids=type,
)
async def test_a_listener_raising_a_server_or_connection_error_is_a_listener_failure(
    bootstrap: str, error: Exception
) -> None:
    """README: an exception raised by the application's listener gives ``code`` None, and
    stops the member. A ServerError let out of a callback was taken for the coordinator's
    refusal of the member (its code on the error, and huddle.testing swallowed it), and a
    timeout or COORDINATOR_NOT_AVAILABLE for a lost connection (the member went on)."""
    await topic(bootstrap)

    async def run() -> None:
        async with member(bootstrap, listener=Raises(error)) as m:
            with anyio.fail_after(10):
                await m.wait_stable()

    with pytest.raises(MemberFailedError) as caught:
        await run()
    assert caught.value.__cause__ is error
    assert caught.value.code is None, f"code {caught.value.code!r}: taken for a refusal"


class LostRaises(RebalanceListener):
    async def on_partitions_lost(self, lost: frozenset[TopicPartition]) -> None:
        raise RuntimeError("the application's on_partitions_lost broke")


async def test_a_listener_failing_while_the_member_is_offline_stops_it_cleanly(
    server: CoordinatorServer,
) -> None:
    """on_partitions_lost runs while the member cannot reach the coordinator (its session
    ran out meanwhile): its exception stops the member with MemberFailedError as any
    listener's, raised from the ``async with`` block, not an exception group."""
    async with fault_proxy("127.0.0.1", server.port) as proxy:
        bootstrap = f"127.0.0.1:{proxy.port}"
        await topic(bootstrap)

        async def run() -> None:
            async with member(bootstrap, listener=LostRaises()) as m:
                with anyio.fail_after(10):
                    await m.wait_stable()
                    await proxy.partition()
                    await anyio.sleep_forever()

        with pytest.raises(MemberFailedError) as caught:
            await run()
    assert type(caught.value) is MemberFailedError
    assert caught.value.code is None
    assert isinstance(caught.value.__cause__, RuntimeError)
