"""``Member(group_protocol="consumer")`` across a lost connection: it finds the coordinator
again (with a backoff while none answers) and heartbeats there at its epoch. A coordinator
that kept it (its data dir) goes on with it, its partitions untouched, no callback called;
one that forgot it (restarted without a data dir) makes it lose its partitions through the
listener and join again with epoch 0."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from huddle.chaos.proxy import fault_proxy
from huddle.client.member import Member
from huddle.coordinator.config import ServerConfig
from huddle.coordinator.consumer.timeouts import SessionEnds
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.errors import InvalidArgumentError
from tests.client.test_consumer_member import LONG_INTERVAL_MS, Recorder, _all, _member, _topic
from tests.helpers import fast_server_config, running_server, wait_until

SESSION_MS = 3_000


def _config(data_dir: Path | None) -> ServerConfig:
    return fast_server_config(
        data_dir="" if data_dir is None else str(data_dir),
        consumer_session_timeout_ms=2 * LONG_INTERVAL_MS,
        consumer_heartbeat_interval_ms=LONG_INTERVAL_MS,  # nothing here waits for one
    )


@contextlib.asynccontextmanager
async def _restarted(
    server: CoordinatorServer, config: ServerConfig
) -> AsyncIterator[CoordinatorServer]:
    """``server`` closed, and a new one started on its port with ``config``."""
    port = server.port
    await server.close()
    async with running_server(replace(config, port=port)) as again:
        yield again


@contextlib.asynccontextmanager
async def _sharing(
    bootstrap: str, ra: Recorder, rb: Recorder
) -> AsyncIterator[tuple[Member, Member]]:
    """Members a and b of group g, owning two of t's four partitions each."""
    async with _member(bootstrap, ra) as a, _member(bootstrap, rb) as b:
        await wait_until(
            lambda: len(a.assignment) == len(b.assignment) == 2, what="a and b own 2 each"
        )
        yield a, b


async def test_a_coordinator_restarted_on_its_data_dir_keeps_the_members_at_their_epochs(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    ra, rb = Recorder(), Recorder()
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 4)
        async with _sharing(bootstrap, ra, rb) as (a, b):
            await a.wait_stable(10)
            await b.wait_stable(10)
            had = (a.assignment, b.assignment)
            epochs = (a.generation, b.generation)
            group_epoch = server.consumer.core.groups["g"].group_epoch
            for recorder in (ra, rb):
                recorder.revoked.clear()
                recorder.assigned.clear()
            async with _restarted(server, config) as again:
                service = again.consumer
                await wait_until(
                    lambda: {("g", a.member_id), ("g", b.member_id)} <= service.clients.keys(),
                    what="both members heartbeating on the restarted coordinator",
                )
                await a.wait_stable(10)
                await b.wait_stable(10)
                assert (a.assignment, b.assignment) == had
                assert (a.generation, b.generation) == epochs
                assert service.core.groups["g"].group_epoch == group_epoch  # nothing moved
                # neither revoked, lost nor was given anything for the restart
                assert ra.revoked == rb.revoked == ra.lost == rb.lost == []
                assert ra.assigned == rb.assigned == []


async def test_a_coordinator_restarted_without_its_groups_makes_the_members_lose_and_rejoin() -> (
    None
):
    config = _config(None)
    ra, rb = Recorder(), Recorder()
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 4)
        async with _sharing(bootstrap, ra, rb) as (a, b):
            had = (a.assignment, b.assignment)
            async with _restarted(server, config) as again:
                await _topic(f"127.0.0.1:{again.port}", 4)  # no data dir: made again
                await wait_until(
                    lambda: bool(ra.lost and rb.lost), what="both told their partitions are lost"
                )
                await wait_until(
                    lambda: a.assignment | b.assignment == _all(4) and len(a.assignment) == 2,
                    what="a and b share t again",
                )
                group = again.consumer.core.groups["g"]
                assert set(group.members) == {a.member_id, b.member_id}  # the same member ids
                assert (a.failure, b.failure) == (None, None)
                assert (ra.lost, rb.lost) == ([had[0]], [had[1]])  # once each


def test_a_malformed_bootstrap_list_is_refused_where_the_member_is_made() -> None:
    with pytest.raises(InvalidArgumentError, match="bootstrap"):
        Member("127.0.0.1:1,nope", group_id="g", topics=["t"], group_protocol="consumer")


async def test_a_member_cut_off_past_the_coordinator_s_session_timeout_loses_its_partitions() -> (
    None
):
    """The coordinator's answers say its session timeout: once that long has passed since
    the member's last answered heartbeat was sent, with no coordinator reachable, it owns
    nothing (at once) and is told so (``on_partitions_lost``), as the classic member's
    zombie safety; it stays alive, trying to reconnect."""
    config = fast_server_config(
        consumer_session_timeout_ms=1_000, consumer_heartbeat_interval_ms=200
    )
    recorder = Recorder()
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)
        async with _member(bootstrap, recorder) as a:
            await wait_until(lambda: a.assignment == _all(2), what="a to own both")
            await server.close()  # and nothing comes back at its address
            await wait_until(lambda: not a.assignment, wait_s=5, what="a to own nothing")
            await wait_until(lambda: recorder.lost == [_all(2)], wait_s=5, what="a told")
            assert (a.failure, a.connected) == (None, False)


async def test_a_heartbeat_whose_answer_never_comes_is_given_up_within_the_session() -> None:
    """The connection freezes for good with a heartbeat out (its answer held, the link
    blackholed without a reset): the member gives that heartbeat up after a third of the
    coordinator's session, connects again and heartbeats there at its epoch, so the
    coordinator never fences it and it loses nothing (waiting out its 10 s request
    timeout, it was fenced after 3 s)."""
    config = fast_server_config(
        consumer_session_timeout_ms=SESSION_MS, consumer_heartbeat_interval_ms=200
    )
    recorder = Recorder()
    async with running_server(config) as server, fault_proxy("127.0.0.1", server.port) as proxy:
        await _topic(f"127.0.0.1:{server.port}", 2)
        async with _member(f"127.0.0.1:{proxy.port}", recorder) as a:
            await a.wait_stable(10)
            assert a.assignment == _all(2)
            epoch, member_id = a.generation, a.member_id
            core = server.consumer.core
            session = SessionEnds("g", member_id)
            frozen_at = core.timers.deadline(session)
            assert frozen_at is not None
            assert proxy.abandon() > 0
            # the coordinator heard it for two more sessions: over a new connection
            await wait_until(
                lambda: (core.timers.deadline(session) or 0) > frozen_at + 2 * SESSION_MS,
                wait_s=15,
                what="heartbeats on a new connection for two sessions",
            )
            assert recorder.lost == []
            assert (a.member_id, a.generation, a.assignment) == (member_id, epoch, _all(2))
            assert a.failure is None


async def test_a_frozen_node_asked_for_the_coordinator_costs_no_more_than_a_heartbeat() -> None:
    """Its connection frozen, the member asks the next bootstrap address for the
    coordinator: a node that accepts connections and never answers (frozen, SIGSTOPped).
    It gives that one up as it gives a heartbeat up, after a third of the session, and finds
    the coordinator at the next address in time: the coordinator never fences it (waiting
    its 10 s request timeout on the frozen node, it was fenced)."""
    session_ms = 6_000
    config = fast_server_config(
        consumer_session_timeout_ms=session_ms, consumer_heartbeat_interval_ms=200
    )
    recorder = Recorder()
    with socket.socket() as frozen:  # the kernel accepts connections; nobody answers
        frozen.bind(("127.0.0.1", 0))
        frozen.listen(16)
        frozen_address = f"127.0.0.1:{frozen.getsockname()[1]}"
        async with (
            running_server(config) as server,
            fault_proxy("127.0.0.1", server.port) as proxy,
        ):
            await _topic(f"127.0.0.1:{server.port}", 2)
            bootstrap = f"127.0.0.1:{proxy.port},{frozen_address}"
            async with _member(bootstrap, recorder) as a:
                await a.wait_stable(10)
                epoch, member_id = a.generation, a.member_id
                core = server.consumer.core
                session = SessionEnds("g", member_id)
                frozen_at = core.timers.deadline(session)
                assert frozen_at is not None
                assert proxy.abandon() > 0  # the member asks the frozen node next
                await wait_until(
                    lambda: (core.timers.deadline(session) or 0) > frozen_at + session_ms,
                    wait_s=20,
                    what="heartbeats on a new connection past the old session",
                )
                assert recorder.lost == []
                assert (a.member_id, a.generation, a.assignment) == (member_id, epoch, _all(2))
