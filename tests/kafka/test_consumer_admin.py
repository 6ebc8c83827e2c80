"""``huddle groups list`` and ``huddle groups describe`` (huddle's own wire) show the
consumer-protocol (KIP-848) groups served on the Kafka listener: their type, epochs,
assignor, and each member's epoch, state, pending revocations and target."""

from __future__ import annotations

import asyncio
import json

import pytest

from huddle.cli import main
from huddle.client.connection import connect
from huddle.coordinator.kafka.apis import Api
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import ListGroupsRequest, ListGroupsResponse, TopicSpec
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka
from tests.kafka.test_consumer_protocol import _beat, _commit, _join, _owning
from tests.kafka.test_wire import _create


async def _huddle(kafka: Listening, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    bootstrap = f"127.0.0.1:{kafka.server.port}"
    code = await asyncio.to_thread(main, [*argv, "--bootstrap", bootstrap], {})
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


async def _two_members(kafka: Listening) -> None:
    """Group ``g``: ``a`` owns t-0 and t-1 and must give one up to ``b``, who waits."""
    _create(kafka.server, TopicSpec(name="t", partitions=2))
    t_id = kafka.server.core.topics.ids["t"]
    async with RawKafka(kafka.port) as conn:
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join("a", "t"))
        await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 2, **_join("b", "t"))
        owning = _owning(t_id, {0, 1})
        await conn.call(
            Api.CONSUMER_GROUP_HEARTBEAT, 1, 3, **_beat("a", 1, topic_partitions=owning)
        )


async def test_groups_describe_shows_a_consumer_group_s_epochs_and_reconciliation(
    kafka: Listening, capsys: pytest.CaptureFixture[str]
) -> None:
    await _two_members(kafka)
    view = json.loads(await _huddle(kafka, capsys, "groups", "describe", "g", "--json"))
    assert (view["group_type"], view["state"]) == ("consumer", "Reconciling")
    assert (view["group_epoch"], view["target_epoch"], view["assignor"]) == (2, 2, "uniform")
    a, b = view["members"]
    assert (a["member_id"], a["member_epoch"], a["member_state"]) == (
        "a",
        1,
        "unrevoked_partitions",
    )
    assert a["client_id"] == "test"
    assert a["topics"] == ["t"]
    # a may keep one partition; the other waits for its revocation and goes to b
    assert len(a["owned"]) == 1
    assert len(a["pending_revocation"]) == 1
    assert a["target"] == a["owned"]
    assert (b["member_epoch"], b["member_state"], b["owned"]) == (2, "unreleased_partitions", [])
    assert b["target"] == a["pending_revocation"]
    assert [o["owner"] for o in view["offsets"]] == ["a"]

    text = await _huddle(kafka, capsys, "groups", "describe", "g")
    assert "type          consumer" in text
    assert "group epoch   2" in text
    assert "target epoch  2" in text
    assert "assignor      uniform" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line[:2] in ("a ", "b ")}
    pending = f"t:{a['pending_revocation'][0][1]}"
    assert rows["a"][4:6] == ["1", "unrevoked_partitions"]
    assert rows["a"][-2] == pending  # PENDING-REVOCATION
    assert rows["b"][4:6] == ["2", "unreleased_partitions"]
    assert rows["b"][-3:] == ["-", "-", pending]  # owns nothing, waits for a's partition


async def test_groups_list_shows_consumer_groups_with_their_type(
    kafka: Listening, capsys: pytest.CaptureFixture[str]
) -> None:
    await _two_members(kafka)
    listed = json.loads(await _huddle(kafka, capsys, "groups", "list", "--json"))
    assert listed == [
        {
            "group_id": "g",
            "protocol_type": "consumer",
            "state": "Reconciling",
            "group_type": "consumer",
        }
    ]
    text = await _huddle(kafka, capsys, "groups", "list")
    assert text.splitlines() == [
        "GROUP  TYPE      PROTOCOL-TYPE  STATE",
        "g      consumer  consumer       Reconciling",
    ]


async def test_listing_by_state_takes_the_consumer_groups_states(kafka: Listening) -> None:
    """huddle's ListGroups filters by a consumer group's state (Reconciling, Assigning) as
    by a classic one's, and still refuses a state no group has."""
    await _two_members(kafka)
    async with connect(f"127.0.0.1:{kafka.server.port}") as conn:
        reconciling = await conn.request(ListGroupsRequest(states=["reconciling"]))
        stable = await conn.request(ListGroupsRequest(states=["Stable"]))
        unknown = await conn.request(ListGroupsRequest(states=["sleeping"]))
    assert isinstance(reconciling, ListGroupsResponse)
    assert [(g.group_id, g.group_type) for g in reconciling.groups] == [("g", "consumer")]
    assert isinstance(stable, ListGroupsResponse)
    assert stable.groups == []
    assert isinstance(unknown, ListGroupsResponse)
    assert unknown.error_code == ErrorCode.INVALID_REQUEST
    assert "Reconciling" in (unknown.error_message or "")


async def test_a_consumer_group_with_committed_offsets_is_shown_once_as_itself(
    kafka: Listening, capsys: pytest.CaptureFixture[str]
) -> None:
    """A consumer group's commits keep its offsets where the classic groups keep theirs: the
    group is still described and listed as the consumer group, once, with its offsets."""
    await _two_members(kafka)
    async with RawKafka(kafka.port) as conn:
        done = await conn.call(Api.OFFSET_COMMIT, 9, 1, **_commit("a", 1, 7))
    assert done.topics[0].partitions[0].error_code == 0
    view = json.loads(await _huddle(kafka, capsys, "groups", "describe", "g", "--json"))
    assert (view["group_type"], view["group_epoch"]) == ("consumer", 2)
    assert {(o["partition"], o["offset"]) for o in view["offsets"]} >= {(0, 7)}
    listed = json.loads(await _huddle(kafka, capsys, "groups", "list", "--json"))
    assert [(g["group_id"], g["group_type"]) for g in listed] == [("g", "consumer")]


async def test_a_consumer_group_with_members_keeps_its_offsets_from_groups_delete(
    kafka: Listening, capsys: pytest.CaptureFixture[str]
) -> None:
    await _two_members(kafka)
    async with RawKafka(kafka.port) as conn:
        await conn.call(Api.OFFSET_COMMIT, 9, 1, **_commit("a", 1, 7))
    bootstrap = f"127.0.0.1:{kafka.server.port}"
    code = await asyncio.to_thread(main, ["groups", "delete", "g", "--bootstrap", bootstrap], {})
    _, err = capsys.readouterr()
    assert code == 1
    assert err.endswith("(NON_EMPTY_GROUP)\n")
    view = json.loads(await _huddle(kafka, capsys, "groups", "describe", "g", "--json"))
    assert {(o["partition"], o["offset"]) for o in view["offsets"]} >= {(0, 7)}


async def test_groups_delete_deletes_an_empty_consumer_group_and_its_offsets(
    kafka: Listening, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once its members left, ``huddle groups delete`` deletes the consumer group (kept
    empty until then) with its committed offsets: it is listed no more, and a join makes it
    anew at epoch 1."""
    await _two_members(kafka)
    async with RawKafka(kafka.port) as conn:
        await conn.call(Api.OFFSET_COMMIT, 9, 1, **_commit("a", 1, 7))
        for i, member in enumerate(("a", "b"), 2):
            await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, i, **_beat(member, -1))
    listed = json.loads(await _huddle(kafka, capsys, "groups", "list", "--json"))
    assert [(g["group_id"], g["state"]) for g in listed] == [("g", "Empty")]
    await _huddle(kafka, capsys, "groups", "delete", "g")
    assert json.loads(await _huddle(kafka, capsys, "groups", "list", "--json")) == []
    assert "g" not in kafka.server.core.groups  # its offsets went with it
    async with RawKafka(kafka.port) as conn:
        anew = await conn.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 4, **_join("a", "t"))
    assert (anew.error_code, anew.member_epoch) == (0, 1)
