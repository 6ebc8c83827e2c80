"""Real clients whose ApiVersions is newer than the listener serves retry with the version
they are told of and go on: the UNSUPPORTED_VERSION answer names ApiVersions' own range
alone, as Kafka's ``ApiVersionsRequest.getErrorResponse``. The listener here serves
ApiVersions 0-1 only, below what librdkafka (kcat, confluent-kafka), kafka-python and
kafkajs send first; aiokafka sends v0 and needs no retry."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from structlog.typing import EventDict

from huddle.chaos.kafka_workers import launch
from huddle.chaos.kafka_workers.options import DriverOptions
from huddle.client.admin import Admin
from huddle.coordinator.kafka import apis
from huddle.coordinator.kafka.apis import Api
from tests.helpers import DEADLINE_S
from tests.kafka.conftest import Listening

_RETRIED = ("kafka-python", "confluent-kafka", "kcat", "kafkajs")  # aiokafka sends v0


async def _first_assignment(name: str, options: DriverOptions) -> dict[str, Any]:
    """Run client ``name``'s driver until it owns partitions: that line."""
    process = await asyncio.create_subprocess_exec(
        *launch.command(name, options),
        env=launch.environment(name),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    seen: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(3 * DEADLINE_S):
            while line := await process.stdout.readline():
                event: dict[str, Any] = json.loads(line)
                seen.append(event)
                if event.get("event") == "assigned" and event["owned"]:
                    return event
    except TimeoutError:
        pass
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
    raise AssertionError(f"{name} was never assigned; it said {seen[-5:]}")


@pytest.mark.parametrize("name", list(launch.CLIENTS))
async def test_a_client_retries_an_api_versions_not_served_and_joins(
    kafka: Listening, logs: list[EventDict], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    why = launch.missing(name)
    if why is not None:
        pytest.skip(why)
    monkeypatch.setitem(apis.SERVED, Api.API_VERSIONS, (0, 1))
    async with Admin(f"127.0.0.1:{kafka.server.port}") as admin:
        await admin.create_topic("t", 2)
    options = DriverOptions(
        bootstrap=f"127.0.0.1:{kafka.port}",
        group="g",
        topic="t",
        strategy=launch.CLIENTS[name].eager,
        max_seconds=3 * DEADLINE_S,
    )
    assigned = await _first_assignment(name, options)
    assert sorted(map(tuple, assigned["owned"])) == [("t", 0), ("t", 1)]
    refused = [
        e for e in logs if e["event"] == "kafka_not_served" and e["api_key"] == Api.API_VERSIONS
    ]
    assert bool(refused) == (name in _RETRIED)
