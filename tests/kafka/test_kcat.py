"""kcat from Debian (librdkafka 2.0.2, which needs single exact versions and misreads an
ApiVersions answer's default tagged fields) lists, produces and consumes in a group."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from huddle.client.admin import Admin
from tests.helpers import DEADLINE_S
from tests.kafka.conftest import Listening

KCAT = shutil.which("kcat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (apt-get install kcat)")


async def _kcat(*args: str, stdin: bytes = b"") -> str:
    assert KCAT is not None
    process = await asyncio.create_subprocess_exec(
        KCAT,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(stdin), DEADLINE_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode == 0, out.decode()
    return out.decode()


async def test_kcat_lists_produces_and_consumes_in_a_group(kafka: Listening) -> None:
    async with Admin(f"127.0.0.1:{kafka.server.port}") as admin:
        await admin.create_topic("demo", 2)
    broker = f"127.0.0.1:{kafka.port}"
    listed = await _kcat("-L", "-b", broker)
    assert f"broker 0 at {broker}" in listed
    assert 'topic "demo" with 2 partitions' in listed
    await _kcat("-P", "-b", broker, "-t", "demo", "-p", "1", stdin=b"a\nb\nc\n")
    consumed = await _kcat("-b", broker, "-G", "kgroup", "demo", "-o", "beginning", "-e")
    assert "assigned: demo [0], demo [1]" in consumed
    records = [line for line in consumed.splitlines() if not line.startswith("%")]
    assert records == ["a", "b", "c"]
