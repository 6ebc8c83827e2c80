"""``huddle serve --consumer-assignors``: the server assignors consumer-protocol groups may
ask for, the first the default (Kafka's ``group.consumer.assignors``); huddle's ``deferred``
and ``paced`` are offered only when named."""

from __future__ import annotations

import pytest

from huddle.cli import parse_args
from huddle.cli.serve import serve_settings
from huddle.cli.usage import UsageError
from huddle.client.connection import connect
from huddle.coordinator.config import ServerConfig
from huddle.coordinator.consumer.assignors import DeferredAssignor
from huddle.protocol.consumer_messages import ConsumerHeartbeatRequest, ConsumerHeartbeatResponse
from huddle.protocol.errors import ErrorCode, UnsupportedAssignorError
from huddle.protocol.messages import CreateTopicsRequest, CreateTopicsResponse, TopicSpec
from tests.helpers import fast_server_config, running_server


def _settings(*argv: str, env: dict[str, str] | None = None) -> ServerConfig:
    return serve_settings(parse_args(["serve", *argv]), env or {}).config


def test_the_flag_names_the_offered_assignors_first_the_default() -> None:
    assert _settings().consumer_assignors == "uniform,range"  # Kafka's default
    chosen = _settings("--consumer-assignors", "deferred, uniform,range,paced")
    assert chosen.consumer_assignors == "deferred, uniform,range,paced"
    env = _settings(env={"HUDDLE_CONSUMER_ASSIGNORS": "paced"})
    assert env.consumer_assignors == "paced"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("uniform,sticky", "no server assignor sticky"),
        (" , ", "name one or more of uniform, range, deferred, paced"),
    ],
)
def test_an_unknown_or_empty_assignor_list_is_refused(value: str, why: str) -> None:
    with pytest.raises(UsageError, match=why):
        _settings(f"--consumer-assignors={value}")


async def _beat(port: int, group: str, assignor: str | None) -> ConsumerHeartbeatResponse:
    async with connect(f"127.0.0.1:{port}") as conn:
        await conn.call(
            CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=2)]),
            CreateTopicsResponse,
        )
        return await conn.call(
            ConsumerHeartbeatRequest(
                group_id=group,
                member_id="m-1",
                member_epoch=0,
                rebalance_timeout_ms=10_000,
                subscribed_topic_names=["t"],
                server_assignor=assignor,
                owned=[],
            ),
            ConsumerHeartbeatResponse,
        )


async def test_a_member_may_ask_only_for_an_offered_assignor() -> None:
    async with running_server(fast_server_config()) as server:
        with pytest.raises(UnsupportedAssignorError, match="Supported assignors: uniform, range"):
            await _beat(server.port, "g", "deferred")

    offered = fast_server_config(consumer_assignors="deferred,uniform,range,paced")
    async with running_server(offered) as server:
        for group, assignor in (("g", "paced"), ("h", None)):
            answer = await _beat(server.port, group, assignor)
            assert answer.error_code == ErrorCode.NONE, answer.error_message
            assert answer.member_epoch > 0
        groups = server.consumer.core.groups
        # a member that asks for none gets the first named: the default
        assert groups["h"].preferred_assignor(server.consumer.core.config.assignors[0]) == (
            "deferred"
        )
        assert groups["g"].preferred_assignor("deferred") == "paced"


async def test_the_deferred_hold_is_set_by_its_flag() -> None:
    assert _settings().consumer_deferred_hold_ms == 300_000
    config = _settings("--consumer-assignors=deferred", "--consumer-deferred-hold-ms=900000")
    with pytest.raises(UsageError, match="consumer_deferred_hold_ms must be positive"):
        _settings("--consumer-deferred-hold-ms=0")
    async with running_server(fast_server_config(**_overrides(config))) as server:
        core = server.consumer.core
        deferred = core.assignors["deferred"]
        assert isinstance(deferred, DeferredAssignor)
        assert deferred.hold_ms == 900_000
        # the group remembers a departure as long as it is held
        assert core.config.departure_memory_ms == 900_000


def _overrides(config: ServerConfig) -> dict[str, object]:
    return {
        "consumer_assignors": config.consumer_assignors,
        "consumer_deferred_hold_ms": config.consumer_deferred_hold_ms,
    }
