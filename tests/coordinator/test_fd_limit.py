"""Running out of file descriptors (issue 11, item 7).

The default --max-connections (10,000) is above the common soft limit of 1,024 open files;
past the limit, connections were reset without a word. ``huddle serve`` now raises its soft
limit to the hard one, and if that still cannot hold --max-connections it says so and
allows fewer, so every connection past the limit is refused with the ProtocolError the
README promises.
"""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Callable
from pathlib import Path

import pytest

from huddle.coordinator.server import FD_RESERVE
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import Handshake, HandshakeResult, ProtocolError
from tests.helpers import DEADLINE_S, RawClient, serve_process

pytestmark = pytest.mark.e2e


def nofile(soft: int, hard: int) -> Callable[[], None]:
    def limit() -> None:  # in the child, before exec
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return limit


def open_files_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-file limit in /proc")


async def test_the_soft_limit_is_raised_to_the_hard_limit() -> None:
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4_096)
    async with serve_process(
        "--max-connections", str(hard - FD_RESERVE), preexec_fn=nofile(100, hard)
    ) as (process, _, events):
        assert open_files_limit(process.pid) == hard
        raised = [e for e in events if e["event"] == "fd_limit_raised"]
        assert [(e["was"], e["soft"]) for e in raised] == [(100, hard)]
        assert not [e for e in events if e["event"] == "max_connections_over_fd_limit"]


async def test_past_the_fd_limit_connections_are_refused_with_a_reason() -> None:
    async with serve_process("--max-connections", "10000", preexec_fn=nofile(100, 100)) as (
        _,
        port,
        events,
    ):
        (warning,) = [e for e in events if e["event"] == "max_connections_over_fd_limit"]
        allowed = 100 - FD_RESERVE
        assert (warning["level"], warning["allowed"], warning["fd_limit"]) == (
            "warning",
            allowed,
            100,
        )
        admitted = []
        for _ in range(allowed):
            client = await RawClient.open(port)
            await client.handshake()
            admitted.append(client)
        for _ in range(5):  # past the limit: told why, every time, and the server goes on
            refused = await RawClient.open(port)
            frames = await refused.frames_until_closed()
            assert len(frames) == 1, frames
            (error,) = frames
            assert isinstance(error, ProtocolError), error
            assert error.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert f"connection limit of {allowed} reached" in error.error_message
            await refused.close()
        await admitted.pop().close()
        again = await admitted_once_freed(port)  # a freed slot is used again
        for client in [*admitted, again]:
            await client.close()


async def admitted_once_freed(port: int) -> RawClient:
    """A connection admitted once the server has noticed a slot was freed (its close is seen
    a moment after ours): until then connections are refused."""
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while True:
        client = await RawClient.open(port)
        await client.send(Handshake(version=1, client_id="again"))
        answer = await client.read_frame()
        if isinstance(answer, HandshakeResult):
            return client
        await client.close()
        assert asyncio.get_running_loop().time() < deadline, "no slot freed"
