"""Failed logins from a host slow its logins down (docs/security.md: the coordinator holds
a login's answer back up to MAX_LOGIN_HOLD_S); they must never lock out a SASL member of
the same host: its login waits longer than any such hold."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from huddle.client import Admin, Member, TopicPartition
from huddle.client.connection import connect
from huddle.client.security import Security
from huddle.client.unreachable import LOGIN_TIMEOUT_S
from huddle.coordinator.config import ServerConfig
from huddle.coordinator.security.listener import ListenerSecurity
from huddle.coordinator.security.throttle import LOOPBACK, FailureThrottle
from huddle.protocol.errors import SaslAuthenticationFailedError
from huddle.protocol.messages import MAX_LOGIN_HOLD_S
from tests.helpers import fast_server_config, running_server
from tests.security_setup import keep

GOOD = Security(username="alice", password="alice-secret")
STALE = Security(username="alice", password="an-old-password")


def test_a_login_waits_longer_than_the_coordinator_ever_holds_its_answer() -> None:
    default = ListenerSecurity(ServerConfig(handshake_timeout_ms=60_000))
    assert default.throttle.max_s == FailureThrottle().max_s == MAX_LOGIN_HOLD_S
    assert LOGIN_TIMEOUT_S >= MAX_LOGIN_HOLD_S + 2.0  # the answer's way back, a busy host
    with pytest.raises(ValueError, match="at most 5 s"):
        FailureThrottle(max_s=MAX_LOGIN_HOLD_S + 1)


async def test_a_default_member_gets_in_after_six_failed_logins_from_its_host(
    tmp_path: Path,
) -> None:
    await keep(tmp_path, {"alice": "alice-secret"})
    config = fast_server_config(
        data_dir=str(tmp_path), sasl="SCRAM-SHA-512", handshake_timeout_ms=10_000
    )
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with Admin(bootstrap, security=GOOD) as admin:
            await admin.create_topic("t", 1)

        async def fail_to_log_in() -> None:  # a neighbour retrying a stale password
            with pytest.raises(SaslAuthenticationFailedError):
                async with connect(bootstrap, security=STALE):
                    pass

        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(fail_to_log_in)
        assert server.security is not None
        hold = server.security.throttle.penalty(LOOPBACK, time.monotonic())
        member = Member(bootstrap, group_id="g", topics=["t"], security=GOOD)
        connect_timeout = member._driver.heartbeat_timeout_ms / 1000  # a default member's
        assert hold > connect_timeout  # what locked such a member out
        async with member:
            await member.wait_stable(timeout=15)
            assert member.assignment == {TopicPartition("t", 0)}
