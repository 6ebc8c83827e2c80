"""Mixed groups, sans-IO: a huddle leader reads Kafka clients' subscriptions and answers each
member in the format it spoke; a member with ``embedded="kafka"`` speaks Kafka's format and
reads a Kafka leader's assignment, working out what it revokes itself (KIP-429).

Kafka's bytes here are written and read by kafka-python's own ``kafka.protocol`` classes,
the ones its consumers use."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as PyAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as PySubscription,
)

from huddle.client.assignors import ASSIGNORS
from huddle.client.generation import Generation
from huddle.client.member import Member
from huddle.client.member_core import MemberConfig, MemberCore, Next
from huddle.protocol.consumer_protocol import read_sticky_user_data
from huddle.protocol.embedded import (
    KAFKA,
    Assignment,
    EmbeddedFormat,
    EmbeddedSchemaError,
    Speaks,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode,
    encode_assignment,
    grouped,
    spoken,
)
from huddle.protocol.errors import InvalidArgumentError
from huddle.protocol.messages import JoinGroupMember, JoinGroupResponse, SyncGroupResponse

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's imports
TP = TopicPartition
SIX = {"t": 6}


def core(assignor: str, embedded: EmbeddedFormat = "huddle") -> MemberCore:
    config = MemberConfig(group_id="g", topics=["t"], embedded=embedded)
    return MemberCore(config, [ASSIGNORS.create(assignor)])


def kafka_sub(version: int, owned: list[int] = [], generation: int = -1) -> bytes:  # noqa: B006
    tp = PySubscription.TopicPartition
    fields: dict[str, object] = {"version": version, "topics": ["t"], "user_data": b""}
    if version >= 1:
        fields["owned_partitions"] = [tp(topic="t", partitions=owned)] if owned else []
    if version >= 2:
        fields["generation_id"] = generation
    data: bytes = PySubscription(**fields).encode()
    return data


def kafka_assignment(*partitions: int) -> bytes:
    data: bytes = PyAssignment(
        version=3, assigned_partitions=[("t", list(partitions))], user_data=b""
    ).encode()
    return data


def join(c: MemberCore, members: list[tuple[str, bytes]], generation: int = 1) -> None:
    c.current = Generation(member_id="me")
    response = JoinGroupResponse(
        generation_id=generation,
        protocol_type="consumer",
        protocol_name=c.assignors[0].name,
        leader="me",
        member_id="me",
        members=[JoinGroupMember(member_id=m, metadata=meta) for m, meta in members],
    )
    assert c.on_join(response).next is Next.SYNC


def own(data: bytes) -> set[int]:
    if spoken(data).format == KAFKA:
        return {p for _, ps in PyAssignment.decode(data).assigned_partitions for p in ps}
    return {tp.partition for tp in decode_assignment(data).partitions}


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_a_huddle_leader_assigns_kafka_members_in_their_own_format(assignor: str) -> None:
    leader = core(assignor)
    mine = leader.join_request().protocols[0].metadata
    join(leader, [("me", mine), ("kafka-v0", kafka_sub(0)), ("kafka-v3", kafka_sub(3))])
    answers = {a.member_id: a.assignment for a in leader.assign(leader.subscriptions(), SIX, 0)}
    assert spoken(answers["me"]).format == "huddle"
    assert [PyAssignment.decode(answers[m]).version for m in ("kafka-v0", "kafka-v3")] == [0, 3]
    owned = [own(answers[m]) for m in ("me", "kafka-v0", "kafka-v3")]
    assert all(len(o) == 2 for o in owned), owned  # each has its share: it was read
    assert set().union(*owned) == set(range(6))


def test_a_kafka_member_keeps_what_stays_and_the_moving_partition_waits() -> None:
    """Cooperative: a Kafka member that owned everything keeps its share; the rest goes to
    nobody this round (its answer simply lacks them: it revokes them itself)."""
    leader = core("cooperative-sticky")
    mine = leader.join_request().protocols[0].metadata
    join(leader, [("me", mine), ("kafka", kafka_sub(1, owned=[0, 1, 2, 3, 4, 5]))], 2)
    answers = {a.member_id: a.assignment for a in leader.assign(leader.subscriptions(), SIX, 0)}
    assert own(answers["me"]) == set()
    assert len(own(answers["kafka"])) == 3


def test_a_kafka_format_member_sends_what_kafka_clients_read() -> None:
    member = core("cooperative-sticky", embedded="kafka")
    join(member, [("me", member.join_request().protocols[0].metadata)])
    member.on_sync(SyncGroupResponse(assignment=kafka_assignment(0, 1)), 0)
    metadata = member.join_request().protocols[0].metadata
    theirs = PySubscription.decode(metadata)
    assert (theirs.version, list(theirs.topics), theirs.generation_id) == (3, ["t"], 1)
    assert [(t.topic, list(t.partitions)) for t in theirs.owned_partitions] == [("t", [0, 1])]


def test_a_member_revokes_what_a_kafka_leader_did_not_give_back() -> None:
    member = core("cooperative-sticky", embedded="kafka")
    join(member, [("me", member.join_request().protocols[0].metadata)])
    first = member.on_sync(SyncGroupResponse(assignment=kafka_assignment(0, 1, 2)), 0)
    assert first.assigned == frozenset({TP("t", 0), TP("t", 1), TP("t", 2)})
    join(member, [("me", member.join_request().protocols[0].metadata)], 2)
    second = member.on_sync(SyncGroupResponse(assignment=kafka_assignment(0, 1)), 0)
    assert second.revoked == {TP("t", 2)}
    assert second.next is Next.JOIN  # KIP-429: it gave something up, so it rejoins
    assert member.owned == {TP("t", 0), TP("t", 1)}


def test_an_eager_member_reads_a_kafka_assignment_whatever_it_speaks() -> None:
    member = core("range")
    join(member, [("me", member.join_request().protocols[0].metadata)])
    step = member.on_sync(SyncGroupResponse(assignment=kafka_assignment(3, 4)), 0)
    assert step.assigned == frozenset({TP("t", 3), TP("t", 4)})
    assert step.next is Next.STAY


@pytest.mark.parametrize("assignor", ["cooperative-deferred", "high-availability"])
def test_kafka_s_format_refuses_assignors_that_need_huddle_s(assignor: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"cannot carry what {assignor} needs"):
        Member("127.0.0.1:1", group_id="g", topics=["t"], assignors=[assignor], embedded="kafka")


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="embedded must be one of huddle, kafka"):
        Member("127.0.0.1:1", group_id="g", topics=["t"], embedded="avro")  # type: ignore[arg-type]


def test_a_kafka_subscription_reads_as_huddle_s() -> None:
    sub = decode_subscription(kafka_sub(2, owned=[4, 1], generation=9))
    assert (sub.topics, sub.owned, sub.generation) == (
        ["t"],
        frozenset({TP("t", 1), TP("t", 4)}),
        9,
    )
    assert spoken(kafka_sub(2)) == Speaks("kafka", 2)
    assert spoken(b"\x00\x09" + kafka_sub(3)[2:]) == Speaks("kafka", 3)  # newer: answered in 3


def test_kafka_s_assignment_keeps_only_what_it_has_room_for() -> None:
    full = Assignment(
        assigned=grouped([TP("t", 1)]),
        revoked=grouped([TP("t", 2)]),
        scheduled_rebalance_delay_ms=5,
        user_data=b"u",
    )
    data = encode_assignment(full, Speaks("kafka", 1))
    back = decode_assignment(data, claimed=frozenset({TP("t", 1), TP("t", 5)}))
    assert (back.partitions, back.revoked_partitions) == (
        frozenset({TP("t", 1)}),
        frozenset({TP("t", 5)}),
    )
    assert (back.user_data, back.scheduled_rebalance_delay_ms) == (b"u", 0)
    assert decode_assignment(encode(full)) == full  # huddle's keeps everything


@pytest.mark.parametrize("data", [b"\x00", b"\x00\x01\x00\x00\x00\x09"])
def test_bad_kafka_bytes_are_a_clear_error(data: bytes) -> None:
    with pytest.raises(EmbeddedSchemaError, match="not a Kafka subscription"):
        decode_subscription(data)
    with pytest.raises(EmbeddedSchemaError, match="not a Kafka assignment"):
        decode_assignment(data)


def test_huddle_s_assignors_go_by_the_names_kafka_clients_give_theirs() -> None:
    """The coordinator picks a protocol every member offers, by name: huddle's four that
    do what Kafka's do are named as kafka-python (and the Java client) name theirs."""
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    kafka_names = [
        a.name
        for a in (
            RangePartitionAssignor,
            RoundRobinPartitionAssignor,
            StickyPartitionAssignor,
            CooperativeStickyAssignor,
        )
    ]
    assert kafka_names == ["range", "roundrobin", "sticky", "cooperative-sticky"]
    assert all(not ASSIGNORS.create(n).needs_huddle_format for n in kafka_names)


def test_a_huddle_sticky_leader_keeps_a_kafka_member_s_partitions_from_its_user_data() -> None:
    """Kafka's eager ``sticky`` members report nothing owned: what they had is in their
    StickyAssignorUserData (here as kafka-python writes it)."""
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.structs import TopicPartition as KafkaTP

    had = [KafkaTP("t", p) for p in (1, 3, 5)]
    theirs = StickyPartitionAssignor._metadata(["t"], had, 1).encode()
    leader = core("sticky")
    join(leader, [("me", leader.join_request().protocols[0].metadata), ("kafka", theirs)], 2)
    answers = {a.member_id: a.assignment for a in leader.assign(leader.subscriptions(), SIX, 0)}
    assert own(answers["kafka"]) == {1, 3, 5}
    assert own(answers["me"]) == {0, 2, 4}


def test_a_huddle_sticky_member_writes_what_it_had_as_kafka_s_sticky_assignor_does() -> None:
    member = core("sticky", embedded="kafka")
    join(member, [("me", member.join_request().protocols[0].metadata)], 4)
    member.assignment_received(
        member.on_sync(SyncGroupResponse(assignment=kafka_assignment(0, 2)), 0)
    )
    user_data = PySubscription.decode(member.join_request().protocols[0].metadata).user_data
    assert read_sticky_user_data(user_data) == ([("t", [0, 2])], 4)


def test_describe_reads_kafka_members_as_huddle_s() -> None:
    from huddle.client.describe import view
    from huddle.protocol.admin_messages import DescribedGroup, DescribedMember

    group = DescribedGroup(
        group_id="g",
        members=[
            DescribedMember(
                member_id="kafka",
                metadata=kafka_sub(1, owned=[2]),
                assignment=kafka_assignment(2, 3),
            )
        ],
    )
    (member,) = view(group).members
    assert member.readable
    assert (member.topics, member.claimed, member.owned) == (
        ["t"],
        [TP("t", 2)],
        [TP("t", 2), TP("t", 3)],
    )
