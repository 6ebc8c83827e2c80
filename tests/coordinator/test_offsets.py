"""Offset commits fenced by generation, and fetches (docs/coordinator.md section 4)."""

from __future__ import annotations

from huddle.coordinator.storage.records import OffsetRecord
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    CreateTopicsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    TopicSpec,
)
from tests.harness import SESSION_MS, Driver

E = ErrorCode


def driver_with_topic() -> Driver:
    d = Driver()
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=4)]))
    return d


def fetched(d: Driver, group: str = "g", **topics: list[int]) -> dict[tuple[str, int], int]:
    request = OffsetFetchRequest(
        group_id=group,
        topics=[OffsetFetchTopic(name=n, partitions=ps) for n, ps in topics.items()] or None,
    )
    response = d.response(d.send(9, request))
    assert isinstance(response, OffsetFetchResponse)
    return {(t.name, p.partition): p.offset for t in response.topics for p in t.partitions}


def test_member_commits_in_its_generation_and_offsets_are_fetched() -> None:
    d = driver_with_topic()
    (a,) = d.form(1)
    response = d.commit(1, {("t", 0): 42, ("t", 1): 7}, member_id=a, generation=1)
    assert response.error_code == E.NONE
    assert all(p.error_code == E.NONE for t in response.topics for p in t.partitions)
    assert fetched(d, t=[0, 1, 2]) == {("t", 0): 42, ("t", 1): 7, ("t", 2): -1}
    assert fetched(d) == {("t", 0): 42, ("t", 1): 7}


def test_commit_from_a_stale_generation_is_rejected() -> None:
    d = driver_with_topic()
    a, _b = d.form(1, 2)
    response = d.commit(1, {("t", 0): 1}, member_id=a, generation=1)
    assert response.error_code == E.ILLEGAL_GENERATION
    assert fetched(d, t=[0]) == {("t", 0): -1}


def test_commit_from_unknown_member_is_rejected() -> None:
    d = driver_with_topic()
    d.form(1)
    response = d.commit(2, {("t", 0): 1}, member_id="nobody", generation=1)
    assert response.error_code == E.UNKNOWN_MEMBER_ID


def test_commit_during_completing_rebalance_is_refused() -> None:
    d = driver_with_topic()
    a, b = d.form(1, 2)
    d.join(1, a)
    d.join(2, b)
    assert d.group().state.value == "CompletingRebalance"
    response = d.commit(1, {("t", 0): 5}, member_id=a, generation=3)
    assert response.error_code == E.REBALANCE_IN_PROGRESS


def test_commit_during_preparing_rebalance_is_allowed() -> None:
    d = driver_with_topic()
    a, b = d.form(1, 2)
    d.leave(2, b)
    assert d.group().state.value == "PreparingRebalance"
    response = d.commit(1, {("t", 0): 5}, member_id=a, generation=2)
    assert response.error_code == E.NONE
    assert fetched(d, t=[0]) == {("t", 0): 5}


def test_commit_with_generation_minus_one_only_while_empty() -> None:
    d = driver_with_topic()
    assert d.commit(1, {("t", 0): 3}).error_code == E.NONE  # creates an empty group
    assert d.group().state.value == "Empty"
    assert fetched(d, t=[0]) == {("t", 0): 3}
    d.form(2)
    assert d.commit(1, {("t", 0): 4}).error_code == E.UNKNOWN_MEMBER_ID
    assert fetched(d, t=[0]) == {("t", 0): 3}


def test_commit_to_unknown_group_with_a_generation_is_illegal() -> None:
    d = driver_with_topic()
    response = d.commit(1, {("t", 0): 3}, member_id="m", generation=4)
    assert response.error_code == E.ILLEGAL_GENERATION
    assert "g" not in d.core.groups


def test_commits_keep_the_session_alive() -> None:
    d = driver_with_topic()
    (a,) = d.form(1)
    for offset in range(5):
        d.advance(SESSION_MS - 1)
        assert d.commit(1, {("t", 0): offset}, member_id=a, generation=1).error_code == E.NONE
    assert a in d.group().members


def test_partition_level_errors() -> None:
    d = driver_with_topic()
    (a,) = d.form(1)
    response = d.commit(
        1, {("t", 0): 1, ("t", 9): 1, ("nope", 0): 1, ("t", 2): -5}, member_id=a, generation=1
    )
    codes = {(t.name, p.partition): p.error_code for t in response.topics for p in t.partitions}
    assert codes == {
        ("t", 0): E.NONE,
        ("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("t", 2): E.INVALID_REQUEST,
    }
    assert fetched(d, t=[0, 2]) == {("t", 0): 1, ("t", 2): -1}


def test_a_group_with_offsets_outlives_its_members() -> None:
    d = driver_with_topic()
    (a,) = d.form(1)
    d.commit(1, {("t", 0): 9}, member_id=a, generation=1)
    d.leave(1, a)
    assert d.group().state.value == "Empty"
    assert fetched(d, t=[0]) == {("t", 0): 9}


def test_fetch_for_an_unknown_group_returns_no_offsets() -> None:
    d = driver_with_topic()
    assert fetched(d, group="ghost", t=[0]) == {("t", 0): -1}
    assert "ghost" not in d.core.groups


def test_each_partition_of_a_commit_is_checked_and_only_the_valid_ones_are_kept() -> None:
    d = driver_with_topic()
    d.core.take_changes()
    too_long = "x" * (d.config.offset_metadata_max_bytes + 1)
    request = OffsetCommitRequest(
        group_id="g",
        generation_id=-1,
        member_id="",
        topics=[
            OffsetCommitTopic(
                name="t",
                partitions=[
                    OffsetCommitPartition(partition=0, offset=5),
                    OffsetCommitPartition(partition=4, offset=5),  # t has partitions 0..3
                    OffsetCommitPartition(partition=-1, offset=5),
                    OffsetCommitPartition(partition=1, offset=-2),
                    OffsetCommitPartition(partition=2, offset=5, metadata=too_long),
                    OffsetCommitPartition(partition=3, offset=6, metadata="ok"),
                ],
            ),
            OffsetCommitTopic(
                name="nope", partitions=[OffsetCommitPartition(partition=0, offset=5)]
            ),
        ],
    )
    response = d.response(d.send(9, request))
    assert isinstance(response, OffsetCommitResponse)
    codes = {(t.name, p.partition): p.error_code for t in response.topics for p in t.partitions}
    assert codes == {
        ("t", 0): E.NONE,
        ("t", 4): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("t", -1): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("t", 1): E.INVALID_REQUEST,
        ("t", 2): E.OFFSET_METADATA_TOO_LARGE,
        ("t", 3): E.NONE,
        ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert fetched(d, t=[0, 1, 2, 3]) == {("t", 0): 5, ("t", 1): -1, ("t", 2): -1, ("t", 3): 6}
    kept = d.core.take_changes()  # what goes to the data dir: the accepted ones only
    assert kept == [OffsetRecord("g", "t", 0, 5), OffsetRecord("g", "t", 3, 6, "ok")]


def test_generation_minus_one_with_a_member_id_commits_to_an_empty_group() -> None:
    """An Empty group only stores offsets: Kafka's doCommitOffsets takes generation -1 from
    anyone, whatever member id the request carries (e.g. one left over from an old run)."""
    d = driver_with_topic()
    response = d.commit(1, {("t", 0): 11}, member_id="left-over-id", generation=-1)
    assert response.error_code == E.NONE
    assert fetched(d, t=[0]) == {("t", 0): 11}
    d.form(2)  # not Empty any more: the id must be a member's
    assert d.commit(1, {("t", 0): 12}, member_id="left-over-id").error_code == E.UNKNOWN_MEMBER_ID
    assert fetched(d, t=[0]) == {("t", 0): 11}


# --- bounded requests (issue 11, item 2) ------------------------------------------------


def test_a_fetch_names_each_partition_once_however_often_it_is_asked_for() -> None:
    """A fetch naming partition 0 many times gets one answer for it (its answer is not a
    multiple of the request)."""
    d = driver_with_topic()
    d.commit(1, {("t", 0): 42})
    request = OffsetFetchRequest(
        group_id="g",
        topics=[
            OffsetFetchTopic(name="t", partitions=[0] * 500 + [2, 0]),
            OffsetFetchTopic(name="t", partitions=[1, 0]),
        ],
    )
    response = d.response(d.send(9, request))
    assert isinstance(response, OffsetFetchResponse)
    assert [(t.name, [(p.partition, p.offset) for p in t.partitions]) for t in response.topics] == [
        ("t", [(0, 42), (2, -1), (1, -1)])
    ]


def test_requests_naming_more_partitions_than_the_limit_are_refused_whole() -> None:
    d = Driver(max_request_partitions=3)
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=10)]))
    refused = d.commit(1, {("t", p): p for p in range(4)})
    assert refused.error_code == E.INVALID_REQUEST
    assert "4 partitions in one request is over the limit of 3" in (refused.error_message or "")
    assert "g" not in d.core.groups  # nothing of it was stored
    assert d.commit(1, {("t", p): p for p in range(3)}).error_code == E.NONE
    assert d.commit(1, {("t", 3): 3}).error_code == E.NONE

    for topics in ([OffsetFetchTopic(name="t", partitions=[0, 0, 0, 0])], None):
        response = d.response(d.send(9, OffsetFetchRequest(group_id="g", topics=topics)))
        assert isinstance(response, OffsetFetchResponse)
        assert response.error_code == E.INVALID_REQUEST, topics
        assert response.topics == []
    assert fetched(d, t=[0, 1, 2]) == {("t", 0): 0, ("t", 1): 1, ("t", 2): 2}
