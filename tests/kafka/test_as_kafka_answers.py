"""Answers the Kafka listener gives as Kafka's broker gives them, for requests a client
rarely sends but may: each test names the place in Apache Kafka's source it follows."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.protocol.errors import ErrorCode
from tests.helpers import FAST_GROUP, fast_server_config
from tests.kafka.conftest import Listening
from tests.kafka.raw import RawKafka

_PROTOCOLS = [{"name": "range", "metadata": b"\x00\x01"}]
_JOINING = {
    "session_timeout": 10_000,
    "rebalance_timeout": 10_000,
    "protocol_type": "consumer",
    "protocols": _PROTOCOLS,
}


async def _stable_member(conn: RawKafka, group: str) -> Any:
    """One member, alone in ``group``, synced: the JoinGroup's answer."""
    joined = await conn.call(Api.JOIN_GROUP, 3, 1, group_id=group, member_id="", **_JOINING)
    synced = await conn.call(
        Api.SYNC_GROUP,
        3,
        2,
        group_id=group,
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        group_instance_id=None,
        assignments=[{"member_id": joined.member_id, "assignment": b"\x00\x01"}],
    )
    assert synced.error_code == ErrorCode.NONE
    return joined


async def test_sync_group_v5_without_protocol_type_or_name_is_inconsistent(
    kafka: Listening,
) -> None:
    """KafkaApis.handleSyncGroupRequest: from v5 the protocol type and name are mandatory
    (SyncGroupRequest.areMandatoryProtocolTypeAndNamePresent)."""
    async with RawKafka(kafka.port) as conn:
        joined = await _stable_member(conn, "g")
        answers = []
        for cid, (kind, name) in enumerate(((None, "range"), ("consumer", None)), start=3):
            answers.append(
                await conn.call(
                    Api.SYNC_GROUP,
                    5,
                    cid,
                    group_id="g",
                    generation_id=joined.generation_id,
                    member_id=joined.member_id,
                    group_instance_id=None,
                    protocol_type=kind,
                    protocol_name=name,
                    assignments=[],
                )
            )
        named = await conn.call(
            Api.SYNC_GROUP,
            5,
            9,
            group_id="g",
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[],
        )
    assert [a.error_code for a in answers] == [ErrorCode.INCONSISTENT_GROUP_PROTOCOL] * 2
    assert [a.assignment for a in answers] == [b"", b""]
    # named in full, the member gets its assignment as before
    assert named.error_code == ErrorCode.NONE
    assert named.assignment == b"\x00\x01"


async def test_api_versions_v3_with_a_software_name_kafka_refuses_is_invalid(
    kafka: Listening,
) -> None:
    """KafkaApis.handleApiVersionsRequest: a v3+ request whose client software name or
    version breaks ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN is INVALID_REQUEST,
    with no ranges; the names real clients send are fine."""
    async with RawKafka(kafka.port) as conn:
        refused = [
            await conn.call(
                Api.API_VERSIONS,
                3,
                cid,
                client_software_name=name,
                client_software_version=version,
            )
            for cid, (name, version) in enumerate(
                (("bad name", "1.0"), ("kafka-python", "3.0+local"), ("", "1"), ("-x", "1"))
            )
        ]
        fine = [
            await conn.call(
                Api.API_VERSIONS,
                version,
                10 + version,
                client_software_name="confluent-kafka-python",
                client_software_version="2.16.1-rdkafka-2.16.0",
            )
            for version in (3, 4)
        ]
    assert [(a.error_code, a.api_keys) for a in refused] == [(ErrorCode.INVALID_REQUEST, ())] * 4
    assert [a.error_code for a in fine] == [ErrorCode.NONE] * 2
    assert all(a.api_keys for a in fine)


async def test_describe_groups_answers_as_kafka_s_coordinator(kafka: Listening) -> None:
    """GroupMetadataManager.describeGroups: a group not known is no error but Dead; a group
    that is not Stable names no protocol and no member's metadata or assignment."""
    async with RawKafka(kafka.port) as conn:
        await _stable_member(conn, "stable")
        joining = await conn.call(
            Api.JOIN_GROUP, 3, 3, group_id="completing", member_id="", **_JOINING
        )
        described = await conn.call(
            Api.DESCRIBE_GROUPS,
            5,
            4,
            groups=["absent", "completing", "stable"],
            include_authorized_operations=False,
        )
    absent, completing, stable = described.groups
    assert (absent.error_code, absent.group_state, absent.members) == (ErrorCode.NONE, "Dead", ())
    assert completing.group_state == "CompletingRebalance"
    assert completing.protocol_data == ""
    assert [(m.member_id, m.member_metadata) for m in completing.members] == [
        (joining.member_id, b"")
    ]
    assert (stable.group_state, stable.protocol_data) == ("Stable", "range")
    assert [(m.member_metadata, m.member_assignment) for m in stable.members] == [
        (b"\x00\x01", b"\x00\x01")
    ]


async def test_list_groups_reads_its_states_filter_as_kafka(kafka: Listening) -> None:
    """GroupMetadataManager.listGroups: the states filter is trimmed and compared in lower
    case; a name that is no state matches no group and is no error."""
    async with RawKafka(kafka.port) as conn:
        await _stable_member(conn, "g")
        mixed = await conn.call(Api.LIST_GROUPS, 4, 3, states_filter=[" STABLE ", "bogus"])
        bogus = await conn.call(Api.LIST_GROUPS, 4, 4, states_filter=["bogus"])
    assert (mixed.error_code, [g.group_id for g in mixed.groups]) == (ErrorCode.NONE, ["g"])
    assert (bogus.error_code, bogus.groups) == (ErrorCode.NONE, ())


async def test_an_empty_group_id_is_invalid_for_sync_heartbeat_and_leave(
    kafka: Listening,
) -> None:
    """GroupCoordinatorService.syncGroup/heartbeat/leaveGroup: an empty group id is
    INVALID_GROUP_ID, before any group is looked at (not UNKNOWN_MEMBER_ID)."""
    async with RawKafka(kafka.port) as conn:
        synced = await conn.call(
            Api.SYNC_GROUP,
            3,
            1,
            group_id="",
            generation_id=1,
            member_id="m",
            group_instance_id=None,
            assignments=[],
        )
        beat = await conn.call(Api.HEARTBEAT, 0, 2, group_id="", generation_id=1, member_id="m")
        beat_v4 = await conn.call(
            Api.HEARTBEAT, 4, 3, group_id="", generation_id=1, member_id="m", group_instance_id=None
        )
        left = await conn.call(Api.LEAVE_GROUP, 0, 4, group_id="", member_id="m")
        left_v3 = await conn.call(
            Api.LEAVE_GROUP,
            3,
            5,
            group_id="",
            members=[{"member_id": "m", "group_instance_id": None}],
        )
    codes = [a.error_code for a in (synced, beat, beat_v4, left, left_v3)]
    assert codes == [ErrorCode.INVALID_GROUP_ID] * 5


async def test_an_offset_fetch_refused_for_its_group_names_no_partitions_from_v2(
    kafka: Listening,
) -> None:
    """OffsetFetchRequest.getErrorResponse: a group-level error (here: more partitions
    asked than one request may name) is each partition's in v1, which has no group error
    code; from v2 it is the group's error code alone, with no topics (v8+: per group).
    The core's limit is lowered below the wire's (``walk.MAX_ITEMS``), which closes the
    connection of a request over it before the core sees it."""
    kafka.server.core.offsets.request_max = 100
    too_many = [{"name": "t", "partition_indexes": list(range(101))}]
    async with RawKafka(kafka.port) as conn:
        v1 = await conn.call(Api.OFFSET_FETCH, 1, 1, group_id="g", topics=too_many)
        v3 = await conn.call(Api.OFFSET_FETCH, 3, 2, group_id="g", topics=too_many)
        v8 = await conn.call(
            Api.OFFSET_FETCH,
            8,
            3,
            groups=[{"group_id": "g", "topics": too_many}],
            require_stable=False,
        )
    (topic,) = v1.topics
    assert len(topic.partitions) == 101
    assert {p.error_code for p in topic.partitions} == {ErrorCode.INVALID_REQUEST}
    assert (v3.error_code, v3.topics) == (ErrorCode.INVALID_REQUEST, ())
    ((group),) = v8.groups
    assert (group.error_code, group.topics) == (ErrorCode.INVALID_REQUEST, ())


async def test_a_commit_with_a_generation_to_no_group_is_group_id_not_found_from_v9(
    kafka: Listening,
) -> None:
    """OffsetMetadataManager.validateOffsetCommit: a commit naming a generation (>= 0) to a
    group that does not exist is GROUP_ID_NOT_FOUND from v9 (confluent-kafka's version),
    ILLEGAL_GENERATION before; generation -1 makes a simple group and is stored."""
    topic = [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5}]}]
    common = {"member_id": "m", "group_instance_id": None, "topics": topic}
    async with RawKafka(kafka.port) as conn:
        await conn.call(
            Api.CREATE_TOPICS,
            7,
            1,
            topics=[{"name": "t", "num_partitions": 1, "replication_factor": 1}],
            timeout_ms=5_000,
            validate_only=False,
        )
        answers = {
            version: await conn.call(
                Api.OFFSET_COMMIT,
                version,
                10 + version,
                group_id="absent",
                generation_id_or_member_epoch=1,
                **common,
            )
            for version in (7, 8, 9)
        }
        simple = await conn.call(
            Api.OFFSET_COMMIT,
            9,
            20,
            group_id="simple",
            generation_id_or_member_epoch=-1,
            **common,
        )
    codes = {v: a.topics[0].partitions[0].error_code for v, a in answers.items()}
    assert codes == {
        7: ErrorCode.ILLEGAL_GENERATION,
        8: ErrorCode.ILLEGAL_GENERATION,
        9: ErrorCode.GROUP_ID_NOT_FOUND,
    }
    assert simple.topics[0].partitions[0].error_code == ErrorCode.NONE


async def test_a_member_turned_away_from_a_full_group_is_named_no_member_id() -> None:
    """GroupMetadataManager.classicGroupJoinToClassicGroup: a JoinGroup the group's maximum
    size turns away is GROUP_MAX_SIZE_REACHED with member id "", not the id it sent."""
    group = replace(FAST_GROUP, max_group_size=1)
    async with CoordinatorServer(fast_server_config(group=group)) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        async with RawKafka(wire.port) as conn:
            await _stable_member(conn, "g")
            turned_away = await conn.call(
                Api.JOIN_GROUP,
                5,
                3,
                group_id="g",
                member_id="stranger",
                group_instance_id=None,
                **_JOINING,
            )
    assert (turned_away.error_code, turned_away.member_id) == (
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        "",
    )


async def test_an_empty_group_id_is_a_group_like_any_for_describe_delete_and_fetch(
    kafka: Listening,
) -> None:
    """GroupCoordinatorService.describeGroups/deleteGroups/fetchOffsets: only a null group
    id is INVALID_GROUP_ID ("for backwards compatibility, we support ... the empty group
    id"); "" is a group not known: Dead, GROUP_ID_NOT_FOUND, no committed offset."""
    async with RawKafka(kafka.port) as conn:
        described = await conn.call(
            Api.DESCRIBE_GROUPS, 5, 1, groups=[""], include_authorized_operations=False
        )
        deleted = await conn.call(Api.DELETE_GROUPS, 2, 2, groups_names=[""])
        fetched = await conn.call(
            Api.OFFSET_FETCH, 7, 3, group_id="", topics=[{"name": "t", "partition_indexes": [0]}]
        )
    ((group),) = described.groups
    assert (group.error_code, group.group_state) == (ErrorCode.NONE, "Dead")
    assert [r.error_code for r in deleted.results] == [ErrorCode.GROUP_ID_NOT_FOUND]
    assert fetched.error_code == ErrorCode.NONE
    assert [(p.committed_offset, p.error_code) for p in fetched.topics[0].partitions] == [
        (-1, ErrorCode.NONE)
    ]


async def test_a_batch_leave_of_a_group_not_known_names_each_member_unknown(
    kafka: Listening,
) -> None:
    """GroupCoordinatorService.leaveGroup: classicGroupLeave's UNKNOWN_MEMBER_ID for a
    group not found becomes no top-level error and UNKNOWN_MEMBER_ID for each member named
    (v3+); v0-2's one error code is UNKNOWN_MEMBER_ID."""
    members = [
        {"member_id": "m", "group_instance_id": None},
        {"member_id": "", "group_instance_id": "i"},
    ]
    async with RawKafka(kafka.port) as conn:
        batch = await conn.call(Api.LEAVE_GROUP, 5, 1, group_id="absent", members=members)
        one = await conn.call(Api.LEAVE_GROUP, 2, 2, group_id="absent", member_id="m")
    assert batch.error_code == ErrorCode.NONE
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in batch.members] == [
        ("m", None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("", "i", ErrorCode.UNKNOWN_MEMBER_ID),
    ]
    assert one.error_code == ErrorCode.UNKNOWN_MEMBER_ID
