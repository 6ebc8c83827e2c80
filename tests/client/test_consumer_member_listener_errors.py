"""``Member(group_protocol="consumer")`` whose listener raises: the member stops with a
``MemberFailedError`` that names the callback and carries what it raised (as the classic
member's), and a revocation that raises as the member closes does not keep it in the group:
it leaves all the same, so the others take its partitions at once."""

from __future__ import annotations

import pytest

from huddle.client.events import MemberFailedError
from huddle.coordinator.config import ServerConfig
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ErrorCode
from tests.client.test_consumer_member import Recorder, _all, _member, _topic
from tests.helpers import fast_server_config, running_server, wait_until

LONG_SESSION_MS = 60_000  # no wait here is that long: only a leave frees a's partitions


class Raising(Recorder):
    def __init__(self, callback: str) -> None:
        super().__init__()
        self.callback = callback

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        if self.callback == "on_partitions_assigned" and assigned:
            raise RuntimeError("no database")
        await super().on_partitions_assigned(assigned)

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        if self.callback == "on_partitions_revoked" and revoked:
            raise RuntimeError("no database")
        await super().on_partitions_revoked(revoked)


def _config() -> ServerConfig:
    return fast_server_config(
        consumer_session_timeout_ms=LONG_SESSION_MS, consumer_heartbeat_interval_ms=200
    )


async def test_a_callback_that_raises_fails_the_member_saying_which_and_what() -> None:
    async with running_server(_config()) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)
        with pytest.raises(MemberFailedError) as raised:
            async with _member(bootstrap, Raising("on_partitions_assigned")) as a:
                await a.wait_stable(10)
        failure = raised.value
        assert "on_partitions_assigned" in str(failure)
        assert "no database" in str(failure)
        assert isinstance(failure.__cause__, RuntimeError)
        assert failure.code is None


async def test_a_revocation_that_raises_as_the_member_closes_still_leaves_the_group() -> None:
    async with running_server(_config()) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)
        async with _member(bootstrap, Recorder()) as b:
            with pytest.raises(MemberFailedError, match="on_partitions_revoked"):
                async with _member(bootstrap, Raising("on_partitions_revoked")) as a:
                    await wait_until(
                        lambda: len(a.assignment) == len(b.assignment) == 1, what="one each"
                    )
            # a left (its revocation raised, its leave went all the same): b has both now,
            # long before a's session could have run out
            await wait_until(lambda: b.assignment == _all(2), what="b to take a's partition")


async def test_what_the_application_raises_in_the_body_comes_out_as_it_was() -> None:
    async with running_server(_config()) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)

        async def crash() -> None:
            async with _member(bootstrap, Recorder()) as a:
                await a.wait_stable(10)
                raise KeyError("the application's")

        with pytest.raises(KeyError, match="the application's"):  # not in an ExceptionGroup
            await crash()


async def test_a_member_stopped_by_a_refusal_loses_what_it_owned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The group's ACL is taken from the member while it owns partitions: its next
    heartbeat is refused (GROUP_AUTHORIZATION_FAILED), which stops it. It owns nothing from
    then on and is told so (``on_partitions_lost``), as a Kafka consumer entering its fatal
    state: the coordinator gives them to others once its session ran out."""
    recorder = Recorder()
    async with running_server(_config()) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)

        async def refused() -> None:
            async with _member(bootstrap, recorder) as a:
                await wait_until(lambda: a.assignment == _all(2), what="a to own both")
                monkeypatch.setattr(
                    server.consumer,
                    "screen",
                    lambda *_: (ErrorCode.GROUP_AUTHORIZATION_FAILED, "taken away"),
                )
                await wait_until(lambda: a.failure is not None, what="a to be refused")
                assert a.assignment == frozenset()
                await wait_until(lambda: recorder.lost == [_all(2)], what="a to be told")

        with pytest.raises(MemberFailedError) as raised:
            await refused()
        assert raised.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
