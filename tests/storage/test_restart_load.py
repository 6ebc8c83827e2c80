"""Loading a large data dir: the load runs in slices with requests answered in between
(COORDINATOR_LOAD_IN_PROGRESS), and a loaded member's session starts once the coordinator
can hear it, as Kafka's ``onGroupLoaded`` runs once a coordinator partition is loaded."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from huddle.coordinator.server import CoordinatorServer
from huddle.coordinator.state import GroupState
from huddle.coordinator.storage.journal import Journal
from huddle.coordinator.storage.records import GroupRecord, KeptMember
from huddle.protocol.embedded import Subscription, encode
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import ErrorResponse, HeartbeatRequest, HeartbeatResponse
from tests.harness import SESSION_MS
from tests.helpers import RawClient, fast_server_config, wait_until
from tests.storage.test_restart import data_dir_core, static_pair

E = ErrorCode
S = GroupState
SUBSCRIPTION = encode(Subscription(topics=["t"]))


def kept_group(group_id: str, members: int, session_ms: int) -> GroupRecord:
    kept = [
        KeptMember(
            f"m-{uuid.uuid4()}", None, "c", "h", session_ms, 30_000, [("range", SUBSCRIPTION)], b""
        )
        for _ in range(members)
    ]
    return GroupRecord(group_id, 3, "consumer", "range", kept[0].member_id, kept, 1)


@pytest.mark.timing
async def test_a_large_data_dir_loads_in_slices_and_no_session_runs_out_before_it_is_heard(
    tmp_path: Path,
) -> None:
    """Found by review: 60,000 groups of 10 members loaded on the event loop in one go (8.9 s,
    nothing answered meanwhile, not even COORDINATOR_LOAD_IN_PROGRESS), every session armed
    from one time taken before the load: 84,878 members were removed and 8,572 groups
    rebalanced within 2 s of listening. Here 200,000 members with 1.5 s sessions (the load
    takes seconds on a CI machine): the loop is never held for long, requests meanwhile are
    told the coordinator is loading, and once it serves, no member's session ends before
    it has had time to be heard."""
    session_ms = 1_500
    records = [kept_group(f"g{g}", 10, session_ms) for g in range(20_000)]
    journal = Journal.open(tmp_path)
    journal.append(records)
    journal.close()
    server = CoordinatorServer(fast_server_config(data_dir=str(tmp_path)))
    gaps: list[float] = []
    starting = asyncio.create_task(server.start())

    async def tick() -> None:
        last = time.perf_counter()
        while not starting.done():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        await wait_until(lambda: server.port != 0 and server.loading, what="listening")
        client = await RawClient.open(server.port)
        await client.handshake()
        member = records[0].members[0].member_id
        heartbeat = HeartbeatRequest(group_id="g0", member_id=member, generation_id=3)
        answers = []
        while not starting.done():
            answer = await client.call(heartbeat)
            assert isinstance(answer, HeartbeatResponse | ErrorResponse)
            answers.append(answer.error_code)
            await asyncio.wait([starting], timeout=0.05)  # a heartbeat interval
        await starting
        served_at = server.now_ms()
        await ticker
        deadlines = [
            server.core.timers.deadline(m.session_key)
            for group in server.core.groups.values()
            for m in group.members.values()
        ]
        assert len(deadlines) == 200_000
        assert all(d is not None and d > served_at for d in deadlines)
        assert E.COORDINATOR_LOAD_IN_PROGRESS in answers
        assert max(gaps) < 1.0, f"the loop was held for {max(gaps):.2f} s"
        await client.close()
    finally:
        if not starting.done():
            starting.cancel()
        await server.close()


def test_a_loaded_group_s_sessions_and_rebalance_start_when_it_is_served() -> None:
    """A transport loading in slices starts the loaded members' sessions, and the
    rebalance a loaded group needs, when it serves the group, not when it loaded it."""
    d = data_dir_core()
    id1, id2, generation = static_pair(d)
    for _ in range(3):  # s2 is silent: its session ends, the record says it was removed
        d.advance(SESSION_MS / 2)
        d.heartbeat(1, id1, generation, instance="s1")
    assert "s2" not in d.group().static
    again = data_dir_core()
    again.core.restore(d.core.take_changes())
    for _ in again.core.loading_groups(0.0):
        pass
    assert again.core.next_deadline() is None  # nothing runs before the group is served
    assert again.group().state is S.STABLE
    again.now = 20_000.0
    again.core.begin_serving(again.now)
    again.core.serve_loaded(again.now)
    assert again.core.unserved == 0
    assert again.group().state is S.PREPARING_REBALANCE  # s2's partitions go to someone
    s1 = again.group().members[id1]
    assert again.core.timers.deadline(s1.session_key) == again.now + s1.session_timeout_ms
    assert again.heartbeat(7, id2, generation, instance="s2") == E.UNKNOWN_MEMBER_ID
