"""What each request needs of the authorizer, as Kafka's table has it, and the answers
that refuse it.

Whole requests about one group need an operation on it; when refused, the request's own
response type carries GROUP_AUTHORIZATION_FAILED (30):

* JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit: READ on the group;
* OffsetFetch, FindCoordinator: DESCRIBE on the group.

Requests naming several things are answered item by item: the items refused get
TOPIC_AUTHORIZATION_FAILED (29) or GROUP_AUTHORIZATION_FAILED (30), the rest are done:

* OffsetCommit: READ on each topic; OffsetFetch: DESCRIBE on each topic (fetching every
  offset of a group leaves out the topics that may not be described);
* CreateTopics: CREATE on the cluster, or CREATE on the topic; AlterTopics: ALTER on the
  topic; DeleteTopics: DELETE on the topic;
* ListTopics: DESCRIBE on each topic (listing every topic leaves the others out);
* DescribeGroups: DESCRIBE on each group; DeleteGroups: DELETE on each group;
* ListGroups: DESCRIBE on the cluster lists every group, else only the groups the
  principal may DESCRIBE.

DescribeCluster names the nodes to any authenticated client, as Kafka's metadata names
brokers; the shard owners and epochs too (``huddle cluster status``) need DESCRIBE on the
cluster, else CLUSTER_AUTHORIZATION_FAILED (31).

``screen`` returns a refusal, or the request to run (the refused items taken out) and a
function that puts the refused items back into the response.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from huddle.coordinator.effects import Peer
from huddle.coordinator.security.acls import (
    CLUSTER_NAME,
    Authorizer,
    Operation,
    ResourceType,
)
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    AlterTopicsRequest,
    AlterTopicsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletedGroup,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchedOffset,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopicResult,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopicResult,
    PartitionResult,
    Request,
    Response,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicMetadata,
    TopicResult,
)

G, T, C = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER
Finish = Callable[[Response], Response]


@dataclass(frozen=True, slots=True)
class Screened:
    request: Request | None = None  # None: refused
    refusal: Response | None = None
    finish: Finish | None = None  # puts refused items back into the answer


_GROUP_REFUSALS: dict[type[Any], type[Any]] = {
    JoinGroupRequest: JoinGroupResponse,
    SyncGroupRequest: SyncGroupResponse,
    HeartbeatRequest: HeartbeatResponse,
    LeaveGroupRequest: LeaveGroupResponse,
    OffsetCommitRequest: OffsetCommitResponse,
    OffsetFetchRequest: OffsetFetchResponse,
    FindCoordinatorRequest: FindCoordinatorResponse,
}
_GROUP_OPERATION: dict[type[Any], Operation] = {
    OffsetFetchRequest: Operation.DESCRIBE,
    FindCoordinatorRequest: Operation.DESCRIBE,
}


def _group_message(peer: Peer, operation: Operation, group_id: str) -> str:
    return f"{peer.principal} may not {operation} group {group_id!r}"


def _topic_message(peer: Peer, operation: Operation, topic: str) -> str:
    return f"{peer.principal} may not {operation} topic {topic!r}"


def group_allowed(auth: Authorizer, peer: Peer, request: Request) -> Response | None:
    """The refusal of a request about one group, or None if the principal may make it."""
    operation = _GROUP_OPERATION.get(type(request), Operation.READ)
    group_id: str = getattr(request, "group_id", "")
    if auth.allowed(peer.principal, peer.host, operation, G, group_id):
        return None
    refusal = _GROUP_REFUSALS[type(request)]
    return refusal(  # type: ignore[no-any-return]
        error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
        error_message=_group_message(peer, operation, group_id),
    )


def nothing_left(request: Request) -> bool:
    """Whether a screened request about several groups has none left: its answer is its
    refusals, wherever the coordinator is and whatever it is doing."""
    return isinstance(request, DescribeGroupsRequest | DeleteGroupsRequest) and not request.groups


def screen(auth: Authorizer, peer: Peer, request: Request) -> Screened:
    if type(request) in _GROUP_REFUSALS:
        refusal = group_allowed(auth, peer, request)
        if refusal is not None:
            return Screened(refusal=refusal)
    match request:
        case OffsetCommitRequest():
            return _commit(auth, peer, request)
        case OffsetFetchRequest():
            return _fetch(auth, peer, request)
        case CreateTopicsRequest():
            everything = auth.allowed(peer.principal, peer.host, Operation.CREATE, C, CLUSTER_NAME)
            return _topics(auth, peer, request, Operation.CREATE, everything)
        case AlterTopicsRequest():
            return _topics(auth, peer, request, Operation.ALTER, False)
        case DeleteTopicsRequest():
            return _delete(auth, peer, request)
        case ListTopicsRequest():
            return _list_topics(auth, peer, request)
        case DescribeGroupsRequest():
            return _describe(auth, peer, request)
        case DeleteGroupsRequest():
            return _delete_groups(auth, peer, request)
        case ListGroupsRequest():
            return _list_groups(auth, peer, request)
        case DescribeClusterRequest(include_shards=True):
            if not _may(auth, peer, Operation.DESCRIBE, C, CLUSTER_NAME):
                message = f"{peer.principal} may not DESCRIBE the cluster's shards"
                return Screened(
                    refusal=DescribeClusterResponse(
                        error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=message
                    )
                )
    return Screened(request=request)


def _may(auth: Authorizer, peer: Peer, operation: Operation, kind: ResourceType, name: str) -> bool:
    return auth.allowed(peer.principal, peer.host, operation, kind, name)


def _commit(auth: Authorizer, peer: Peer, request: OffsetCommitRequest) -> Screened:
    allowed = [t for t in request.topics if _may(auth, peer, Operation.READ, T, t.name)]
    refused = [
        OffsetCommitTopicResult(
            name=t.name,
            partitions=[
                PartitionResult(
                    partition=p.partition, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED
                )
                for p in t.partitions
            ],
        )
        for t in request.topics
        if t not in allowed
    ]
    return _partly(request, "topics", allowed, refused, OffsetCommitResponse, "topics")


def _fetch(auth: Authorizer, peer: Peer, request: OffsetFetchRequest) -> Screened:
    if request.topics is None:

        def only_described(response: Response) -> Response:
            if not isinstance(response, OffsetFetchResponse) or response.error_code:
                return response
            shown = [t for t in response.topics if _may(auth, peer, Operation.DESCRIBE, T, t.name)]
            return _replace(response, topics=shown)

        return Screened(request=request, finish=only_described)
    allowed = [t for t in request.topics if _may(auth, peer, Operation.DESCRIBE, T, t.name)]
    refused = [
        OffsetFetchTopicResult(
            name=t.name,
            partitions=[
                FetchedOffset(partition=p, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                for p in t.partitions
            ],
        )
        for t in request.topics
        if t not in allowed
    ]
    return _partly(request, "topics", allowed, refused, OffsetFetchResponse, "topics")


def _topics(
    auth: Authorizer,
    peer: Peer,
    request: CreateTopicsRequest | AlterTopicsRequest,
    operation: Operation,
    everything: bool,
) -> Screened:
    if everything:
        return Screened(request=request)
    allowed = [t for t in request.topics if _may(auth, peer, operation, T, t.name)]
    refused = _refused_topics(peer, operation, [t.name for t in request.topics if t not in allowed])
    answer = CreateTopicsResponse if type(request) is CreateTopicsRequest else AlterTopicsResponse
    return _partly(request, "topics", allowed, refused, answer, "topics")


def _delete(auth: Authorizer, peer: Peer, request: DeleteTopicsRequest) -> Screened:
    allowed = [t for t in request.topics if _may(auth, peer, Operation.DELETE, T, t)]
    names = [t for t in request.topics if t not in allowed]
    refused = _refused_topics(peer, Operation.DELETE, names)
    return _partly(request, "topics", allowed, refused, DeleteTopicsResponse, "topics")


def _refused_topics(peer: Peer, operation: Operation, names: list[str]) -> list[TopicResult]:
    return [
        TopicResult(
            name=name,
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            error_message=_topic_message(peer, operation, name),
        )
        for name in names
    ]


def _list_topics(auth: Authorizer, peer: Peer, request: ListTopicsRequest) -> Screened:
    def may(name: str) -> bool:
        return _may(auth, peer, Operation.DESCRIBE, T, name)

    if request.topics is None:

        def only_described(response: Response) -> Response:
            if not isinstance(response, ListTopicsResponse) or response.error_code:
                return response
            return _replace(response, topics=[t for t in response.topics if may(t.name)])

        return Screened(request=request, finish=only_described)
    allowed = [t for t in request.topics if may(t)]
    refused = [
        TopicMetadata(name=t, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        for t in request.topics
        if t not in allowed
    ]
    return _partly(request, "topics", allowed, refused, ListTopicsResponse, "topics")


def _describe(auth: Authorizer, peer: Peer, request: DescribeGroupsRequest) -> Screened:
    allowed, refused = _groups(auth, peer, request.groups, Operation.DESCRIBE, DescribedGroup)
    return _partly(request, "groups", allowed, refused, DescribeGroupsResponse, "groups")


def _delete_groups(auth: Authorizer, peer: Peer, request: DeleteGroupsRequest) -> Screened:
    allowed, refused = _groups(auth, peer, request.groups, Operation.DELETE, DeletedGroup)
    return _partly(request, "groups", allowed, refused, DeleteGroupsResponse, "results")


def _groups(
    auth: Authorizer, peer: Peer, names: list[str], operation: Operation, item: type[Any]
) -> tuple[list[str], list[Any]]:
    """The groups the principal may ``operation``, and the refusals of the others."""
    allowed = [g for g in names if _may(auth, peer, operation, G, g)]
    refused = [
        item(
            group_id=g,
            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
            error_message=_group_message(peer, operation, g),
        )
        for g in names
        if g not in allowed
    ]
    return allowed, refused


def _partly(
    request: Request,
    field: str,
    allowed: list[Any],
    refused: list[Any],
    answer: type[Any],
    results: str,
) -> Screened:
    """The request with only its ``allowed`` items (in ``field``), and the refusals put
    back into the answer's ``results``; the request as it is when nothing was refused."""
    if not refused:
        return Screened(request=request)

    def finish(response: Response) -> Response:
        if not isinstance(response, answer) or response.error_code != ErrorCode.NONE:
            return response
        done: Response = _replace(response, **{results: [*getattr(response, results), *refused]})
        return done

    return Screened(request=_replace(request, **{field: allowed}), finish=finish)


def _list_groups(auth: Authorizer, peer: Peer, request: ListGroupsRequest) -> Screened:
    if _may(auth, peer, Operation.DESCRIBE, C, CLUSTER_NAME):
        return Screened(request=request)

    def only_described(response: Response) -> Response:
        if not isinstance(response, ListGroupsResponse) or response.error_code:
            return response
        shown = [g for g in response.groups if _may(auth, peer, Operation.DESCRIBE, G, g.group_id)]
        return _replace(response, groups=shown)

    return Screened(request=request, finish=only_described)


M = TypeVar("M", bound=msgspec.Struct)


def described_topics(
    auth: Authorizer, peer: Peer, topics: list[TopicMetadata]
) -> list[TopicMetadata]:
    """The topics of a TopicMetadataChanged notice the connection's principal may DESCRIBE."""
    return [t for t in topics if _may(auth, peer, Operation.DESCRIBE, T, t.name)]


def _replace(message: M, **changes: Any) -> M:
    return msgspec.structs.replace(message, **changes)
