"""A user who does not exist cannot be told from one who does, by anything a client sees:
the salts and iteration counts of both SCRAM mechanisms, how long each answer takes, the
error, how the connection ends, and the slow-down that follows."""

from __future__ import annotations

import base64
import os
import ssl
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
import scramp.core
from structlog.typing import EventDict

from huddle.coordinator.security.credentials import User, make_user
from huddle.coordinator.security.listener import typical_iterations
from huddle.coordinator.security.sasl import AuthenticationFailedError, SaslSession
from huddle.coordinator.security.store import FileStore
from huddle.coordinator.security.throttle import FailureThrottle
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.messages import (
    Handshake,
    HandshakeResult,
    SaslAuthenticate,
    SaslAuthenticateResult,
    ServerFrame,
)
from tests.helpers import RawClient, fast_server_config, running_server
from tests.security_setup import Pki, make_pki

SHA256, SHA512 = "SCRAM-SHA-256", "SCRAM-SHA-512"
# Real users' counts differ between the mechanisms here; SCRAM-SHA-256's (which PLAIN
# checks against) is high enough that a check skipped would be plain to see in the timing.
ITERATIONS = {SHA256: 40_960, SHA512: 4_096}
KNOWN, UNKNOWN = "alice", "ghost"


def user(name: str, password: str) -> User:
    scram = {}
    for mechanism, count in ITERATIONS.items():
        made = make_user(name, password, mechanisms=(mechanism,), iterations=count)
        scram.update(made.scram)
    return User(name=name, scram=scram)


@pytest.fixture
async def server(tmp_path: Path, pki: Pki) -> AsyncIterator[CoordinatorServer]:
    users = {n: user(n, f"{n}-secret") for n in ("alice", "bob", "carol")}
    await FileStore(tmp_path).update(lambda s: msgspec.structs.replace(s, users=users))
    config = fast_server_config(
        data_dir=str(tmp_path),
        tls_cert=pki.server,
        tls_key=pki.server,
        sasl=f"{SHA512},{SHA256},PLAIN",
    )
    async with running_server(config) as running:
        yield running


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    (tmp_path / "pki").mkdir()
    return make_pki(tmp_path / "pki")


@dataclass
class Seen:
    """What a client sees of one exchange with a wrong password."""

    hello: HandshakeResult
    first: dict[str, str]  # the fields of the server's first SCRAM message (none for PLAIN)
    first_s: float  # how long the first SCRAM answer took
    end: list[ServerFrame]  # every frame after the password or proof, until closed
    end_s: float  # how long the answer to it took


async def exchange(server: CoordinatorServer, pki: Pki, mechanism: str, name: str) -> Seen:
    context = ssl.create_default_context(cafile=pki.ca)
    raw = await RawClient.open(server.port, ssl=context)
    try:
        await raw.send(Handshake(version=1, client_id="probe", sasl_mechanism=mechanism))
        hello = await raw.read_frame()
        assert isinstance(hello, HandshakeResult)
        first: dict[str, str] = {}
        first_s = 0.0
        if mechanism == "PLAIN":
            message = f"\0{name}\0wrong-password".encode()
        else:
            began = time.perf_counter()
            await raw.send(SaslAuthenticate(auth_bytes=f"n,,n={name},r=client-nonce".encode()))
            answer = await raw.read_frame()
            first_s = time.perf_counter() - began
            assert isinstance(answer, SaslAuthenticateResult)
            first = dict(p.split("=", 1) for p in answer.auth_bytes.decode().split(","))
            proof = base64.b64encode(os.urandom(64 if mechanism == SHA512 else 32)).decode()
            message = f"c=biws,r={first['r']},p={proof}".encode()
        began = time.perf_counter()
        await raw.send(SaslAuthenticate(auth_bytes=message))
        answered = await raw.read_frame()
        end_s = time.perf_counter() - began
        assert answered is not None
        end = [answered, *await raw.frames_until_closed()]
    finally:
        await raw.close()
    return Seen(hello, first, first_s, end, end_s)


async def test_the_scram_answers_are_alike_for_a_known_and_an_unknown_user(
    server: CoordinatorServer, pki: Pki
) -> None:
    assert server.security is not None
    server.security.throttle = FailureThrottle(base_s=0.0, max_s=0.0)  # no waits, here
    seen = {
        (name, mechanism, attempt): await exchange(server, pki, mechanism, name)
        for name in (KNOWN, UNKNOWN)
        for mechanism in (SHA256, SHA512)
        for attempt in (1, 2)
    }
    for mechanism in (SHA256, SHA512):
        known, unknown = seen[KNOWN, mechanism, 1], seen[UNKNOWN, mechanism, 1]
        assert known.hello == unknown.hello
        assert list(known.first) == list(unknown.first) == ["r", "s", "i"]
        # the iteration count real users have for this mechanism
        assert unknown.first["i"] == known.first["i"] == str(ITERATIONS[mechanism])
        assert len(base64.b64decode(unknown.first["s"])) == len(base64.b64decode(known.first["s"]))
        assert len(unknown.first["r"]) == len(known.first["r"])  # as long a server nonce
        for name in (KNOWN, UNKNOWN):  # asked again: the same salt and count
            again = seen[name, mechanism, 2]
            assert again.first["s"] == seen[name, mechanism, 1].first["s"]
            assert again.first["i"] == seen[name, mechanism, 1].first["i"]
        # one answer, the same words, and the connection closed, whoever was tried
        assert [type(f) for f in known.end] == [SaslAuthenticateResult]
        assert known.end == unknown.end
    # a user's salts differ between the mechanisms: an unknown user's do too
    for name in (KNOWN, UNKNOWN):
        assert seen[name, SHA256, 1].first["s"] != seen[name, SHA512, 1].first["s"]
    assert seen[KNOWN, SHA256, 1].first["i"] != seen[KNOWN, SHA512, 1].first["i"]


def alike(known: list[float], unknown: list[float]) -> bool:
    """Whether two sets of timings cannot be told apart by their medians (generously:
    within half of the larger one, or 3 ms: a loaded machine's jitter; a PLAIN check
    skipped would be over 10 ms faster here)."""
    a, b = statistics.median(known), statistics.median(unknown)
    return abs(a - b) <= max(0.5 * max(a, b), 0.003)


@pytest.mark.parametrize("mechanism", [SHA512, SHA256, "PLAIN"])
async def test_an_unknown_user_is_answered_as_fast_as_a_known_one(
    server: CoordinatorServer, pki: Pki, mechanism: str
) -> None:
    assert server.security is not None
    server.security.throttle = FailureThrottle(base_s=0.0, max_s=0.0)  # the check's own time
    times: dict[str, list[Seen]] = {KNOWN: [], UNKNOWN: []}
    for _ in range(21):  # interleaved: a slow moment of the machine falls on both
        for name in (KNOWN, UNKNOWN):
            times[name].append(await exchange(server, pki, mechanism, name))
    known, unknown = times[KNOWN], times[UNKNOWN]
    ends = ([s.end_s for s in known], [s.end_s for s in unknown])
    assert alike(*ends), ends
    if mechanism != "PLAIN":
        firsts = ([s.first_s for s in known], [s.first_s for s in unknown])
        assert alike(*firsts), firsts
    if mechanism == "PLAIN":  # it derives the key: well over the network's time here
        assert statistics.median(ends[0]) > 0.005


async def test_a_failure_for_an_unknown_user_counts_as_one_for_a_known_user(
    server: CoordinatorServer, pki: Pki, logs: list[EventDict]
) -> None:
    for name in (KNOWN, UNKNOWN, KNOWN, UNKNOWN):
        await exchange(server, pki, SHA512, name)
    failures = [e for e in logs if e["event"] == "authentication_failed"]
    assert [e["username"] for e in failures] == [KNOWN, UNKNOWN, KNOWN, UNKNOWN]
    assert [e["delay_ms"] for e in failures] == [100, 200, 400, 800]
    assert [e["failures"] for e in failures] == [1, 2, 3, 4]


def plain_derivations(users: dict[str, User], name: str) -> list[tuple[str, int]]:
    """The key derivations (hash, iterations) a PLAIN check of ``name`` with a wrong
    password makes, the decoy's shaped as a listener with these users shapes it."""
    seen: list[tuple[str, int]] = []
    real = scramp.core.hi

    def spy(hf: object, password: bytes, salt: bytes, iterations: object) -> bytes:
        seen.append((getattr(hf, "__name__", str(hf)), int(iterations)))  # type: ignore[call-overload]
        return real(hf, password, salt, iterations)  # type: ignore[no-any-return]

    scramp.core.hi = spy
    try:
        shape = typical_iterations(users.values())["PLAIN"]
        session = SaslSession("PLAIN", users.get, os.urandom(32), shape)
        with pytest.raises(AuthenticationFailedError):
            session.step(b"\0" + name.encode() + b"\0a wrong guess")
    finally:
        scramp.core.hi = real
    return seen


def test_a_plain_check_of_an_unknown_user_does_the_work_a_real_users_does() -> None:
    # users kept for SCRAM-SHA-512 only (`huddle users add --mechanism SCRAM-SHA-512`), a
    # listener with --sasl SCRAM-SHA-512,PLAIN: a real user's PLAIN check derives with
    # SHA-512 (about twice SHA-256's time); an unknown user's must too
    users = {n: make_user(n, "pw", mechanisms=(SHA512,)) for n in ("bob", "carol")}
    real = plain_derivations(users, "bob")
    assert real == [("openssl_sha512", 8192)]
    assert plain_derivations(users, "zed") == real


def test_a_plain_decoy_is_shaped_as_most_users_first_credential() -> None:
    # PLAIN checks a user with both credentials against SCRAM-SHA-256's: most users here
    # are SCRAM-SHA-512 only, with 4096 iterations; one has both
    users = {n: make_user(n, "pw", mechanisms=(SHA512,), iterations=4_096) for n in "abc"}
    users["dan"] = user("dan", "pw")  # SHA-256 with 40960, SHA-512 with 4096
    assert plain_derivations(users, "dan") == [("openssl_sha256", ITERATIONS[SHA256])]
    assert plain_derivations(users, "a") == [("openssl_sha512", 4_096)]
    assert plain_derivations(users, "zed") == [("openssl_sha512", 4_096)]
    # and with no users at all, as a user made with the defaults would be checked
    assert plain_derivations({}, "zed") == [("openssl_sha256", 8_192)]
