"""A member that cannot reach its coordinator says so, in a warning at most every 10 s
(``coordinator_unreachable``: address, error, attempts), with a ``hint`` when the failure
looks like TLS set up on one side only."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from structlog.typing import EventDict

from huddle.client import Member, MemberFailedError
from huddle.client.security import NO_SECURITY, Security
from huddle.client.unreachable import (
    CERT_NOT_TRUSTED,
    CLIENT_CERT_REFUSED,
    PLAIN_TO_TLS,
    TLS_TO_PLAIN,
    CoordinatorUnreachableError,
    UnreachableWarnings,
)
from huddle.logs import library_logger
from tests.helpers import fast_server_config, member, running_server, wait_until
from tests.security_setup import Pki, make_pki

UNREACHABLE = "coordinator_unreachable"


def warnings_in(logs: list[EventDict]) -> list[EventDict]:
    return [e for e in logs if e["event"] == UNREACHABLE]


def quick_retrying(bootstrap: str, security: Security = NO_SECURITY) -> Member:
    """The shared test member, retrying its connection every 10-20 ms."""
    return member(bootstrap, retry_backoff_ms=10, max_retry_backoff_ms=20, security=security)


def test_the_warning_is_logged_at_most_once_every_ten_seconds(logs: list[EventDict]) -> None:
    warnings = UnreachableWarnings(library_logger("huddle.member").bind(group_id="g"))
    refused = CoordinatorUnreachableError("cannot connect to h:1: connection refused", "h:1")
    for now in (100.0, 103.0, 109.9, 110.0, 112.0):  # seconds, as the member's clock says
        warnings.failed(now, "h:1", refused)
    warnings.reached()  # the next failure counts from 1 again, logged 10 s after the last
    warnings.failed(115.0, "h:1", refused)
    warnings.failed(120.0, "h:1", refused)
    assert warnings_in(logs) == [
        {
            "event": UNREACHABLE,
            "group_id": "g",
            "address": "h:1",
            "error": "cannot connect to h:1: connection refused",
            "attempts": attempts,
            "log_level": "warning",
        }
        for attempts in (1, 4, 2)
    ]


async def test_a_member_retrying_a_refused_address_warns_once_not_at_each_try(
    logs: list[EventDict],
) -> None:
    async with quick_retrying("127.0.0.1:1") as lonely:
        tries = lonely._runtime.unreachable
        await wait_until(lambda: tries.attempts >= 5, what="five failed tries")
        assert not lonely.connected
    (warning,) = warnings_in(logs)  # well within 10 s
    assert warning["log_level"] == "warning"
    assert warning["address"] == "127.0.0.1:1"
    assert warning["attempts"] == 1
    assert "cannot connect to 127.0.0.1:1: connection refused" in warning["error"]
    assert "hint" not in warning  # nothing to do with TLS


def listener(pki: Pki, kind: str) -> dict[str, Any]:
    if kind == "plain":
        return {}
    tls = {"tls_cert": pki.server, "tls_key": pki.server}
    return tls if kind == "tls" else {**tls, "tls_client_ca": pki.ca}


CASES = {
    # listener, the client's security (ca, cert, server_hostname), the hint
    "a plain client at a TLS listener": ("tls", (False, None, None), PLAIN_TO_TLS),
    "a TLS client at a plain listener": ("plain", (True, None, None), TLS_TO_PLAIN),
    "the coordinator's certificate names another host": (
        "tls",
        (True, None, "elsewhere.example"),
        CERT_NOT_TRUSTED,
    ),
    "no client certificate for an mTLS listener": ("mtls", (True, None, None), CLIENT_CERT_REFUSED),
    "a client certificate of another CA": ("mtls", (True, "stranger", None), CLIENT_CERT_REFUSED),
}


@pytest.mark.parametrize(("kind", "client", "hint"), CASES.values(), ids=CASES.keys())
async def test_a_tls_mismatch_is_named_in_the_warning(
    tmp_path: Path,
    logs: list[EventDict],
    kind: str,
    client: tuple[bool, str | None, str | None],
    hint: str,
) -> None:
    pki = make_pki(tmp_path)
    with_ca, cert, hostname = client
    security = Security(
        ca_file=pki.ca if with_ca else None,
        cert_file=getattr(pki, cert) if cert else None,
        server_hostname=hostname,
    )
    async with running_server(fast_server_config(**listener(pki, kind))) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        # a TLS handshake that fails outright stops the member (not retried); one the
        # coordinator cuts short is retried: either way, the warning comes first
        with contextlib.suppress(MemberFailedError):
            async with quick_retrying(bootstrap, security):
                await wait_until(lambda: bool(warnings_in(logs)), what="the warning")
    warning = warnings_in(logs)[0]
    assert warning["address"] == bootstrap
    assert warning["attempts"] == 1
    assert warning["hint"] == hint


async def test_an_address_that_closes_unanswered_gets_both_causes_in_its_hint(
    logs: list[EventDict],
) -> None:
    """A plain address that accepts and closes at once may be a TLS listener, or a port
    forward (a proxy, a load balancer) with no coordinator behind it: the hint names both."""

    async def close_at_once(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
    bootstrap = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with quick_retrying(bootstrap):
            await wait_until(lambda: bool(warnings_in(logs)), what="the warning")
    finally:
        server.close()
    hint = warnings_in(logs)[0]["hint"]
    assert hint.startswith("TLS mismatch, or nothing behind the address:")
    assert "A TLS listener does this" in hint
    assert "so does a proxy or port forward with no coordinator behind it" in hint
