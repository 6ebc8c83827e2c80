"""OffsetCommit answers written by hand are kio's bytes, for every served version."""

from __future__ import annotations

from typing import ClassVar, cast
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from huddle.coordinator.kafka import offset_commit_encoding, offsets, schemas
from huddle.coordinator.kafka.apis import SERVED, Api
from huddle.coordinator.kafka.translate import Context, Encoded, Plan
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    ErrorResponse,
    OffsetCommitResponse,
    OffsetCommitTopicResult,
    PartitionResult,
)
from tests.kafka.raw import parse, request

LOWEST, HIGHEST = SERVED[Api.OFFSET_COMMIT]
T_ID = UUID("0f6b6ac4-3c1e-4e3a-9d7e-3f0a1b2c3d4e")
_codes = st.sampled_from([int(c) for c in ErrorCode]) | st.integers(-(2**15), 2**15 - 1)
BY_ID = 10  # OffsetCommit's version that names topics by id
_partitions = st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), _codes), max_size=140)
_topics = st.lists(st.tuples(st.text(max_size=300), _partitions), max_size=5)
_topics_by_id = st.lists(st.tuples(st.uuids(), _partitions), max_size=5)


def by_kio(version: int, topics: offset_commit_encoding.Topics) -> bytes:
    values = {
        "topics": [
            {
                "topic_id" if version >= BY_ID else "name": name,
                "partitions": [{"partition_index": i, "error_code": c} for i, c in partitions],
            }
            for name, partitions in topics
        ]
    }
    cls = schemas.response_class(Api.OFFSET_COMMIT, version)
    return schemas.entity_bytes(schemas.build(cls, values))


@settings(max_examples=300, deadline=None)
@given(st.integers(LOWEST, BY_ID - 1), _topics)
def test_the_answer_is_kios_bytes(version: int, topics: offset_commit_encoding.Topics) -> None:
    assert offset_commit_encoding.encode(version, topics) == by_kio(version, topics)


@settings(max_examples=100, deadline=None)
@given(st.integers(BY_ID, HIGHEST), _topics_by_id)
def test_the_answer_by_topic_id_is_kios_bytes(
    version: int, topics: offset_commit_encoding.Topics
) -> None:
    assert offset_commit_encoding.encode(version, topics) == by_kio(version, topics)


class _Ids:
    """The topic ids a Context knows: t's."""

    topic_names: ClassVar[dict[UUID, str]] = {T_ID: "t"}

    def consumer_offsets(self, *args: object, commit: bool) -> None:
        return None  # no consumer-protocol group: the classic rules


def _commit(version: int) -> Plan:
    partitions = [
        {"partition_index": i, "committed_offset": 10, "committed_metadata": ""} for i in (0, 1)
    ]
    req = request(
        Api.OFFSET_COMMIT,
        version,
        group_id="g",
        generation_id_or_member_epoch=1,
        member_id="m",
        topics=[{"name": "t", "topic_id": T_ID, "partitions": partitions}],
    )
    return offsets.offset_commit(req, version, cast(Context, _Ids()))


def test_every_version_answers_each_partition_or_the_groups_error() -> None:
    for version in range(LOWEST, HIGHEST + 1):
        plan = _commit(version)
        result = OffsetCommitResponse(
            topics=[
                OffsetCommitTopicResult(
                    name="t",
                    partitions=[
                        PartitionResult(partition=0),
                        PartitionResult(
                            partition=1, error_code=ErrorCode.OFFSET_METADATA_TOO_LARGE
                        ),
                    ],
                )
            ]
        )
        refused = ErrorResponse(error_code=ErrorCode.ILLEGAL_GENERATION, error_message="old")
        for part, codes in ((result, [0, 12]), (refused, [22, 22])):
            answer = plan.answer([part])
            assert isinstance(answer, Encoded)
            body = b"\x00" + answer.body if version >= 8 else answer.body  # header v1's tags
            parsed = parse(Api.OFFSET_COMMIT, version, body)
            assert [p.error_code for p in parsed.topics[0].partitions] == codes
