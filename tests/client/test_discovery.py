"""Finding a group's coordinator from a bootstrap list (FindCoordinator)."""

from __future__ import annotations

import socket

import pytest

from huddle.chaos.proxy import fault_proxy
from huddle.client import Admin, Member
from huddle.client.connection import connect
from huddle.client.discovery import connect_coordinator
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.errors import CoordinatorNotAvailableError, ErrorCode
from huddle.protocol.messages import (
    CreateTopicsRequest,
    ErrorResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    Request,
)
from tests.helpers import fast_server_config, running_server, wait_until


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_single_coordinator_names_itself(server: CoordinatorServer, bootstrap: str) -> None:
    async with connect(bootstrap) as conn:
        answer = await conn.request(FindCoordinatorRequest(group_id="g"))
        assert conn.node_id == f"127.0.0.1:{server.port}"  # named in the handshake
    assert answer == FindCoordinatorResponse(
        node_id=f"127.0.0.1:{server.port}", host="127.0.0.1", port=server.port
    )


async def test_the_advertised_address_is_the_one_named() -> None:
    config = fast_server_config(advertise="coordinator.example:19292")
    async with running_server(config) as server, connect(f"127.0.0.1:{server.port}") as conn:
        answer = await conn.request(FindCoordinatorRequest(group_id="g"))
    assert isinstance(answer, FindCoordinatorResponse)
    assert (answer.node_id, answer.host, answer.port) == (
        "coordinator.example:19292",
        "coordinator.example",
        19292,
    )


def test_a_malformed_advertised_address_is_refused() -> None:
    with pytest.raises(ValueError, match="advertised address 'nowhere' is not HOST:PORT"):
        fast_server_config(advertise="nowhere")


async def test_a_member_skips_bootstrap_addresses_that_do_not_answer(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic("t", 2)
    dead = f"127.0.0.1:{closed_port()}"
    async with Member(f"{dead},{bootstrap}", group_id="g", topics=["t"]) as member:
        await wait_until(lambda: len(member.assignment) == 2, what="the member owns both")


async def test_a_coordinator_reached_through_a_proxy_keeps_that_connection(
    server: CoordinatorServer,
) -> None:
    async with fault_proxy("127.0.0.1", server.port) as proxy:
        via = f"127.0.0.1:{proxy.port}"
        async with connect_coordinator(via, "g") as conn:
            assert conn.bootstrap == via  # it names itself: no hop around the proxy


async def test_no_answering_address_is_a_clear_error_naming_each() -> None:
    first, second = closed_port(), closed_port()
    with pytest.raises(CoordinatorNotAvailableError) as caught:
        async with connect_coordinator(f"127.0.0.1:{first},127.0.0.1:{second}", "g", timeout=2):
            pass
    assert caught.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert f"127.0.0.1:{first}" in str(caught.value)
    assert f"127.0.0.1:{second}" in str(caught.value)


async def test_a_node_that_names_another_coordinator_sends_the_client_there() -> None:
    async with (
        running_server(fast_server_config()) as asked,
        running_server(fast_server_config()) as owner,
    ):
        asked.core.locate = lambda group_id: FindCoordinatorResponse(
            node_id="n2", host="127.0.0.1", port=owner.port
        )
        async with connect_coordinator(f"127.0.0.1:{asked.port}", "g") as conn:
            assert conn.bootstrap == f"127.0.0.1:{owner.port}"


async def test_an_unspecified_host_means_the_host_that_was_asked(
    server: CoordinatorServer, bootstrap: str
) -> None:
    server.core.locate = lambda group_id: FindCoordinatorResponse(host="0.0.0.0", port=server.port)
    async with connect_coordinator(bootstrap, "g") as conn:
        assert conn.bootstrap == bootstrap


async def test_no_coordinator_for_the_group_is_retried_by_a_member(
    server: CoordinatorServer, bootstrap: str
) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic("t", 1)
    locate = server.core.locate
    asked: list[str] = []

    def nobody_yet(group_id: str) -> FindCoordinatorResponse:
        asked.append(group_id)
        if len(asked) < 3:
            return FindCoordinatorResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return locate(group_id)

    server.core.locate = nobody_yet
    async with Member(bootstrap, group_id="g", topics=["t"], retry_backoff_ms=10) as member:
        await wait_until(lambda: len(member.assignment) == 1, what="the member owns t-0")
    assert asked[:3] == ["g", "g", "g"]


def test_a_malformed_bootstrap_list_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="bootstrap address 'h1' is not HOST:PORT"):
        Member("127.0.0.1:9292,h1", group_id="g", topics=["t"])


async def test_admin_takes_a_bootstrap_list_and_asks_the_group_of_its_coordinator(
    server: CoordinatorServer, bootstrap: str
) -> None:
    dead = f"127.0.0.1:{closed_port()}"
    async with Admin(f"{dead},{bootstrap}") as admin:
        await admin.create_topic("t", 1)
        assert await admin.list_topics() == {"t": 1}
        async with Member(bootstrap, group_id="g", topics=["t"]) as member:
            await wait_until(lambda: len(member.assignment) == 1, what="the member owns t-0")
            view = await admin.describe("g")
    assert [m.member_id for m in view.members] == [member.member_id]


async def test_admin_makes_a_refused_request_again_until_the_node_can_serve_it(
    server: CoordinatorServer, bootstrap: str
) -> None:
    """A cluster node still joining answers COORDINATOR_NOT_AVAILABLE; the admin client
    tries again with backoff within its timeout, as Kafka's does."""
    refused: list[str] = []

    def joining(request: Request) -> ErrorResponse | None:
        if isinstance(request, CreateTopicsRequest) and len(refused) < 2:
            refused.append(request.topics[0].name)
            return ErrorResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="joining"
            )
        return None

    server.gate = joining
    async with Admin(bootstrap, timeout=5) as admin:
        await admin.create_topic("t", 3)
        assert await admin.list_topics() == {"t": 3}
    assert refused == ["t", "t"]
    refused.clear()
    server.gate = lambda request: ErrorResponse(
        error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="still joining"
    )
    async with Admin(bootstrap, timeout=0.5) as admin:
        with pytest.raises(CoordinatorNotAvailableError, match="still joining"):
            await admin.create_topic("u", 1)
