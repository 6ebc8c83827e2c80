"""``huddle serve`` and the signals an operator sends it."""

from __future__ import annotations

import asyncio
import signal

import pytest

from huddle.protocol.messages import ListTopicsRequest, ListTopicsResponse
from tests.helpers import DEADLINE_S, RawClient, serve_process, wait_until

pytestmark = pytest.mark.e2e


async def test_sighup_without_tls_reloads_nothing_and_stops_nothing() -> None:
    """SIGHUP reloads the TLS certificate; a server without TLS has nothing to reload and
    serves on (the signal's default action would end it at once, with none of SIGTERM's
    graceful stop: no members told it is stopping, no answers flushed)."""
    async with serve_process() as (process, port, events):
        member = await RawClient.open(port)
        await member.handshake()
        process.send_signal(signal.SIGHUP)
        await wait_until(
            lambda: (
                process.returncode is not None or any(e.get("signal") == "SIGHUP" for e in events)
            ),
            what="the SIGHUP handled, or the process gone",
        )
        assert process.returncode is None, f"SIGHUP ended the server ({process.returncode})"
        answer = await member.call(ListTopicsRequest())
        assert isinstance(answer, ListTopicsResponse), answer
        await member.close()
        process.terminate()
        assert await asyncio.wait_for(process.wait(), DEADLINE_S) == 0
        await wait_until(
            lambda: any(e["event"] == "server_stopped" for e in events),
            what="the graceful stop logged",
        )
