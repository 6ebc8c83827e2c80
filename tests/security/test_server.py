"""A coordinator with TLS, SASL and the authorizer on: who can connect, and what they can do.

Every test runs on both event loops (asyncio and uvloop: the TLS transports differ).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from structlog.typing import EventDict

from huddle.client.admin import Admin
from huddle.client.connection import ConnectionClosedError, connect
from huddle.client.security import PlainWithoutTlsError, Security, TlsError
from huddle.coordinator.security.acls import CLUSTER_NAME, Operation, ResourceType
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from huddle.protocol.messages import (
    Call,
    CreateTopicsRequest,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    Handshake,
    HandshakeResult,
    HeartbeatRequest,
    HeartbeatResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    ProtocolError,
    Reply,
    SaslAuthenticate,
    SaslAuthenticateResult,
    TopicSpec,
)
from tests.helpers import RawClient, eventually, fast_server_config, running_server, wait_until
from tests.security_setup import Pki, acl, keep, make_pki, set_acls

G, T, C = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER
READ, DESCRIBE, CREATE = Operation.READ, Operation.DESCRIBE, Operation.CREATE
USERS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}
MEMBER_ACLS = [  # alice may READ and DESCRIBE group "a", bob group "b"
    acl("User:alice", READ, G, "a"),
    acl("User:bob", READ, G, "b"),
    acl("User:alice", READ, T, "t"),
    acl("User:bob", READ, T, "t"),
]


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest.fixture
async def secure(
    tmp_path: Path, pki: Pki, logs: list[EventDict]
) -> AsyncIterator[CoordinatorServer]:
    """TLS, SASL (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN) and the authorizer; User:admin is a
    super user; alice may READ and DESCRIBE group "a", bob group "b"."""
    data = tmp_path / "data"
    await keep(data, USERS, MEMBER_ACLS)
    config = fast_server_config(
        data_dir=str(data),
        tls_cert=pki.server,
        tls_key=pki.server,
        sasl="SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
        authorizer=True,
        super_users="User:admin",
    )
    async with running_server(config) as server:
        yield server


def address(server: CoordinatorServer) -> str:
    return f"127.0.0.1:{server.port}"


def as_user(pki: Pki, name: str, password: str | None = None, **kw: object) -> Security:
    return Security(ca_file=pki.ca, username=name, password=password or USERS.get(name, "x"), **kw)  # type: ignore[arg-type]


async def refused(bootstrap: str, security: Security) -> None:
    """Connect, expecting the connection to be refused (the caller's pytest.raises)."""
    async with connect(bootstrap, security=security):
        raise AssertionError("the connection was accepted")


def raw_tls(pki: Pki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=pki.ca)


# --- authentication ---------------------------------------------------------------------


async def test_an_authenticated_client_is_its_user(secure: CoordinatorServer, pki: Pki) -> None:
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):
        security = as_user(pki, "alice", mechanism=mechanism)
        async with connect(address(secure), security=security) as conn:
            assert conn.principal == "User:alice"


async def test_an_unauthenticated_client_can_do_nothing_but_the_handshake(
    secure: CoordinatorServer, pki: Pki, logs: list[EventDict]
) -> None:
    # no mechanism at all: refused at the handshake, and closed
    raw = await RawClient.open(secure.port, ssl=raw_tls(pki))
    await raw.send(Handshake(version=1, client_id="nobody"))
    frames = await raw.frames_until_closed()
    assert len(frames) == 1
    result = frames[0]
    assert isinstance(result, HandshakeResult)
    assert result.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "requires SASL" in (result.error_message or "")
    # a request in the middle of the exchange: refused, closed, nothing done
    raw = await RawClient.open(secure.port, ssl=raw_tls(pki))
    await raw.send(Handshake(version=1, client_id="sly", sasl_mechanism="SCRAM-SHA-512"))
    assert isinstance(await raw.read_frame(), HandshakeResult)
    spec = TopicSpec(name="sneaky", partitions=1)
    await raw.send(Call(correlation_id=1, request=CreateTopicsRequest(topics=[spec])))
    frames = await raw.frames_until_closed()
    assert [type(f) for f in frames] == [ProtocolError]
    assert frames[0].error_code == ErrorCode.ILLEGAL_SASL_STATE  # type: ignore[union-attr]
    async with Admin(address(secure), security=as_user(pki, "admin")) as admin:
        assert "sneaky" not in await admin.list_topics()


@pytest.mark.parametrize(
    ("name", "password", "mechanism"),
    [
        ("alice", "wrong", "SCRAM-SHA-512"),
        ("nobody", "whatever", "SCRAM-SHA-512"),
        ("alice", "wrong", "SCRAM-SHA-256"),
        ("nobody", "whatever", "PLAIN"),
        ("alice", "wrong", "PLAIN"),
    ],
)
async def test_bad_credentials_get_one_message_and_nobody_else_notices(
    secure: CoordinatorServer,
    pki: Pki,
    logs: list[EventDict],
    name: str,
    password: str,
    mechanism: str,
) -> None:
    async with connect(address(secure), security=as_user(pki, "bob")) as bystander:
        security = as_user(pki, name, password, mechanism=mechanism)
        with pytest.raises(SaslAuthenticationFailedError) as failed:
            await refused(address(secure), security)
        assert failed.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        # the same words whatever was wrong: they do not tell who exists
        assert failed.value.message == f"authentication failed: invalid credentials ({mechanism})"
        listed = await bystander.call(ListGroupsRequest(), ListGroupsResponse)
        assert listed.error_code == 0
    failures = [e for e in logs if e["event"] == "authentication_failed"]
    assert len(failures) == 1
    assert failures[0]["username"] == name
    assert failures[0]["peer"].startswith("127.0.0.1:")


async def test_a_replayed_scram_exchange_fails(secure: CoordinatorServer, pki: Pki) -> None:
    from scramp import ScramClient

    async def exchange(first: str, final: str | None) -> tuple[str, SaslAuthenticateResult]:
        raw = await RawClient.open(secure.port, ssl=raw_tls(pki))
        await raw.send(Handshake(version=1, sasl_mechanism="SCRAM-SHA-256"))
        assert isinstance(await raw.read_frame(), HandshakeResult)
        await raw.send(SaslAuthenticate(auth_bytes=first.encode()))
        challenge = await raw.read_frame()
        assert isinstance(challenge, SaslAuthenticateResult)
        if final is None:
            client.set_server_first(challenge.auth_bytes.decode())
            final = client.get_client_final()
        await raw.send(SaslAuthenticate(auth_bytes=final.encode()))
        result = await raw.read_frame()
        assert isinstance(result, SaslAuthenticateResult)
        await raw.close()
        return final, result

    client = ScramClient(["SCRAM-SHA-256"], "alice", USERS["alice"])
    first = client.get_client_first()
    final, result = await exchange(first, None)
    assert result.complete
    assert result.principal == "User:alice"
    _, replayed = await exchange(first, final)  # the same messages, captured and sent again
    assert replayed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert not replayed.principal


async def test_plain_is_refused_without_tls(tmp_path: Path) -> None:
    with pytest.raises(PlainWithoutTlsError):
        Security(username="alice", password="pw", mechanism="PLAIN")
    with pytest.raises(ValueError, match="PLAIN sends passwords in the clear"):
        fast_server_config(data_dir=str(tmp_path), sasl="PLAIN")
    await keep(tmp_path, USERS)
    config = fast_server_config(data_dir=str(tmp_path), sasl="SCRAM-SHA-512")
    async with running_server(config) as server:
        raw = await RawClient.open(server.port)
        await raw.send(Handshake(version=1, sasl_mechanism="PLAIN"))
        frames = await raw.frames_until_closed()
        assert isinstance(frames[0], HandshakeResult)
        assert frames[0].error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert "SCRAM-SHA-512" in (frames[0].error_message or "")
        security = Security(username="alice", password="x", mechanism="SCRAM-SHA-256")
        with pytest.raises(UnsupportedSaslMechanismError):
            await refused(f"127.0.0.1:{server.port}", security)
        # SCRAM works without TLS: the password never travels
        security = Security(username="alice", password=USERS["alice"])
        async with connect(f"127.0.0.1:{server.port}", security=security) as conn:
            assert conn.principal == "User:alice"


async def test_repeated_failures_from_one_address_are_slowed_down(
    secure: CoordinatorServer, pki: Pki, logs: list[EventDict]
) -> None:
    for _ in range(4):
        with pytest.raises(SaslAuthenticationFailedError):
            async with connect(address(secure), security=as_user(pki, "alice", "guess")):
                pass
    delays = [e["delay_ms"] for e in logs if e["event"] == "authentication_failed"]
    assert delays == [100, 200, 400, 800]


# --- TLS and client certificates -------------------------------------------------------


@pytest.fixture
async def mtls(tmp_path: Path, pki: Pki) -> AsyncIterator[CoordinatorServer]:
    config = fast_server_config(tls_cert=pki.server, tls_key=pki.server, tls_client_ca=pki.ca)
    async with running_server(config) as server:
        yield server


@pytest.mark.parametrize("which", ["stranger", "expired", None])
async def test_a_bad_client_certificate_fails_the_tls_handshake(
    mtls: CoordinatorServer, pki: Pki, which: str | None
) -> None:
    async with connect(address(mtls), security=Security(ca_file=pki.ca, cert_file=pki.alice)):
        cert = getattr(pki, which) if which else None
        with pytest.raises(ConnectionClosedError, match="refuses this client's certificate"):
            async with connect(address(mtls), security=Security(ca_file=pki.ca, cert_file=cert)):
                pass
        assert mtls.connection_count == 1  # the good client's connection stays


async def test_a_server_certificate_from_another_ca_is_refused(
    mtls: CoordinatorServer, pki: Pki, tmp_path: Path
) -> None:
    import trustme

    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    with pytest.raises(TlsError, match="certificate was refused"):
        async with connect(address(mtls), security=Security(ca_file=str(other))):
            pass


async def test_a_tls_client_at_a_plain_listener_is_told_it_has_no_tls(pki: Pki) -> None:
    """The plain listener answers a ClientHello in its own framing: the client says what
    that most likely means, not only OpenSSL's WRONG_VERSION_NUMBER."""
    async with running_server() as plain:
        with pytest.raises(TlsError, match=r"did not answer in TLS.*probably has no TLS"):
            async with connect(address(plain), security=Security(ca_file=pki.ca)):
                pass


async def test_the_principal_of_a_certificate_is_its_subject(
    mtls: CoordinatorServer, pki: Pki
) -> None:
    security = Security(ca_file=pki.ca, cert_file=pki.alice)
    async with connect(address(mtls), security=security):
        await wait_until(lambda: mtls.connection_count == 1, what="the connection registered")
        (conn,) = mtls.connections()
        assert conn.peer.principal == "User:CN=alice,OU=eng,O=acme"


# --- authorization -------------------------------------------------------------------


async def test_a_member_of_group_a_cannot_kick_describe_or_commit_for_group_b(
    secure: CoordinatorServer, pki: Pki
) -> None:
    from huddle.client.member import Member

    async with Admin(address(secure), security=as_user(pki, "admin")) as admin:
        await admin.create_topic("t", 2)
    bob = Member(address(secure), group_id="b", topics=["t"], security=as_user(pki, "bob"))
    async with bob:
        await bob.wait_stable(10)
        member_id = bob.member_id
        async with connect(address(secure), security=as_user(pki, "alice")) as alice:
            kick = LeaveGroupRequest(group_id="b", members=[MemberIdentity(member_id=member_id)])
            left = await alice.request(kick)
            assert isinstance(left, LeaveGroupResponse)
            assert left.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
            described = await alice.call(
                DescribeGroupsRequest(groups=["b"]), DescribeGroupsResponse
            )
            assert described.groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
            assert not described.groups[0].members
            commit = OffsetCommitRequest(
                group_id="b",
                topics=[
                    OffsetCommitTopic(
                        name="t", partitions=[OffsetCommitPartition(partition=0, offset=9)]
                    )
                ],
            )
            committed = await alice.request(commit)
            assert isinstance(committed, OffsetCommitResponse)
            assert committed.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
            beat = await alice.request(
                HeartbeatRequest(group_id="b", generation_id=bob.generation, member_id=member_id)
            )
            assert isinstance(beat, HeartbeatResponse)
            assert beat.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
            listed = await alice.call(ListGroupsRequest(), ListGroupsResponse)
            assert [g.group_id for g in listed.groups] == []
        assert bob.member_id == member_id  # still in its group, nothing happened to it
        assert bob.assignment


async def test_a_member_without_read_on_its_group_fails_with_the_error(
    secure: CoordinatorServer, pki: Pki
) -> None:
    from huddle.client.events import MemberFailedError
    from huddle.client.member import Member

    member = Member(address(secure), group_id="b", topics=["t"], security=as_user(pki, "alice"))
    with pytest.raises(MemberFailedError) as failed:
        async with member:
            await member.wait_stable(10)
    assert "GROUP_AUTHORIZATION_FAILED" in str(failed.value)


async def test_acl_changes_apply_to_a_running_coordinator(
    secure: CoordinatorServer, pki: Pki, tmp_path: Path
) -> None:
    async with Admin(address(secure), security=as_user(pki, "alice")) as alice:
        with pytest.raises(GroupAuthorizationFailedError):
            await alice.describe_group("c")
        await set_acls(tmp_path / "data", [acl("User:alice", DESCRIBE, G, "c")])

        async def described() -> bool:
            try:
                await alice.describe_group("c")
            except GroupAuthorizationFailedError:
                return False
            except GroupIdNotFoundError:
                return True  # allowed now: asked, and there is no such group yet
            return True

        await eventually(described, what="the new ACL to apply")


async def test_cluster_describe_lists_every_group_only_with_describe_on_the_cluster(
    secure: CoordinatorServer, pki: Pki, tmp_path: Path
) -> None:
    from huddle.client.member import Member

    async with Admin(address(secure), security=as_user(pki, "admin")) as admin:
        await admin.create_topic("t", 1)
    async with (
        Member(address(secure), group_id="a", topics=["t"], security=as_user(pki, "alice")) as a,
        Member(address(secure), group_id="b", topics=["t"], security=as_user(pki, "bob")) as b,
    ):
        await a.wait_stable(10)
        await b.wait_stable(10)
        async with Admin(address(secure), security=as_user(pki, "alice")) as alice:
            assert [g.group_id for g in await alice.list_groups()] == ["a"]
        async with Admin(address(secure), security=as_user(pki, "admin")) as admin:
            assert sorted(g.group_id for g in await admin.list_groups()) == ["a", "b"]
        async with Admin(address(secure), security=as_user(pki, "bob")) as bob:
            with pytest.raises(ClusterAuthorizationFailedError):
                await bob.describe_cluster()  # the shard owners: DESCRIBE on the cluster
            assert len((await bob.describe_cluster(shards=False)).nodes) == 1
            # the members' own ACLs stay: refused their group, they would stop (and raise)
            cluster = acl("User:bob", DESCRIBE, C, CLUSTER_NAME)
            await set_acls(tmp_path / "data", [*MEMBER_ACLS, cluster])

            async def sees_every_group() -> bool:
                return len(await bob.list_groups()) == 2

            await eventually(sees_every_group, what="DESCRIBE on the cluster to apply")
            await bob.describe_cluster()


async def test_what_follows_a_failed_proof_is_not_answered_before_the_delay(
    secure: CoordinatorServer, pki: Pki, logs: list[EventDict]
) -> None:
    from scramp import ScramClient

    client = ScramClient(["SCRAM-SHA-512"], "alice", "not-her-password")
    raw = await RawClient.open(secure.port, ssl=raw_tls(pki))
    await raw.send(Handshake(version=1, sasl_mechanism="SCRAM-SHA-512"))
    assert isinstance(await raw.read_frame(), HandshakeResult)
    await raw.send(SaslAuthenticate(auth_bytes=client.get_client_first().encode()))
    challenge = await raw.read_frame()
    assert isinstance(challenge, SaslAuthenticateResult)
    client.set_server_first(challenge.auth_bytes.decode())
    # the wrong proof and, in the same write, a request: only the delayed failure comes
    final = raw._codec.encode(SaslAuthenticate(auth_bytes=client.get_client_final().encode()))
    call = raw._codec.encode(Call(correlation_id=1, request=ListGroupsRequest()))
    await raw.send_bytes(final + call)
    frames = await raw.frames_until_closed()
    assert [type(f) for f in frames] == [SaslAuthenticateResult]
    assert frames[0].error_code == ErrorCode.SASL_AUTHENTICATION_FAILED  # type: ignore[union-attr]


async def test_an_unknown_user_gets_the_same_salt_after_a_restart(tmp_path: Path, pki: Pki) -> None:
    await keep(tmp_path, USERS)
    salts = set()
    for _ in range(2):
        config = fast_server_config(data_dir=str(tmp_path), sasl="SCRAM-SHA-256")
        async with running_server(config) as server:
            raw = await RawClient.open(server.port)
            await raw.send(Handshake(version=1, sasl_mechanism="SCRAM-SHA-256"))
            assert isinstance(await raw.read_frame(), HandshakeResult)
            await raw.send(SaslAuthenticate(auth_bytes=b"n,,n=ghost,r=abcdefgh"))
            challenge = await raw.read_frame()
            assert isinstance(challenge, SaslAuthenticateResult)
            fields = dict(p.split("=", 1) for p in challenge.auth_bytes.decode().split(","))
            salts.add(fields["s"])
            await raw.close()
    assert len(salts) == 1


async def test_a_member_with_a_wrong_password_stops_with_the_error(
    secure: CoordinatorServer, pki: Pki
) -> None:
    from huddle.client.events import MemberFailedError
    from huddle.client.member import Member

    security = as_user(pki, "bob", "not-bobs")
    member = Member(address(secure), group_id="b", topics=["t"], security=security)
    with pytest.raises(MemberFailedError) as failed:
        async with member:
            await member.wait_stable(10)
    assert "SASL_AUTHENTICATION_FAILED" in str(failed.value)


async def test_plain_passwords_are_checked_off_the_event_loop(
    secure: CoordinatorServer, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from huddle.coordinator.security import sasl
    from huddle.coordinator.security.credentials import User, password_matches

    threads: list[str] = []

    def recording(user: User, password: str) -> bool:
        threads.append(threading.current_thread().name)
        return password_matches(user, password)

    monkeypatch.setattr(sasl, "password_matches", recording)
    async with connect(address(secure), security=as_user(pki, "alice", mechanism="PLAIN")):
        pass
    assert threads
    assert all(name.startswith("huddle-plain") for name in threads)


async def test_an_unknown_user_is_told_the_iteration_count_real_users_have(
    secure: CoordinatorServer, pki: Pki
) -> None:
    counts = {}
    for name in ("alice", "ghost"):
        raw = await RawClient.open(secure.port, ssl=raw_tls(pki))
        await raw.send(Handshake(version=1, sasl_mechanism="SCRAM-SHA-256"))
        assert isinstance(await raw.read_frame(), HandshakeResult)
        await raw.send(SaslAuthenticate(auth_bytes=f"n,,n={name},r=nonce123".encode()))
        challenge = await raw.read_frame()
        assert isinstance(challenge, SaslAuthenticateResult)
        fields = dict(p.split("=", 1) for p in challenge.auth_bytes.decode().split(","))
        counts[name] = fields["i"]
        await raw.close()
    assert counts == {"alice": "4096", "ghost": "4096"}  # the test's users have 4096


async def test_a_connection_dropped_during_the_tls_handshake_is_retriable(pki: Pki) -> None:
    import asyncio

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()  # a coordinator going away as the client says hello

    dropper = await asyncio.start_server(drop, "127.0.0.1", 0)
    port = dropper.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ConnectionClosedError, match="during the TLS handshake"):
            await refused(f"127.0.0.1:{port}", Security(ca_file=pki.ca))
    finally:
        dropper.close()
        await dropper.wait_closed()


async def plain_attempt(port: int, pki: Pki, password: str) -> RawClient:
    """A PLAIN exchange as alice, sent and not waited for."""
    raw = await RawClient.open(port, ssl=raw_tls(pki))
    await raw.send(Handshake(version=1, sasl_mechanism="PLAIN"))
    result = await raw.read_frame()
    assert isinstance(result, HandshakeResult)
    assert result.error_code == 0, result
    await raw.send(SaslAuthenticate(auth_bytes=b"\0alice\0" + password.encode()))
    return raw


async def test_plain_checks_wait_their_turn_until_answered(
    secure: CoordinatorServer, pki: Pki, logs: list[EventDict]
) -> None:
    from huddle.coordinator.security.throttle import LOOPBACK

    assert secure.security is not None
    turns = secure.security.turns
    pending = [await plain_attempt(secure.port, pki, f"guess-{i}") for i in range(4)]
    await wait_until(
        lambda: sum(e["event"] == "authentication_failed" for e in logs) == 4,
        what="the four failures",
    )
    fifth = await plain_attempt(secure.port, pki, "guess-5")  # its answers are held back:
    await wait_until(lambda: turns.waiting(LOOPBACK) == 1, what="the fifth to wait its turn")
    assert sum(e["event"] == "authentication_failed" for e in logs) == 4  # not checked yet
    for raw in [*pending, fifth]:
        frames = await raw.frames_until_closed()
        assert [f.error_code for f in frames] == [ErrorCode.SASL_AUTHENTICATION_FAILED]  # type: ignore[union-attr]
    assert sum(e["event"] == "authentication_failed" for e in logs) == 5
    await wait_until(lambda: turns.checking(LOOPBACK) == 0, what="every turn ended")


async def test_a_plain_check_under_way_holds_the_connection_out_of_the_backlog(
    secure: CoordinatorServer, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from huddle.coordinator.security import sasl
    from huddle.coordinator.security.credentials import User, password_matches

    started, release = threading.Event(), threading.Event()
    checked: list[str] = []

    def slow(user: User, password: str) -> bool:
        checked.append(password)
        started.set()
        release.wait(10)
        return password_matches(user, password)

    monkeypatch.setattr(sasl, "password_matches", slow)
    raw = await RawClient.open(secure.port, ssl=raw_tls(pki))
    await raw.send(Handshake(version=1, sasl_mechanism="PLAIN"))
    assert isinstance(await raw.read_frame(), HandshakeResult)
    # the password and, in the same write, a request that must wait for the check
    hello = raw._codec.encode(SaslAuthenticate(auth_bytes=b"\0alice\0" + USERS["alice"].encode()))
    call = raw._codec.encode(Call(correlation_id=1, request=ListGroupsRequest()))
    await raw.send_bytes(hello + call)
    await wait_until(started.is_set, what="the check to start")
    (conn,) = [c for c in secure.connections() if c.sasl_busy]
    assert not secure.intake.waits(conn)  # not polled every loop pass while it waits
    # a connection that closes while its check waits for a worker gets no key derived
    others = [await plain_attempt(secure.port, pki, f"other-{i}") for i in range(2)]
    for other in others:
        await other.close()
    await wait_until(lambda: secure.connection_count == 1, what="the others to be gone")
    release.set()
    result = await raw.read_frame()
    assert isinstance(result, SaslAuthenticateResult)
    assert result.principal == "User:alice"
    listed = await raw.read_frame()
    assert isinstance(listed, Reply)
    assert isinstance(listed.response, ListGroupsResponse)
    assert len(checked) <= 2  # alice's, and at most one other that had a worker already
    await raw.close()


async def test_a_held_success_is_not_cut_off_by_the_handshake_timeout(
    tmp_path: Path, pki: Pki
) -> None:
    await keep(tmp_path, USERS)
    config = fast_server_config(
        data_dir=str(tmp_path),
        tls_cert=pki.server,
        tls_key=pki.server,
        sasl="PLAIN",
        handshake_timeout_ms=1_000,  # failures are held back at most 500 ms
    )
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        for _ in range(4):
            with pytest.raises(SaslAuthenticationFailedError):
                await refused(bootstrap, as_user(pki, "alice", "guess", mechanism="PLAIN"))
        raw = await RawClient.open(server.port, ssl=raw_tls(pki))
        await raw.send(Handshake(version=1, sasl_mechanism="PLAIN"))
        assert isinstance(await raw.read_frame(), HandshakeResult)
        (conn,) = server.connections()
        # late in its handshake time: the held success (500 ms) ends after it
        await wait_until(
            lambda: server.loop.time() - conn.opened_at > 0.7, what="most of the time gone"
        )
        await raw.send(SaslAuthenticate(auth_bytes=b"\0alice\0" + USERS["alice"].encode()))
        result = await raw.read_frame()
        assert isinstance(result, SaslAuthenticateResult), result
        assert result.principal == "User:alice"
        await raw.close()
