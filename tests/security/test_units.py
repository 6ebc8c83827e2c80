"""The pieces of security on their own: credentials, one SASL exchange, the failure
slow-down, the users and ACLs store, and the configuration's checks."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from scramp import ScramClient

from huddle.coordinator.config import ServerConfig
from huddle.coordinator.security.acls import Operation, ResourceType
from huddle.coordinator.security.credentials import (
    MIN_ITERATIONS,
    CredentialError,
    User,
    make_user,
    password_matches,
)
from huddle.coordinator.security.sasl import AuthenticationFailedError, SaslSession
from huddle.coordinator.security.store import FileStore, SecurityState, SecurityStoreError
from huddle.coordinator.security.throttle import FailureThrottle
from huddle.coordinator.security.tls import subject_name
from tests.security_setup import acl

SECRET = b"s" * 32
NOBODY: dict[str, User] = {}


def test_credentials_are_salted_and_iterated_never_the_password() -> None:
    one = make_user("alice", "hunter2")
    two = make_user("alice", "hunter2")
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        assert one.scram[mechanism].iterations >= MIN_ITERATIONS
        assert one.scram[mechanism].salt != two.scram[mechanism].salt  # a fresh salt each time
        assert one.scram[mechanism].stored_key != two.scram[mechanism].stored_key
    assert password_matches(one, "hunter2")
    assert not password_matches(one, "hunter3")
    with pytest.raises(CredentialError, match="iterations"):
        make_user("alice", "pw", iterations=1000)
    with pytest.raises(CredentialError, match="user name"):
        make_user("al ice", "pw")
    with pytest.raises(CredentialError, match="empty"):
        make_user("alice", "")


def scram(mechanism: str, user: str, password: str, known: dict[str, str]) -> SaslSession:
    users = {n: make_user(n, p, iterations=MIN_ITERATIONS) for n, p in known.items()}
    session = SaslSession(mechanism, users.get, SECRET)
    client = ScramClient([mechanism], user, password)
    challenge, done = session.step(client.get_client_first().encode())
    assert not done
    client.set_server_first(challenge.decode())
    final, done = session.step(client.get_client_final().encode())
    assert done
    client.set_server_final(final.decode())  # the server proved it knows the key
    return session


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_scram_exchange_names_the_principal(mechanism: str) -> None:
    session = scram(mechanism, "alice", "pw", {"alice": "pw"})
    assert session.principal == "User:alice"


@pytest.mark.parametrize(("user", "password"), [("alice", "nope"), ("ghost", "pw")])
def test_a_wrong_password_and_an_unknown_user_fail_at_the_same_step(
    user: str, password: str
) -> None:
    with pytest.raises(AuthenticationFailedError) as failed:
        scram("SCRAM-SHA-256", user, password, {"alice": "pw"})
    assert failed.value.username == user


def test_an_unknown_user_gets_the_same_salt_every_time() -> None:
    # a made-up salt that changed per try would tell an unknown user from a real one
    salts = set()
    for _ in range(2):
        session = SaslSession("SCRAM-SHA-512", NOBODY.get, SECRET)
        client = ScramClient(["SCRAM-SHA-512"], "ghost", "x")
        challenge, _ = session.step(client.get_client_first().encode())
        salts.add(dict(p.split("=", 1) for p in challenge.decode().split(","))["s"])
    assert len(salts) == 1


@pytest.mark.parametrize(
    "message",
    [b"\xff\xfe", b"", b"garbage", b"n,,n=alice", b"p=tls-unique,,n=a,r=x", b"n,,n=,r="],
)
def test_malformed_scram_fails_cleanly(message: bytes) -> None:
    session = SaslSession("SCRAM-SHA-256", NOBODY.get, SECRET)

    def first_and_final() -> None:  # the first may pass as a client-first; not both
        session.step(message)
        session.step(message)

    with pytest.raises(AuthenticationFailedError):
        first_and_final()


@pytest.mark.parametrize(
    "message", [b"alice\0pw", b"\0alice\0wrong", b"\0ghost\0pw", b"bob\0alice\0pw", b"\xff\0a\0b"]
)
def test_plain_refuses_what_is_not_the_users_password(message: bytes) -> None:
    users = {"alice": make_user("alice", "pw", iterations=MIN_ITERATIONS)}
    with pytest.raises(AuthenticationFailedError):
        SaslSession("PLAIN", users.get, SECRET).step(message)
    session = SaslSession("PLAIN", users.get, SECRET)
    assert session.step(b"\0alice\0pw") == (b"", True)
    assert session.principal == "User:alice"


def test_failures_from_one_host_wait_longer_each_time_and_are_forgotten() -> None:
    throttle = FailureThrottle(base_s=0.1, max_s=1.0, forget_s=60.0, max_hosts=2)
    assert [throttle.failed("h", t) for t in range(5)] == [0.1, 0.2, 0.4, 0.8, 1.0]
    assert throttle.failed("other", 5) == 0.1  # per host
    assert throttle.failed("h", 100) == 0.1  # forgotten after a quiet minute
    throttle.failed("third", 101)  # bounded: the host that failed longest ago goes
    assert throttle.failures("other", 101) == 0


def test_a_success_after_failures_waits_as_long_as_a_failure_would() -> None:
    # no timing oracle: a guesser must not tell a right guess by its answer coming sooner
    throttle = FailureThrottle(base_s=0.1, max_s=1.0, forget_s=60.0)
    assert throttle.penalty("h", 0.0) == 0.0  # no recent failures: a success at once
    throttle.failed("h", 0.0)
    waits = []
    for now in range(1, 7):  # a success, then a failure, at the same moment each time
        success = throttle.penalty("h", now)
        assert success == throttle.failed("h", now)
        waits.append(success)
    assert waits == [0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert throttle.penalty("h", 100.0) == 0.0  # forgotten after a quiet minute


async def test_the_store_file_is_private_and_holds_no_password(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    user = make_user("alice", "correct horse")
    await store.update(lambda s: SecurityState(users={"alice": user}, acls=[]))
    path = tmp_path / "security.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert "correct horse" not in path.read_text()
    assert (await FileStore(tmp_path).load()).users["alice"] == user


async def test_a_running_coordinator_sees_a_change_by_polling(tmp_path: Path) -> None:
    reader = FileStore(tmp_path)
    await reader.load()
    assert await reader.poll() is None
    rule = acl("User:a", Operation.READ, ResourceType.GROUP, "g")
    await FileStore(tmp_path).update(lambda s: SecurityState(users=s.users, acls=[rule]))
    polled = await reader.poll()
    assert polled is not None
    assert polled.acls == [rule]
    assert await reader.poll() is None


async def test_a_store_that_is_not_one_says_so(tmp_path: Path) -> None:
    (tmp_path / "security.json").write_text(json.dumps({"users": 3}))
    with pytest.raises(SecurityStoreError, match="not a huddle security store"):
        await FileStore(tmp_path).load()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tls_cert": "c.pem"}, "both --tls-cert and --tls-key"),
        ({"tls_client_ca": "ca.pem"}, "needs TLS"),
        ({"sasl": "SCRAM-SHA-1", "data_dir": "d"}, "unknown SASL mechanism"),
        ({"sasl": "PLAIN", "data_dir": "d"}, "PLAIN sends passwords in the clear"),
        ({"sasl": "SCRAM-SHA-512"}, "need --data-dir"),
        ({"authorizer": True}, "need --data-dir"),
        ({"super_users": "admin", "authorizer": True, "data_dir": "d"}, "not a principal"),
    ],
)
def test_security_settings_that_cannot_work_are_refused(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ServerConfig(**settings)  # type: ignore[arg-type]


def test_a_certificate_subject_is_written_as_rfc_2253() -> None:
    cert = {
        "subject": (
            (("countryName", "US"),),
            (("organizationName", "acme, inc"),),
            (("commonName", "alice"),),
        )
    }
    assert subject_name(cert) == "CN=alice,O=acme\\, inc,C=US"
