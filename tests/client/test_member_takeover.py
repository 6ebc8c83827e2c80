"""Only a member's own client moves it to a new connection, told by the incarnation token
its handshake presents (docs/coordinator.md section 4): a real coordinator, real members,
and raw connections that know all DescribeGroups shows (member id, generation, client id)
and are as anonymous as the member, but do not hold its token."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from structlog.typing import EventDict

from huddle.chaos.proxy import fault_proxy
from huddle.client import Admin, Member
from huddle.client.connection import connect
from huddle.coordinator.effects import Outgoing, Peer
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.errors import ErrorCode, InvalidArgumentError
from huddle.protocol.messages import (
    PROTOCOL_VERSION,
    Handshake,
    HeartbeatRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    ProtocolError,
    Reply,
    Request,
)
from tests.helpers import (
    FAST_GROUP,
    RawClient,
    fast_server_config,
    raw_member,
    running_server,
    wait_until,
)

E = ErrorCode
GRACE_MS = 300  # the disconnect grace: a member whose connection closed is removed after it
CLIENT_ID = "huddle-member"  # the Member's default client id: everyone's who gives none
TOKEN = bytes(range(16))

Answer = tuple[int, float, int]  # a heartbeat's (connection, coordinator time ms, error code)


def heartbeat_answers(
    server: CoordinatorServer, monkeypatch: pytest.MonkeyPatch
) -> dict[str, list[Answer]]:
    """Every heartbeat the coordinator answers from now on, by the member id it names."""
    answers: dict[str, list[Answer]] = {}
    handle = server.core.handle

    def spy(peer: Peer, cid: int, request: Request, now: float) -> list[Outgoing]:
        out = handle(peer, cid, request, now)
        if isinstance(request, HeartbeatRequest):
            for conn_id, frame in out:
                if isinstance(frame, Reply) and frame.correlation_id == cid:
                    code = frame.response.error_code
                    answers.setdefault(request.member_id, []).append((conn_id, now, code))
        return out

    monkeypatch.setattr(server.core, "handle", spy)
    return answers


def heartbeat(member_id: str, generation: int) -> HeartbeatRequest:
    return HeartbeatRequest(group_id="g", generation_id=generation, member_id=member_id)


async def take_over_attempt(port: int, member: Member, incarnation: bytes | None) -> None:
    """A heartbeat and a commit naming the member from another connection with its client
    id, anonymous as it is: answered as Kafka answers them; then the connection closes."""
    raw = await RawClient.open(port)
    try:
        await raw.handshake(client_id=CLIENT_ID, incarnation=incarnation)
        answer = await raw.call(heartbeat(member.member_id, member.generation))
        assert answer.error_code == E.NONE, answer
        partitions = [OffsetCommitPartition(partition=0, offset=5)]
        committed = await raw.call(
            OffsetCommitRequest(
                group_id="g",
                generation_id=member.generation,
                member_id=member.member_id,
                topics=[OffsetCommitTopic(name="t", partitions=partitions)],
            )
        )
        assert isinstance(committed, OffsetCommitResponse), committed
        assert committed.topics[0].partitions[0].error_code == E.NONE, committed
    finally:
        await raw.close()


async def answered_past(answers: dict[str, list[Answer]], member: Member, ms: float) -> None:
    """Wait for a heartbeat of the member answered after coordinator time ``ms``."""
    await wait_until(
        lambda: any(now > ms for _, now, _ in answers.get(member.member_id, [])),
        what=f"a heartbeat of {member.member_id} answered after {ms:.0f} ms",
    )


def now_ms() -> float:
    """The coordinator's clock (it runs on the test's loop)."""
    return asyncio.get_running_loop().time() * 1000


def holds(data_dir: Path, secret: bytes) -> bool:
    """Whether any file of the data dir holds ``secret``."""
    return any(secret in f.read_bytes() for f in data_dir.rglob("*") if f.is_file())


def secrets_of(member: Member) -> Iterator[str]:
    """The member's token and the coordinator's digest of it, as a log could show them."""
    token: bytes = member._incarnation
    for value in (token, hashlib.sha256(token).digest()):
        yield value.hex()
        yield repr(value)[2:-1]


@pytest.mark.parametrize("incarnation", [None, bytes(range(1, 17))], ids=["none", "wrong"])
async def test_a_connection_without_the_members_token_does_not_take_it_over(
    monkeypatch: pytest.MonkeyPatch, logs: list[EventDict], incarnation: bytes | None
) -> None:
    """The member's own heartbeats go on succeeding on its own connection, and the other
    connection's close does not remove it. Before, the other connection's heartbeat moved
    the member, whose own heartbeats were then refused (COORDINATOR_NOT_AVAILABLE)."""
    config = fast_server_config(group=replace(FAST_GROUP, disconnect_grace_ms=GRACE_MS))
    async with running_server(config) as server:
        answers = heartbeat_answers(server, monkeypatch)
        bootstrap = f"127.0.0.1:{server.port}"
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 2)
        member = Member(bootstrap, group_id="g", topics=["t"], heartbeat_interval_ms=100)
        async with member:
            await member.wait_stable(timeout=10)
            owned, generation = member.assignment, member.generation
            await wait_until(lambda: member.member_id in answers, what="a first heartbeat")
            own = answers[member.member_id][0][0]
            await take_over_attempt(server.port, member, incarnation)
            await answered_past(answers, member, now_ms() + 2 * GRACE_MS)
            mine = answers[member.member_id]
            assert {code for _, _, code in mine} == {E.NONE}, mine
            assert len([conn for conn, _, _ in mine if conn != own]) == 1  # the other's
            assert (member.assignment, member.generation) == (owned, generation)
            assert member.member_id in server.core.groups["g"].members
    for event in logs:  # the token, and what the coordinator keeps of it, are logged nowhere
        assert not any(secret in repr(event) for secret in secrets_of(member)), event


async def test_a_member_that_reconnects_is_moved_with_its_partitions_and_keeps_its_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Member's own client presents its token on its new connection: the member moves
    there in its generation with its partitions, and a connection without the token still
    cannot take it from there."""
    group = replace(FAST_GROUP, disconnect_grace_ms=3_000)  # it rides through the reconnect
    async with running_server(fast_server_config(group=group)) as server:
        answers = heartbeat_answers(server, monkeypatch)
        async with Admin(f"127.0.0.1:{server.port}") as admin:
            await admin.create_topic("t", 2)
        async with fault_proxy("127.0.0.1", server.port) as proxy:
            member = Member(
                f"127.0.0.1:{proxy.port}", group_id="g", topics=["t"], heartbeat_interval_ms=100
            )
            async with member:
                await member.wait_stable(timeout=10)
                owned, generation = member.assignment, member.generation
                await wait_until(lambda: member.member_id in answers, what="a first heartbeat")
                old = answers[member.member_id][0][0]
                await proxy.drop()  # the coordinator's socket is gone; the member reconnects
                await wait_until(
                    lambda: any(conn > old for conn, _, _ in answers[member.member_id]),
                    what="a heartbeat on the member's new connection",
                )
                new = max(conn for conn, _, _ in answers[member.member_id])
                assert server.core.groups["g"].members[member.member_id].conn_id == new
                await take_over_attempt(server.port, member, None)
                await answered_past(answers, member, now_ms())
                assert {code for _, _, code in answers[member.member_id]} == {E.NONE}
                assert server.core.groups["g"].members[member.member_id].conn_id == new
                assert (member.assignment, member.generation) == (owned, generation)


async def test_a_coordinator_restarted_on_its_data_dir_keeps_the_members_token(
    tmp_path: Path,
) -> None:
    """The kept member record holds the token's digest, never the token: after a restart
    the member's own client, presenting it, moves the member, and a newer connection with
    the member's client id and no token does not take it from there."""
    config = fast_server_config(data_dir=str(tmp_path))
    async with running_server(config) as server:
        client, member_id, generation = await raw_member(server.port, "g", incarnation=TOKEN)
        await client.close()
    assert not await asyncio.to_thread(holds, tmp_path, TOKEN)
    async with running_server(config) as server:
        own = await RawClient.open(server.port)
        await own.handshake(client_id="raw-g", incarnation=TOKEN)
        other = await RawClient.open(server.port)
        await other.handshake(client_id="raw-g")
        try:
            for conn in (own, other, own):
                answer = await conn.call(heartbeat(member_id, generation))
                assert answer.error_code == E.NONE, answer
        finally:
            await own.close()
            await other.close()


async def test_a_token_of_the_wrong_length_is_refused(server: CoordinatorServer) -> None:
    """A token too short to be unforgeable (or too long) is bad input: the coordinator
    refuses the handshake, and the client library the argument."""
    raw = await RawClient.open(server.port)
    await raw.send(Handshake(version=PROTOCOL_VERSION, client_id=CLIENT_ID, incarnation=b"x" * 8))
    (refusal,) = await raw.frames_until_closed()
    assert isinstance(refusal, ProtocolError), refusal
    assert refusal.error_code == E.INVALID_REQUEST
    assert "incarnation" in (refusal.error_message or "")
    with pytest.raises(InvalidArgumentError, match="incarnation must be 16 to 64 bytes"):
        async with connect(f"127.0.0.1:{server.port}", incarnation=b"x" * 65):
            pass
