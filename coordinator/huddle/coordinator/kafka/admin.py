"""Groups and topics administered on the Kafka wire: DescribeGroups, ListGroups,
DeleteGroups, and CreateTopics, DeleteTopics, CreatePartitions over huddle's topic
registry (the core's CreateTopics, DeleteTopics and AlterTopics).

DescribeGroups answers as Kafka's coordinator does (``GroupMetadataManager.describeGroups``):
a group it does not know is no error but a group in state Dead, and a group that is not
Stable is described without its protocol and its members without metadata or assignment.
ListGroups' states filter is read as Kafka reads it: trimmed and in any case, and a state
that is not one lists nothing rather than being an error.

The registry keeps one copy of each topic, on this listener's one broker: a replication
factor over 1, or replica assignments naming another broker, are refused with Kafka's
INVALID_REPLICATION_FACTOR / INVALID_REPLICA_ASSIGNMENT; topic configs are not kept (an
answer names none). CreatePartitions only adds partitions, as Kafka's does.

As Kafka's controller does, a request that would make more than 10,000 partitions
(``MAX_PARTITIONS_PER_REQUEST``) is refused whole with POLICY_VIOLATION (a topic of a
million partitions made a Metadata answer that held the event loop for seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final
from uuid import UUID

from huddle.coordinator.kafka.schemas import ZERO_UUID
from huddle.coordinator.kafka.translate import (
    UNKNOWN_TOPIC_ID,
    Context,
    Plan,
    Values,
    get,
    message,
)
from huddle.coordinator.state import STATES_BY_NAME, GroupState
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    AlterTopicsRequest,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    Request,
    Response,
    TopicSpec,
)

_NOT_ASKED: Final = -(2**31)  # authorized operations, when the request did not ask for them
_DEFAULT_PARTITIONS: Final = 1  # Kafka's num.partitions, for a topic created with -1
INVALID_REPLICATION_FACTOR: Final = 38
INVALID_REPLICA_ASSIGNMENT: Final = 39
_CLASSIC: Final = "classic"
_DEAD: Final = GroupState.DEAD.value
_STABLE: Final = GroupState.STABLE.value
MAX_PARTITIONS_PER_REQUEST: Final = 10_000  # Kafka's controller: MAX_PARTITIONS_PER_BATCH
_TOO_MANY_NEW: Final = "Excessively large number of partitions per request."
_TOO_MANY_ADDED: Final = "Unable to perform excessively large batch operation."


def describe_groups(req: Any, version: int, ctx: Context) -> Plan:
    names = list(req.groups)

    def answer(parts: Sequence[Response]) -> Values:
        (r,) = parts
        if type(r) is not DescribeGroupsResponse:
            groups: list[Values] = [
                {"group_id": g, "error_code": r.error_code, "group_state": _DEAD} for g in names
            ]
            return {"groups": groups}
        return {"groups": [_described(g) for g in r.groups]}

    return Plan([DescribeGroupsRequest(groups=names)], answer)


def _described(g: DescribedGroup) -> Values:
    if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND or g.group_type != _CLASSIC:
        # Kafka: no error, a Dead group (a consumer group is ConsumerGroupDescribe's)
        return {"group_id": g.group_id, "error_code": 0, "group_state": _DEAD}
    stable = g.state == _STABLE  # else Kafka names no protocol and no member's metadata
    return {
        "error_code": g.error_code,
        "group_id": g.group_id,
        "group_state": g.state,
        "protocol_type": g.protocol_type,
        "protocol_data": g.protocol_name if stable else "",
        "authorized_operations": _NOT_ASKED,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata if stable else b"",
                "member_assignment": m.assignment if stable else b"",
            }
            for m in g.members
        ],
    }


def list_groups(req: Any, version: int, ctx: Context) -> Plan:
    asked = {s.strip().lower() for s in get(req, "states_filter", ())}
    states = [s for s in asked if s in STATES_BY_NAME]
    kinds = {k.lower() for k in get(req, "types_filter", ())}
    call = ListGroupsRequest(states=states or None)

    def answer(parts: Sequence[Response]) -> Values:
        (r,) = parts
        listed = r.groups if type(r) is ListGroupsResponse else []
        # the consumer groups are ``consumer_describe.with_consumer_groups``'s
        listed = [g for g in listed if g.group_type == _CLASSIC]
        if (kinds and _CLASSIC not in kinds) or (asked and not states):
            listed = []  # every group of huddle is a classic group; no state is asked
        return {
            "error_code": r.error_code,
            "groups": [
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "group_state": g.state,
                    "group_type": _CLASSIC,
                }
                for g in listed
            ],
        }

    return Plan([call], answer)


def delete_groups(req: Any, version: int, ctx: Context) -> Plan:
    names = list(req.groups_names)

    def answer(parts: Sequence[Response]) -> Values:
        (r,) = parts
        if type(r) is not DeleteGroupsResponse:
            return {"results": [{"group_id": g, "error_code": r.error_code} for g in names]}
        return {
            "results": [{"group_id": g.group_id, "error_code": g.error_code} for g in r.results]
        }

    return Plan([DeleteGroupsRequest(groups=names)], answer)


def create_topics(req: Any, version: int, ctx: Context) -> Plan:
    refused: dict[str, tuple[int, str]] = {}
    specs: list[TopicSpec] = []
    too_many = _new_partitions(req.topics) > MAX_PARTITIONS_PER_REQUEST
    for t in req.topics:
        problem = (
            (int(ErrorCode.POLICY_VIOLATION), _TOO_MANY_NEW)
            if too_many
            else _one_copy(t.replication_factor, t.assignments)
        )
        if problem is not None:
            refused[t.name] = problem
            continue
        count = t.num_partitions if t.num_partitions != -1 else _DEFAULT_PARTITIONS
        specs.append(TopicSpec(name=t.name, partitions=count))
    validate_only = bool(get(req, "validate_only", False))
    calls: list[Request] = [] if validate_only or not specs else [CreateTopicsRequest(topics=specs)]
    counts = {s.name: s.partitions for s in specs}

    def answer(parts: Sequence[Response]) -> Values:
        results = _topic_results(parts)
        topics = []
        for t in req.topics:
            code, text = refused.get(t.name) or results.get(t.name) or (0, None)
            if parts and not code:
                ctx.topic_changed(t.name)
            if validate_only and not code and t.name in ctx.topics:
                code, text = int(ErrorCode.TOPIC_ALREADY_EXISTS), f"topic {t.name!r} exists"
            topics.append(
                {
                    "name": t.name,
                    "topic_id": ctx.topic_ids.get(t.name) if parts and not code else None,  # v7+
                    "error_code": code,
                    "error_message": text,
                    "num_partitions": counts.get(t.name, -1) if not code else -1,
                    "replication_factor": 1 if not code else -1,
                    "configs": [],
                    "topic_config_error_code": 0,
                }
            )
        return {"topics": topics}

    return Plan(calls, answer)


def _new_partitions(topics: Sequence[Any]) -> int:
    """The partitions a CreateTopics asks for, counted as Kafka's controller does."""
    total = 0
    for t in topics:
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == -1:
            total += _DEFAULT_PARTITIONS
        elif t.num_partitions > 0:
            total += t.num_partitions
    return total


def _one_copy(replication_factor: int, assignments: Sequence[Any]) -> tuple[int, str] | None:
    if replication_factor not in (-1, 1):
        text = f"replication factor {replication_factor}: huddle keeps one copy, on one broker"
        return INVALID_REPLICATION_FACTOR, text
    for a in assignments:
        if len(a.broker_ids) != 1:
            return INVALID_REPLICA_ASSIGNMENT, "each partition has one replica, on broker 0"
    return None


def delete_topics(req: Any, version: int, ctx: Context) -> Plan:
    states = get(req, "topics")
    asked: list[tuple[str | None, UUID | None]] = []  # each topic's name (None: id unknown)
    for state in states if states is not None else ():  # v6: by name, or by a non-zero id
        topic_id = state.topic_id
        if topic_id is None or topic_id == ZERO_UUID:
            asked.append((state.name or "", ctx.topic_ids.get(state.name or "")))
        else:
            asked.append((ctx.topic_names.get(topic_id), topic_id))
    if states is None:
        asked = [(n, None) for n in req.topic_names]
    names = [n for n, _ in asked if n is not None]
    calls: list[Request] = [DeleteTopicsRequest(topics=names)] if names else []

    def answer(parts: Sequence[Response]) -> Values:
        results = _topic_results(parts)
        for n in names:
            if not results.get(n, (0, None))[0]:
                ctx.topic_changed(n)
        unknown = (UNKNOWN_TOPIC_ID, "no topic has this id")
        return {
            "responses": [
                {
                    "name": n,
                    "topic_id": topic_id,
                    "error_code": (unknown if n is None else results.get(n, (0, None)))[0],
                    "error_message": (unknown if n is None else results.get(n, (0, None)))[1],
                }
                for n, topic_id in asked
            ]
        }

    return Plan(calls, answer)


def create_partitions(req: Any, version: int, ctx: Context) -> Plan:
    refused: dict[str, tuple[int, str]] = {}
    specs = []
    added = sum(max(t.count - ctx.topics.get(t.name, 0), 0) for t in req.topics)
    for t in req.topics:
        now = ctx.topics.get(t.name)
        if added > MAX_PARTITIONS_PER_REQUEST:
            refused[t.name] = (int(ErrorCode.POLICY_VIOLATION), _TOO_MANY_ADDED)
        elif now is not None and t.count <= now:
            refused[t.name] = (
                int(ErrorCode.INVALID_PARTITIONS),
                f"topic {t.name!r} has {now} partitions; the new count must be higher",
            )
        else:
            specs.append(TopicSpec(name=t.name, partitions=t.count))
    validate_only = bool(get(req, "validate_only", False))
    calls: list[Request] = [] if validate_only or not specs else [AlterTopicsRequest(topics=specs)]

    def answer(parts: Sequence[Response]) -> Values:
        results = _topic_results(parts)
        for t in req.topics:
            if parts and not (refused.get(t.name) or results.get(t.name) or (0, None))[0]:
                ctx.topic_changed(t.name)
        return {
            "results": [
                {
                    "name": t.name,
                    "error_code": (refused.get(t.name) or results.get(t.name) or (0, None))[0],
                    "error_message": (refused.get(t.name) or results.get(t.name) or (0, None))[1],
                }
                for t in req.topics
            ]
        }

    return Plan(calls, answer)


def _topic_results(parts: Sequence[Response]) -> dict[str, tuple[int, str | None]]:
    """The core's result of each topic; a refusal of the whole request (an ACL, the data
    dir loading) stands for every topic's."""
    found: dict[str, tuple[int, str | None]] = {}
    for r in parts:
        topics = getattr(r, "topics", None)
        if topics is None or r.error_code:
            return _Every(int(r.error_code), message(r))
        for t in topics:
            found[t.name] = (int(t.error_code), t.error_message)
    return found


class _Every(dict[str, tuple[int, str | None]]):
    """Every topic's result is the same."""

    def __init__(self, code: int, text: str | None) -> None:
        super().__init__()
        self.result = (code, text)

    def get(self, key: str, default: Any = None) -> Any:
        return self.result
