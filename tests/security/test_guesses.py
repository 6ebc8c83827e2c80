"""Password guesses are limited per address group, however many connections make them:
at most four checks under way at once, each failure's answer held back longer than the
last, from the first exchange on; every loopback address is one group (one machine)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import os
import ssl
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import scramp.core
from structlog.typing import EventDict

from huddle.client.connection import connect
from huddle.client.security import Security
from huddle.coordinator.security.listener import PROOFS_AT_ONCE
from huddle.coordinator.security.throttle import (
    LOOPBACK,
    FailureThrottle,
    ProofTurns,
    address_group,
)
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.errors import ErrorCode, SaslAuthenticationFailedError
from huddle.protocol.messages import (
    Handshake,
    HandshakeResult,
    ProtocolError,
    SaslAuthenticate,
    SaslAuthenticateResult,
)
from tests.helpers import (
    DEADLINE_S,
    RawClient,
    fast_server_config,
    running_server,
    serve_process,
    wait_until,
)
from tests.security_setup import keep, make_pki

PASSWORD = "alice-secret"
BURST = 300


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[CoordinatorServer]:
    """SCRAM-SHA-512 (no TLS: the test's connections are cheaper); a 4 s handshake
    timeout, so failure answers are held back at most 2 s."""
    await keep(tmp_path, {"alice": PASSWORD})
    config = fast_server_config(
        data_dir=str(tmp_path), sasl="SCRAM-SHA-512", handshake_timeout_ms=4_000
    )
    async with running_server(config) as running:
        yield running


def most_checks(seconds: float, slots: int, throttle: FailureThrottle) -> int:
    """The most password checks one address group can have made within ``seconds`` of
    its first: each holds one of ``slots`` until its answer, which the n-th failure holds
    back ``throttle.delay(n)`` (checks taking no time at all)."""
    free = [0.0] * slots
    count = 0
    while True:
        free.sort()
        if free[0] > seconds:
            return count
        count += 1
        free[0] += throttle.delay(count)


def test_most_checks_is_the_rule_worked_out() -> None:
    throttle = FailureThrottle(base_s=0.1, max_s=1.0)
    assert most_checks(0.0, 4, throttle) == 4  # four at once from the first exchange
    assert most_checks(0.1, 4, throttle) == 5  # the first answer (100 ms) frees a turn
    assert most_checks(60.0, 4, throttle) <= 4 * 61  # then four a second (max_s), no more


async def guess(port: int, local: str) -> str:
    """One SCRAM exchange as alice with a made-up proof, as a guesser sends it (without
    deriving any key); how it ended: "answered" (refused, after its check), "closed"
    (never checked: the handshake timeout ran out first, and the client was told why), or
    what else came."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(local, 0))
    raw = RawClient(reader, writer)
    try:
        await raw.send(Handshake(version=1, sasl_mechanism="SCRAM-SHA-512"))
        hello = await raw.read_frame()
        if isinstance(hello, HandshakeResult):
            assert hello.error_code == 0, hello
            await raw.send(SaslAuthenticate(auth_bytes=b"n,,n=alice,r=guessing-nonce"))
            first = await raw.read_frame()
            if isinstance(first, SaslAuthenticateResult):
                fields = dict(p.split("=", 1) for p in first.auth_bytes.decode().split(","))
                proof = base64.b64encode(os.urandom(64)).decode()
                final = f"c=biws,r={fields['r']},p={proof}"
                await raw.send(SaslAuthenticate(auth_bytes=final.encode()))
                frames = await raw.frames_until_closed(DEADLINE_S)
            else:
                frames = [first] if first is not None else []
        else:
            frames = [hello] if hello is not None else []
    finally:
        await raw.close()
    if [type(f) for f in frames] == [SaslAuthenticateResult]:
        assert frames[0].error_code == ErrorCode.SASL_AUTHENTICATION_FAILED  # type: ignore[union-attr]
        return "answered"
    if [type(f) for f in frames] == [ProtocolError]:
        assert frames[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE, frames  # type: ignore[union-attr]
        message = frames[0].error_message or ""  # type: ignore[union-attr]
        assert message.startswith("authentication attempts from loopback are being throttled")
        assert "waited 4000 ms for its turn and was not checked; try again later" in message
        return "closed"
    return repr(frames)


async def burst(server: CoordinatorServer, addresses: list[str], logs: list[EventDict]) -> None:
    """``BURST`` guesses at once, spread over ``addresses``: fewer are checked, by the
    end of the burst, than one address group may have checked in that time."""
    began = time.monotonic()
    ends = await asyncio.gather(
        *(guess(server.port, addresses[i % len(addresses)]) for i in range(BURST))
    )
    took = time.monotonic() - began
    checked = sum(e["event"] == "authentication_failed" for e in logs)
    assert server.security is not None
    bound = most_checks(took, PROOFS_AT_ONCE, server.security.throttle)
    assert set(ends) <= {"answered", "closed"}, set(ends)
    assert ends.count("answered") == checked
    assert PROOFS_AT_ONCE <= checked <= bound, (checked, bound, took)
    assert bound < BURST / 4  # and that is few: a burst buys no more guesses
    await wait_until(lambda: server.connection_count == 0, what="every guess gone")
    security = server.security
    assert security.turns.checking(LOOPBACK) == security.turns.waiting(LOOPBACK) == 0


async def test_a_burst_of_guesses_from_one_address_gets_few_checked(
    server: CoordinatorServer, logs: list[EventDict]
) -> None:
    await burst(server, ["127.0.0.1"], logs)


async def test_a_burst_spread_over_loopback_addresses_gets_no_more_checked(
    server: CoordinatorServer, logs: list[EventDict]
) -> None:
    # every 127.0.0.0/8 address is this machine: one group, one allowance
    await burst(server, [f"127.0.0.{i}" for i in range(1, 11)], logs)


async def test_a_burst_of_good_logins_from_one_address_all_succeed(
    server: CoordinatorServer,
) -> None:
    # checks that succeed are answered at once and end their turn: nobody waits long
    bootstrap = f"127.0.0.1:{server.port}"
    security = Security(username="alice", password=PASSWORD)

    async def login() -> str | None:
        async with connect(bootstrap, security=security) as conn:
            return conn.principal

    assert await asyncio.gather(*(login() for _ in range(40))) == ["User:alice"] * 40


async def test_after_failures_a_success_waits_as_long(server: CoordinatorServer) -> None:
    bootstrap = f"127.0.0.1:{server.port}"
    for _ in range(2):  # the next answer to this group is held back 400 ms, success or not
        with pytest.raises(SaslAuthenticationFailedError):
            async with connect(bootstrap, security=Security(username="alice", password="x")):
                pass
    began = time.monotonic()
    async with connect(bootstrap, security=Security(username="alice", password=PASSWORD)) as c:
        assert c.principal == "User:alice"
    assert time.monotonic() - began >= 0.4  # as long as a third failure's


async def test_a_check_waits_its_turn_until_one_under_way_is_answered(
    server: CoordinatorServer, logs: list[EventDict]
) -> None:
    assert server.security is not None
    turns = server.security.turns
    first = [asyncio.ensure_future(guess(server.port, "127.0.0.1")) for _ in range(4)]
    await wait_until(lambda: turns.checking(LOOPBACK) == 4, what="four checks under way")
    fifth = asyncio.ensure_future(guess(server.port, "127.0.0.2"))
    await wait_until(lambda: turns.waiting(LOOPBACK) == 1, what="the fifth to wait")
    assert sum(e["event"] == "authentication_failed" for e in logs) == 4  # not checked yet
    assert await asyncio.gather(*first) == ["answered"] * 4
    assert await fifth == "answered"  # its turn came as the first answer went
    await wait_until(lambda: turns.checking(LOOPBACK) == 0, what="every turn ended")


def test_addresses_are_grouped_as_an_attacker_spreads_them() -> None:
    assert address_group("203.0.113.7") == "203.0.113.7"
    assert address_group("203.0.113.8") == "203.0.113.8"
    assert address_group("::ffff:203.0.113.7") == "203.0.113.7"  # mapped: the IPv4 address
    # an IPv6 /56: a customer's delegation, its 256 /64s and all their addresses
    assert address_group("2001:db8:1:2::5") == address_group("2001:db8:1:2:ffff::9")
    assert address_group("2001:db8:1:2::5") == address_group("2001:db8:1:ff:1::9")
    assert address_group("2001:db8:1:2::5") == "2001:db8:1::/56"
    assert address_group("2001:db8:1:100::5") == "2001:db8:1:100::/56"  # the next /56
    assert address_group("fe80::1%eth0") == "fe80::/56"
    for loopback in ("127.0.0.1", "127.0.0.2", "127.255.0.9", "::1", "::ffff:127.0.0.1"):
        assert address_group(loopback) == LOOPBACK
    assert address_group("/run/huddle.sock") == "/run/huddle.sock"


def test_turns_are_given_in_order_and_a_closed_waiter_loses_its_place() -> None:
    turns = ProofTurns(2)
    started: list[int] = []
    assert turns.take(1, "g", lambda: started.append(1))
    assert turns.take(2, "g", lambda: started.append(2))
    assert turns.take(9, "other", lambda: started.append(9))  # another group's own turns
    for key in (3, 4, 5):
        assert not turns.take(key, "g", lambda key=key: started.append(key))  # type: ignore[misc]
    assert turns.is_waiting(3)
    assert turns.end(4) is None  # gone while it waited
    assert turns.waiting("g") == 2
    next_turn = turns.end(1)
    assert next_turn is not None
    next_turn()
    assert started == [3]
    assert turns.checking("g") == 2
    assert not turns.is_waiting(3)
    assert turns.end(3) is not None  # 5 starts
    assert turns.end(2) is None
    assert turns.end(5) is None
    assert turns.end(5) is None  # ended twice: nothing
    assert turns.checking("g") == turns.waiting("g") == 0
    with pytest.raises(ValueError, match="already"):
        turns.take(9, "other", lambda: None)


async def test_one_stale_password_on_a_host_does_not_keep_its_good_logins_out(
    server: CoordinatorServer,
) -> None:
    # One client of the host with a stale password (six tries, one at a time) makes the
    # group's answers wait its penalty (2 s here), successes too; a success's turn must
    # not be held that long, or 36 of 40 clients logging in together run out of
    # handshake time queued behind the four turns.
    bootstrap = f"127.0.0.1:{server.port}"
    for _ in range(6):
        with pytest.raises(SaslAuthenticationFailedError):
            async with connect(bootstrap, security=Security(username="alice", password="old")):
                pass
    good = Security(username="alice", password=PASSWORD)

    async def login() -> str:
        try:
            async with connect(bootstrap, security=good) as conn:
                return conn.principal or ""
        except Exception as exc:
            return type(exc).__name__

    results = await asyncio.gather(*(login() for _ in range(40)))
    assert results == ["User:alice"] * 40, Counter(results)


async def abandoned_guess(
    port: int, context: ssl.SSLContext, mechanism: str
) -> tuple[RawClient, bytes]:
    """A TLS connection ready to send its guess (SCRAM: past its first message), and the
    guess; the guesser will not wait for the answer."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
    )
    raw = RawClient(reader, writer)
    await raw.send(Handshake(version=1, sasl_mechanism=mechanism))
    await raw.read_frame()
    if mechanism == "PLAIN":
        return raw, b"\0alice\0a guess"
    await raw.send(SaslAuthenticate(auth_bytes=b"n,,n=alice,r=guess"))
    first = await raw.read_frame()
    assert isinstance(first, SaslAuthenticateResult), first
    fields = dict(p.split("=", 1) for p in first.auth_bytes.decode().split(","))
    return raw, f"c=biws,r={fields['r']},p={'A' * 88}".encode()


async def abandon_waves(
    port: int, context: ssl.SSLContext, mechanism: str, checked: Callable[[], int]
) -> float:
    """Ten waves of four guesses, each connection aborted once its guess was checked (or
    after a second): how long it took."""
    began = time.monotonic()
    for wave in range(0, 40, 4):
        guesses = [await abandoned_guess(port, context, mechanism) for _ in range(4)]
        for raw, message in guesses:
            await raw.send(SaslAuthenticate(auth_bytes=message))

        def at_least(count: int) -> bool:
            return checked() >= count

        with contextlib.suppress(AssertionError):  # checked by now, or never mind
            await wait_until(functools.partial(at_least, wave + 4), wait_s=1.0, what="checks")
        for raw, _ in guesses:
            raw.writer.transport.abort()  # its answer not awaited
    return time.monotonic() - began


@pytest.mark.e2e
async def test_a_guess_abandoned_after_its_check_holds_its_turn_until_its_answer(
    tmp_path: Path,
) -> None:
    # `huddle serve` (uvloop) over TLS: a guesser that closes each connection once its
    # proof was checked must not free the turn before the answer's time: 40 checks within
    # about a second, where the rule allows 4 at first and a fifth only after 100 ms.
    pki = make_pki(tmp_path)
    await keep(tmp_path, {"alice": PASSWORD})
    flags = ["--data-dir", str(tmp_path), "--sasl", "SCRAM-SHA-512"]
    flags += ["--tls-cert", pki.server, "--tls-key", pki.server]
    context = ssl.create_default_context(cafile=pki.ca)
    async with serve_process(*flags) as (_, port, events):

        def checked() -> int:
            return sum(e["event"] == "authentication_failed" for e in events)

        took = await abandon_waves(port, context, "SCRAM-SHA-512", checked)
        allowed = most_checks(took, PROOFS_AT_ONCE, FailureThrottle(max_s=5.0))  # serve's
        assert checked() <= allowed, (checked(), round(took, 3), allowed)


async def test_a_plain_guess_abandoned_in_its_check_counts_and_holds_its_turn(
    tmp_path: Path, logs: list[EventDict]
) -> None:
    # PLAIN derives the key in a pool; a guesser that closes the connection while it does
    # must not get its turn back before the answer's time (a new guess at once), nor its
    # guess uncounted: it would get as many guesses as it can open connections
    pki = make_pki(tmp_path)
    await keep(tmp_path, {"alice": PASSWORD})
    config = fast_server_config(
        data_dir=str(tmp_path), sasl="PLAIN", tls_cert=pki.server, tls_key=pki.server
    )
    deriving, finish = threading.Event(), threading.Event()
    real = scramp.core.hi

    def held_derivation(hf: object, password: bytes, salt: bytes, iterations: object) -> bytes:
        deriving.set()  # the check is made
        finish.wait(DEADLINE_S)  # until the client has gone
        return real(hf, password, salt, iterations)  # type: ignore[no-any-return]

    context = ssl.create_default_context(cafile=pki.ca)
    scramp.core.hi = held_derivation
    try:
        async with running_server(config) as running:
            assert running.security is not None
            running.security.throttle = FailureThrottle(base_s=1.0, max_s=1.0)
            turns = running.security.turns
            raw, guess = await abandoned_guess(running.port, context, "PLAIN")
            await raw.send(SaslAuthenticate(auth_bytes=guess))
            assert await asyncio.to_thread(deriving.wait, DEADLINE_S)
            raw.writer.transport.abort()
            await wait_until(lambda: running.connection_count == 0, what="the close seen")
            finish.set()

            def failures() -> list[EventDict]:
                return [e for e in logs if e["event"] == "authentication_failed"]

            await wait_until(lambda: bool(failures()), what="the abandoned guess counted")
            assert [(e["failures"], e["delay_ms"]) for e in failures()] == [(1, 1000)]
            assert turns.checking(LOOPBACK) == 1  # its turn, until its answer's time
            began = time.monotonic()
            await wait_until(lambda: turns.checking(LOOPBACK) == 0, what="the turn back")
            assert time.monotonic() - began > 0.5
    finally:
        finish.set()
        scramp.core.hi = real
