"""Topics and group inspection over one connection.

    async with Admin("127.0.0.1:9292") as admin:
        await admin.create_topic("orders", partitions=6)
        print(await admin.list_topics())

Every method raises the registered HuddleError subclass for an error the coordinator
reports (``TopicAlreadyExistsError``, ``UnknownTopicOrPartitionError``...), and
``CoordinatorUnreachableError`` (a HuddleError and an OSError) naming the address when no
connection can be made (refused, unreachable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

import anyio

from huddle.client.arguments import check_admin
from huddle.client.connection import Connection, connect
from huddle.client.describe import GroupView, view
from huddle.client.discovery import bootstrap_addresses, connect_any, coordinator_of
from huddle.client.security import NO_SECURITY, Security
from huddle.protocol.addresses import format_address
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    GroupIdNotFoundError,
    HuddleError,
    NonEmptyGroupError,
    UsageError,
    raise_for,
)
from huddle.protocol.messages import (
    AlterTopicsRequest,
    AlterTopicsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Request,
    Response,
    TopicResult,
    TopicSpec,
)


def _raise_for_topics(results: list[TopicResult]) -> None:
    for result in results:
        raise_for(result.error_code, result.error_message)


@dataclass(frozen=True)
class NodeAccount:
    """A node as ``huddle cluster status`` shows it: its own answer to DescribeCluster."""

    node_id: str  # "": an address that did not answer
    address: str
    answer: DescribeClusterResponse | None  # None: it could not be asked
    registered: bool  # listed among the cluster's nodes (as the node asked first read etcd)


R = TypeVar("R", bound=Response)
RETRY_BACKOFF_S = (0.1, 1.0)  # first and largest wait between tries of a refused request


class Admin:
    """An async context manager holding one connection to the coordinator."""

    def __init__(
        self,
        bootstrap: str = "127.0.0.1:9292",
        *,
        client_id: str = "huddle-admin",
        timeout: float = 10.0,
        security: Security = NO_SECURITY,
    ) -> None:
        check_admin(timeout=timeout, security=security)
        bootstrap_addresses(bootstrap)  # InvalidArgumentError for a malformed list, at once
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.timeout = timeout
        self.security = security
        self._stack: AsyncExitStack | None = None
        self._conn: Connection | None = None

    async def __aenter__(self) -> Admin:
        stack = AsyncExitStack()
        self._conn = await stack.enter_async_context(self._connect())
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        stack, self._stack, self._conn = self._stack, None, None
        if stack is None:
            return False
        return bool(await stack.__aexit__(exc_type, exc, tb))

    @property
    def connection(self) -> Connection:
        if self._conn is None:
            raise UsageError("use Admin as an async context manager: async with Admin(...)")
        return self._conn

    def _connect(self) -> AbstractAsyncContextManager[Connection]:
        return connect_any(
            self.bootstrap,
            client_id=self.client_id,
            timeout=self.timeout,
            notices=False,
            security=self.security,
        )

    async def _live(self) -> Connection:
        """The connection, made again first if the coordinator closed it meanwhile (an idle
        connection is closed after its idle timeout, as Kafka's are): nothing was sent on a
        closed connection, so no request is ever sent twice."""
        conn = self.connection
        if conn.closed and self._stack is not None:
            await self._stack.aclose()
            stack = AsyncExitStack()
            self._conn = conn = await stack.enter_async_context(self._connect())
            self._stack = stack
        return conn

    async def _call(self, request: Request, expect: type[R]) -> R:
        """``request``, made again with backoff while the node answers that it cannot
        serve it yet (COORDINATOR_NOT_AVAILABLE: a cluster node still joining), until the
        timeout, as Kafka's admin client retries retriable errors. Nothing was done by a
        refused request, so making it again does nothing twice."""
        deadline = anyio.current_time() + self.timeout
        delay = RETRY_BACKOFF_S[0]
        while True:
            conn = await self._live()
            try:
                return await conn.call(request, expect, timeout=self.timeout)
            except CoordinatorNotAvailableError:
                if anyio.current_time() + delay >= deadline:
                    raise
            await anyio.sleep(delay)
            delay = min(delay * 2, RETRY_BACKOFF_S[1])

    async def _group_call(self, group_id: str, request: Request, expect: type[R]) -> R:
        """``request`` to ``group_id``'s coordinator: on this connection when the node it
        reaches coordinates the group, else on a connection made for it."""
        conn = await self._live()
        owner = await coordinator_of(conn, group_id, self.timeout)
        if owner == conn.bootstrap:
            return await conn.call(request, expect, timeout=self.timeout)
        return await self._at(owner, request, expect)

    # --- topics -----------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int) -> None:
        request = CreateTopicsRequest(topics=[TopicSpec(name=name, partitions=partitions)])
        response = await self._call(request, CreateTopicsResponse)
        _raise_for_topics(response.topics)

    async def alter_topic(self, name: str, partitions: int) -> None:
        request = AlterTopicsRequest(topics=[TopicSpec(name=name, partitions=partitions)])
        response = await self._call(request, AlterTopicsResponse)
        _raise_for_topics(response.topics)

    async def delete_topic(self, name: str) -> None:
        request = DeleteTopicsRequest(topics=[name])
        response = await self._call(request, DeleteTopicsResponse)
        _raise_for_topics(response.topics)

    async def list_topics(self) -> dict[str, int]:
        """Every topic and its partition count, sorted by name."""
        response = await self._call(ListTopicsRequest(), ListTopicsResponse)
        return {
            topic.name: topic.partitions
            for topic in sorted(response.topics, key=lambda t: t.name)
            if topic.error_code == ErrorCode.NONE
        }

    # --- groups -----------------------------------------------------------------------

    async def describe_cluster(self, *, shards: bool = True) -> DescribeClusterResponse:
        """The cluster's nodes and shard owners, as the node reached last saw them (a
        single coordinator: one node, no shards). With an authorizer, the shards need
        DESCRIBE on the cluster (ClusterAuthorizationFailedError); ``shards=False`` asks
        for the nodes alone, which any client may."""
        request = DescribeClusterRequest(include_shards=shards)
        return await self._call(request, DescribeClusterResponse)

    async def list_groups(self) -> list[ListedGroup]:
        """Every group, over every node of a cluster (each lists the groups it serves).
        Raises CoordinatorNotAvailableError naming the nodes that could not be asked."""
        cluster = await self.describe_cluster(shards=False)
        by_node = await self.groups_by_node(cluster)
        groups = {g.group_id: g for listed in by_node.values() for g in listed}
        return sorted(groups.values(), key=lambda g: g.group_id)

    async def groups_by_node(
        self, cluster: DescribeClusterResponse, *, strict: bool = True
    ) -> dict[str, list[ListedGroup]]:
        """Each node's groups (the node reached answers for itself on this connection).
        Raises CoordinatorNotAvailableError naming the nodes that could not be asked,
        unless not ``strict`` (they are left out)."""
        found, failed = await self._ask_each_node(cluster, ListGroupsRequest(), ListGroupsResponse)
        if failed and strict:
            raise CoordinatorNotAvailableError("could not list the groups of " + "; ".join(failed))
        return {node_id: list(listed.groups) for node_id, listed in found.items()}

    async def node_accounts(
        self, cluster: DescribeClusterResponse, *, also: Iterable[str] = ()
    ) -> list[NodeAccount]:
        """Each node's own account of itself (DescribeCluster asked of it: how it keeps up
        with etcd and, when ``cluster`` has the shards, which it serves now): every node
        ``cluster`` lists (``answer`` None: it could not be asked), then every address of
        ``also`` (the bootstrap list, say) and every address a node answering names (as it
        last read etcd) that ``cluster`` does not list: a node answering there is not
        registered in etcd (it lost its lease, or is leaving); an address of ``also`` that
        does not answer is listed with no node id."""
        request = DescribeClusterRequest(include_shards=bool(cluster.shards))
        found, _ = await self._ask_each_node(cluster, request, DescribeClusterResponse)
        accounts = [
            NodeAccount(n.node_id, format_address(n.host, n.port), found.get(n.node_id), True)
            for n in cluster.nodes
        ]
        ids = {a.node_id for a in accounts}
        asked = {a.address for a in accounts}
        named = [format_address(n.host, n.port) for answer in found.values() for n in answer.nodes]
        given = set(also)
        for address in dict.fromkeys([*also, *named]):
            if address in asked:
                continue
            asked.add(address)
            answer = await self._ask_at(address, request, DescribeClusterResponse)
            if answer is None:
                if address in given:
                    accounts.append(NodeAccount("", address, None, False))
            elif answer.node_id not in ids:
                ids.add(answer.node_id)
                accounts.append(NodeAccount(answer.node_id, address, answer, False))
        return accounts

    async def _ask_at(self, address: str, request: Request, expect: type[R]) -> R | None:
        try:
            return await self._at(address, request, expect)
        except (OSError, TimeoutError, HuddleError):
            return None

    async def _at(self, address: str, request: Request, expect: type[R]) -> R:
        """``request`` on a connection made to ``address`` for it."""
        async with connect(
            address,
            client_id=self.client_id,
            timeout=self.timeout,
            notices=False,
            security=self.security,
        ) as there:
            return await there.call(request, expect, timeout=self.timeout)

    async def _ask_each_node(
        self, cluster: DescribeClusterResponse, request: Request, expect: type[R]
    ) -> tuple[dict[str, R], list[str]]:
        """``request`` of every node of ``cluster``: the answers by node id, and the nodes
        that could not be asked (with why)."""
        conn = await self._live()
        found: dict[str, R] = {
            cluster.node_id: await conn.call(request, expect, timeout=self.timeout)
        }
        failed: list[str] = []
        for node in cluster.nodes:
            if node.node_id == cluster.node_id:
                continue
            address = format_address(node.host, node.port)
            try:
                found[node.node_id] = await self._at(address, request, expect)
            except (OSError, TimeoutError, HuddleError) as exc:
                failed.append(f"{node.node_id} at {address}: {str(exc) or type(exc).__name__}")
        return found, failed

    async def describe(self, group_id: str) -> GroupView:
        """The group with its members' subscriptions and assignments decoded."""
        return view(await self.describe_group(group_id))

    async def describe_group(self, group_id: str) -> DescribedGroup:
        """Asked of the group's coordinator (in a cluster, the node owning its shard)."""
        request = DescribeGroupsRequest(groups=[group_id])
        response = await self._group_call(group_id, request, DescribeGroupsResponse)
        for group in response.groups:
            if group.group_id == group_id:
                raise_for(group.error_code, group.error_message)
                return group
        raise GroupIdNotFoundError(f"group {group_id!r} was not described")

    # --- group administration (as kafka-consumer-groups) -------------------------------

    async def delete_group(self, group_id: str) -> None:
        """Delete a group and its committed offsets; NonEmptyGroupError while it has
        members, GroupIdNotFoundError if there is no such group."""
        request = DeleteGroupsRequest(groups=[group_id])
        response = await self._group_call(group_id, request, DeleteGroupsResponse)
        for result in response.results:
            if result.group_id == group_id:
                raise_for(result.error_code, result.error_message)
                return
        raise GroupIdNotFoundError(f"group {group_id!r} was not deleted")

    async def committed_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """Every offset the group has committed (none: an empty dict)."""
        request = OffsetFetchRequest(group_id=group_id)
        response = await self._group_call(group_id, request, OffsetFetchResponse)
        found = {}
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code == ErrorCode.NONE and p.offset >= 0:
                    found[TopicPartition(topic.name, p.partition)] = p.offset
        return dict(sorted(found.items()))

    async def set_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` for the group as an administrator (no member, generation -1),
        as kafka-consumer-groups --reset-offsets --execute does: only while the group has
        no members (NonEmptyGroupError otherwise; the coordinator checks it too)."""
        try:
            group = await self.describe_group(group_id)
        except GroupIdNotFoundError:
            group = None
        if group is not None and group.members:
            raise NonEmptyGroupError(
                f"group {group_id!r} has {len(group.members)} members: stop them first"
            )
        by_topic: dict[str, list[OffsetCommitPartition]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(
                OffsetCommitPartition(partition=tp.partition, offset=offset)
            )
        request = OffsetCommitRequest(
            group_id=group_id,
            topics=[OffsetCommitTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        response = await self._group_call(group_id, request, OffsetCommitResponse)
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code != ErrorCode.NONE:
                    where = f"{topic.name}:{p.partition}"
                    raise_for(p.error_code, f"the offset of {where} was not set")
