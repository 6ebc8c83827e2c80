"""Topics through ``Coordinator.handle``: create, alter, delete, list; the metadata notices
pushed to member connections; committed offsets of topics and partitions that go away."""

from __future__ import annotations

import pytest

from huddle.coordinator.topics import TopicRegistry
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    AlterTopicsRequest,
    AlterTopicsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ErrorResponse,
    FetchedOffset,
    ListTopicsRequest,
    ListTopicsResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    OffsetFetchTopicResult,
    Request,
    Response,
    TopicMetadata,
    TopicMetadataChanged,
    TopicResult,
    TopicSpec,
)
from tests.harness import Driver

E = ErrorCode
ADMIN = 99  # a connection that holds no group member
MAX_PARTITIONS = 16


def create(d: Driver, *specs: tuple[str, int]) -> CreateTopicsResponse:
    request = CreateTopicsRequest(topics=[TopicSpec(name=n, partitions=p) for n, p in specs])
    response = d.response(d.send(ADMIN, request))
    assert isinstance(response, CreateTopicsResponse)
    assert response.error_code == E.NONE
    return response


def alter(d: Driver, *specs: tuple[str, int]) -> AlterTopicsResponse:
    request = AlterTopicsRequest(topics=[TopicSpec(name=n, partitions=p) for n, p in specs])
    response = d.response(d.send(ADMIN, request))
    assert isinstance(response, AlterTopicsResponse)
    assert response.error_code == E.NONE
    return response


def delete(d: Driver, *names: str) -> DeleteTopicsResponse:
    response = d.response(d.send(ADMIN, DeleteTopicsRequest(topics=list(names))))
    assert isinstance(response, DeleteTopicsResponse)
    assert response.error_code == E.NONE
    return response


def list_topics(d: Driver, names: list[str] | None = None) -> list[TopicMetadata]:
    response = d.response(d.send(ADMIN, ListTopicsRequest(topics=names)))
    assert isinstance(response, ListTopicsResponse)
    assert response.error_code == E.NONE
    return response.topics


def shown(d: Driver, name: str, partitions: int) -> TopicMetadata:
    """A topic as it is listed and announced: with the id it was given."""
    topic_id = d.core.topics.ids[name]
    return TopicMetadata(name=name, partitions=partitions, topic_id=topic_id)


def codes(response: CreateTopicsResponse | AlterTopicsResponse | DeleteTopicsResponse) -> list[int]:
    return [t.error_code for t in response.topics]


def fetch_all(d: Driver, group: str = "g") -> dict[tuple[str, int], int]:
    response = d.response(d.send(ADMIN, OffsetFetchRequest(group_id=group)))
    assert isinstance(response, OffsetFetchResponse)
    return {(t.name, p.partition): p.offset for t in response.topics for p in t.partitions}


def driver() -> Driver:
    return Driver(max_partitions=MAX_PARTITIONS)


# --- create ------------------------------------------------------------------------------


def test_create_then_list() -> None:
    d = driver()
    response = create(d, ("orders", 3), ("audit", 1))
    assert codes(response) == [E.NONE, E.NONE]
    assert [t.name for t in response.topics] == ["orders", "audit"]
    assert list_topics(d) == [
        shown(d, "audit", 1),
        shown(d, "orders", 3),
    ]


def test_creating_an_existing_topic_fails_and_keeps_its_partitions() -> None:
    d = driver()
    create(d, ("orders", 3))
    response = create(d, ("orders", 8))
    assert codes(response) == [E.TOPIC_ALREADY_EXISTS]
    assert response.topics[0].error_message
    assert list_topics(d, ["orders"]) == [shown(d, "orders", 3)]


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a/b", "x" * 250, "with space", "tab\there", "ümlaut", "a:b"],
    ids=["empty", "dot", "dotdot", "slash", "250-chars", "space", "tab", "non-ascii", "colon"],
)
def test_illegal_topic_names_are_refused(name: str) -> None:
    d = driver()
    response = create(d, (name, 1))
    assert codes(response) == [E.INVALID_TOPIC_EXCEPTION]
    assert response.topics[0].name == name
    assert list_topics(d) == []


@pytest.mark.parametrize("name", ["a", "x" * 249, "orders.v2", "my_topic-1", "...", ".hidden"])
def test_legal_topic_names_are_accepted(name: str) -> None:
    d = driver()
    assert codes(create(d, (name, 1))) == [E.NONE]
    assert list_topics(d) == [shown(d, name, 1)]


@pytest.mark.parametrize("partitions", [0, -1, MAX_PARTITIONS + 1])
def test_partition_count_out_of_range_is_refused(partitions: int) -> None:
    d = driver()
    response = create(d, ("orders", partitions))
    assert codes(response) == [E.INVALID_PARTITIONS]
    assert str(MAX_PARTITIONS) in (response.topics[0].error_message or "")
    assert list_topics(d) == []


def test_partition_count_at_the_limit_is_accepted() -> None:
    d = driver()
    assert codes(create(d, ("orders", MAX_PARTITIONS))) == [E.NONE]
    assert list_topics(d) == [shown(d, "orders", MAX_PARTITIONS)]


def test_a_name_given_twice_in_one_request_refuses_the_second() -> None:
    d = driver()
    response = create(d, ("orders", 2), ("orders", 5))
    assert codes(response) == [E.NONE, E.INVALID_REQUEST]
    assert list_topics(d) == [shown(d, "orders", 2)]


def test_one_bad_topic_does_not_spoil_the_others() -> None:
    d = driver()
    response = create(d, ("good", 2), ("bad/name", 2), ("zero", 0), ("also-good", 1))
    assert codes(response) == [E.NONE, E.INVALID_TOPIC_EXCEPTION, E.INVALID_PARTITIONS, E.NONE]
    assert [t.name for t in list_topics(d)] == ["also-good", "good"]


# --- alter -------------------------------------------------------------------------------


def test_alter_grows_and_shrinks_a_topic() -> None:
    d = driver()
    create(d, ("orders", 3))
    assert codes(alter(d, ("orders", 6))) == [E.NONE]
    assert list_topics(d, ["orders"]) == [shown(d, "orders", 6)]
    assert codes(alter(d, ("orders", 2))) == [E.NONE]
    assert list_topics(d, ["orders"]) == [shown(d, "orders", 2)]


def test_alter_of_an_unknown_topic_fails() -> None:
    d = driver()
    response = alter(d, ("ghost", 3))
    assert codes(response) == [E.UNKNOWN_TOPIC_OR_PARTITION]
    assert list_topics(d) == []


@pytest.mark.parametrize("partitions", [0, MAX_PARTITIONS + 1])
def test_alter_to_a_count_out_of_range_fails_and_keeps_the_count(partitions: int) -> None:
    d = driver()
    create(d, ("orders", 3))
    assert codes(alter(d, ("orders", partitions))) == [E.INVALID_PARTITIONS]
    assert list_topics(d, ["orders"]) == [shown(d, "orders", 3)]


def test_alter_to_the_same_count_succeeds_without_a_notice() -> None:
    d = driver()
    d.form(1, 2)
    create(d, ("orders", 3))
    d.take_notices(1)
    d.take_notices(2)
    assert codes(alter(d, ("orders", 3))) == [E.NONE]
    assert d.take_notices(1) == []
    assert d.take_notices(2) == []


# --- delete and list ---------------------------------------------------------------------


def test_delete_removes_the_topic() -> None:
    d = driver()
    create(d, ("orders", 3), ("audit", 1))
    assert codes(delete(d, "orders")) == [E.NONE]
    assert list_topics(d) == [shown(d, "audit", 1)]
    assert list_topics(d, ["orders"]) == [
        TopicMetadata(name="orders", error_code=E.UNKNOWN_TOPIC_OR_PARTITION)
    ]


def test_delete_of_an_unknown_topic_fails() -> None:
    d = driver()
    create(d, ("orders", 3))
    response = delete(d, "ghost", "orders")
    assert codes(response) == [E.UNKNOWN_TOPIC_OR_PARTITION, E.NONE]
    assert list_topics(d) == []


def test_a_deleted_topic_can_be_created_again() -> None:
    d = driver()
    create(d, ("orders", 3))
    delete(d, "orders")
    assert codes(create(d, ("orders", 5))) == [E.NONE]
    assert list_topics(d) == [shown(d, "orders", 5)]


def test_list_named_topics_in_the_order_asked_with_unknown_ones_flagged() -> None:
    d = driver()
    create(d, ("b", 2), ("a", 1))
    assert list_topics(d, ["b", "nope", "a"]) == [
        shown(d, "b", 2),
        TopicMetadata(name="nope", error_code=E.UNKNOWN_TOPIC_OR_PARTITION),
        shown(d, "a", 1),
    ]
    assert list_topics(d, []) == []


def test_list_all_is_sorted_by_name() -> None:
    d = driver()
    create(d, ("zeta", 1), ("alpha", 2), ("mid", 3))
    assert [t.name for t in list_topics(d)] == ["alpha", "mid", "zeta"]


# --- notices -----------------------------------------------------------------------------


def test_changes_are_announced_to_member_connections_only() -> None:
    d = driver()
    d.form(1, 2)
    d.take_notices(1)
    d.take_notices(2)

    create(d, ("orders", 3))
    created = [TopicMetadataChanged(topics=[shown(d, "orders", 3)])]
    assert d.take_notices(1) == created
    assert d.take_notices(2) == created
    assert d.take_notices(ADMIN) == []  # the admin connection holds no member

    alter(d, ("orders", 5))
    altered = [TopicMetadataChanged(topics=[shown(d, "orders", 5)])]
    assert d.take_notices(1) == altered
    assert d.take_notices(2) == altered

    alter(d, ("orders", 2))
    shrunk = [TopicMetadataChanged(topics=[shown(d, "orders", 2)])]
    assert d.take_notices(1) == shrunk
    assert d.take_notices(2) == shrunk

    delete(d, "orders")
    deleted = [
        TopicMetadataChanged(
            topics=[TopicMetadata(name="orders", error_code=E.UNKNOWN_TOPIC_OR_PARTITION)]
        )
    ]
    assert d.take_notices(1) == deleted
    assert d.take_notices(2) == deleted
    assert d.take_notices(ADMIN) == []


def test_one_notice_per_request_naming_only_what_changed() -> None:
    d = driver()
    d.form(1)
    create(d, ("kept", 1))
    d.take_notices(1)
    create(d, ("new", 2), ("kept", 4), ("bad/name", 1))
    assert d.take_notices(1) == [TopicMetadataChanged(topics=[shown(d, "new", 2)])]
    alter(d, ("new", 2), ("kept", 3), ("ghost", 1))
    assert d.take_notices(1) == [TopicMetadataChanged(topics=[shown(d, "kept", 3)])]


def test_failed_changes_send_no_notice() -> None:
    d = driver()
    d.form(1)
    create(d, ("orders", 3))
    d.take_notices(1)
    create(d, ("orders", 3))
    alter(d, ("ghost", 2))
    alter(d, ("orders", 0))
    delete(d, "ghost")
    assert d.take_notices(1) == []


def test_members_of_any_group_hear_of_changes() -> None:
    d = driver()
    d.form(1, group="g")
    d.form(2, group="other")
    d.take_notices(1)
    d.take_notices(2)
    create(d, ("orders", 1))
    assert len(d.take_notices(1)) == 1
    assert len(d.take_notices(2)) == 1


def test_a_member_that_left_hears_no_more() -> None:
    d = driver()
    _a, b = d.form(1, 2)
    d.leave(2, b)
    d.take_notices(1)
    d.take_notices(2)
    create(d, ("orders", 1))
    assert d.take_notices(2) == []
    assert len(d.take_notices(1)) == 1


def test_a_closed_connection_hears_nothing_and_its_replacement_hears_again() -> None:
    d = driver()
    a, _b = d.form(1, 2)
    d.take_notices(1)
    d.take_notices(2)
    d.close(1)
    create(d, ("orders", 1))
    assert d.take_notices(1) == []
    assert d.take_notices(2) != []
    d.reconnect(1, 3)
    assert d.heartbeat(3, a, d.group().generation) == E.NONE  # back through connection 3
    create(d, ("audit", 1))
    assert d.take_notices(3) == [TopicMetadataChanged(topics=[shown(d, "audit", 1)])]


# --- committed offsets of topics that go away --------------------------------------------


def test_deleting_a_topic_drops_its_committed_offsets() -> None:
    d = driver()
    create(d, ("orders", 2), ("audit", 1))
    committed = d.commit(ADMIN, {("orders", 0): 10, ("orders", 1): 11, ("audit", 0): 5})
    assert committed.error_code == E.NONE
    assert fetch_all(d) == {("orders", 0): 10, ("orders", 1): 11, ("audit", 0): 5}

    delete(d, "orders")
    assert fetch_all(d) == {("audit", 0): 5}
    response = d.response(
        d.send(
            ADMIN,
            OffsetFetchRequest(
                group_id="g", topics=[OffsetFetchTopic(name="orders", partitions=[0])]
            ),
        )
    )
    assert isinstance(response, OffsetFetchResponse)
    assert response.topics == [
        OffsetFetchTopicResult(name="orders", partitions=[FetchedOffset(partition=0, offset=-1)])
    ]


def test_recreating_a_deleted_topic_does_not_bring_offsets_back() -> None:
    d = driver()
    create(d, ("orders", 2), ("audit", 1))
    d.commit(ADMIN, {("orders", 0): 10, ("audit", 0): 5})
    delete(d, "orders")
    create(d, ("orders", 2))
    assert fetch_all(d) == {("audit", 0): 5}


def test_shrinking_drops_offsets_of_the_partitions_cut_off_only() -> None:
    d = driver()
    create(d, ("orders", 4))
    d.commit(ADMIN, {("orders", p): 100 + p for p in range(4)})
    alter(d, ("orders", 2))
    assert fetch_all(d) == {("orders", 0): 100, ("orders", 1): 101}
    alter(d, ("orders", 4))  # growing again does not resurrect them
    assert fetch_all(d) == {("orders", 0): 100, ("orders", 1): 101}


def test_growing_keeps_every_committed_offset() -> None:
    d = driver()
    create(d, ("orders", 2))
    d.commit(ADMIN, {("orders", 0): 7, ("orders", 1): 8})
    alter(d, ("orders", 6))
    assert fetch_all(d) == {("orders", 0): 7, ("orders", 1): 8}


def test_offsets_of_every_group_are_dropped() -> None:
    d = driver()
    create(d, ("orders", 1), ("audit", 1))
    d.commit(ADMIN, {("orders", 0): 1, ("audit", 0): 1}, group="g1")
    d.commit(ADMIN, {("orders", 0): 2, ("audit", 0): 2}, group="g2")
    delete(d, "orders")
    assert fetch_all(d, "g1") == {("audit", 0): 1}
    assert fetch_all(d, "g2") == {("audit", 0): 2}


def test_a_group_made_only_of_offsets_of_a_deleted_topic_disappears() -> None:
    d = driver()
    create(d, ("orders", 1))
    d.commit(ADMIN, {("orders", 0): 1})
    assert "g" in d.core.groups
    delete(d, "orders")
    assert "g" not in d.core.groups
    assert fetch_all(d) == {}


def test_a_group_with_members_keeps_going_when_its_offsets_go() -> None:
    d = driver()
    create(d, ("orders", 2))
    a, b = d.form(1, 2)
    generation = d.group().generation
    assert d.commit(1, {("orders", 0): 3}, member_id=a, generation=generation).error_code == E.NONE
    delete(d, "orders")
    assert fetch_all(d) == {}
    assert set(d.group().members) == {a, b}
    assert d.heartbeat(1, a, generation) == E.NONE


# --- an answer over the transport's limit ----------------------------------------------


def test_a_change_whose_answer_would_be_over_the_limit_changes_nothing() -> None:
    """Refused before anything is applied: no topic made, altered or deleted, no notice,
    nothing to keep; the same request in smaller parts goes through."""
    d = driver()
    d.form(1)
    create(d, ("kept", 1))
    d.take_notices(1)
    d.core.take_changes()
    d.core.topics.max_answer_bytes = 3_000
    names = [f"topic-{i:03}" for i in range(100)]
    too_large: list[Request] = [
        CreateTopicsRequest(topics=[TopicSpec(name=n, partitions=1) for n in names]),
        AlterTopicsRequest(topics=[TopicSpec(name="kept", partitions=2)] * 200),
        DeleteTopicsRequest(topics=["kept"] * 200),
    ]
    for request in too_large:
        refused = d.response(d.send(ADMIN, request))
        assert isinstance(refused, ErrorResponse), refused
        assert refused.error_code == E.MESSAGE_TOO_LARGE
        assert "nothing was changed" in (refused.error_message or "")
    assert list_topics(d) == [shown(d, "kept", 1)]
    assert d.take_notices(1) == []
    assert d.core.take_changes() == []
    for part in (names[:25], names[25:50], names[50:75], names[75:]):  # each with its id
        assert codes(create(d, *[(n, 1) for n in part])) == [E.NONE] * 25
    assert len(list_topics(d)) == 101


def test_what_acls_refused_counts_in_the_answer_s_size() -> None:
    registry = TopicRegistry(MAX_PARTITIONS)
    registry.max_answer_bytes = 1_000
    request = CreateTopicsRequest(topics=[TopicSpec(name="mine", partitions=1)])
    refused = [
        TopicResult(name=f"not-mine-{i}", error_code=E.TOPIC_AUTHORIZATION_FAILED)
        for i in range(50)
    ]

    def put_back(response: Response) -> Response:
        assert isinstance(response, CreateTopicsResponse)
        return CreateTopicsResponse(topics=[*response.topics, *refused])

    answer, changed = registry.change(request, 1, put_back)
    assert isinstance(answer, ErrorResponse)
    assert answer.error_code == E.MESSAGE_TOO_LARGE
    assert (changed, registry.partitions) == ([], {})
    answer, changed = registry.change(request, 1)  # alone, it fits
    assert isinstance(answer, CreateTopicsResponse)
    assert registry.partitions == {"mine": 1}
