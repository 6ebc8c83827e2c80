"""Drive the sans-IO coordinator core with an explicit clock, as a set of fake connections.

Every request gets a fresh correlation id; replies and notices land in per-connection
inboxes that tests read. Time moves only when a test says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from huddle.coordinator.config import GroupConfig
from huddle.coordinator.core import Coordinator, Peer
from huddle.coordinator.effects import incarnation_digest
from huddle.coordinator.group import Group
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    Notice,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    Protocol,
    Reply,
    Request,
    Response,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)

FAST = GroupConfig(initial_rebalance_delay_ms=0)
SESSION_MS = 10_000
REBALANCE_MS = 30_000
ANONYMOUS = "User:ANONYMOUS"


def protocols(*names: str, metadata: bytes = b"") -> list[Protocol]:
    return [Protocol(name=n, metadata=metadata) for n in names or ("range",)]


class Driver:
    def __init__(self, config: GroupConfig = FAST, **overrides: Any) -> None:
        self.config = replace(config, **overrides) if overrides else config
        ids = itertools.count(1)
        self.core = Coordinator(self.config, new_member_id=lambda c: f"{c or 'm'}-{next(ids)}")
        self.now = 0.0
        self._cids = itertools.count(1)
        self.replies: dict[int, Response] = {}
        self.notices: dict[int, list[Notice]] = {}
        self.closed: set[int] = set()
        # who each connection is, where a test says: (client id, principal); otherwise
        # connection n is its own client, "cn", anonymous
        self.clients: dict[int, tuple[str, str]] = {}
        # the incarnation token each connection presented, where a test says: none otherwise
        self.tokens: dict[int, bytes] = {}

    # --- plumbing --------------------------------------------------------------------

    def _collect(self, out: list[tuple[int, Any]]) -> None:
        for conn_id, frame in out:
            if conn_id in self.closed:
                continue
            if isinstance(frame, Reply):
                assert frame.correlation_id not in self.replies, "answered twice"
                self.replies[frame.correlation_id] = frame.response
            else:
                self.notices.setdefault(conn_id, []).append(frame)

    def peer(self, conn: int) -> Peer:
        client_id, principal = self.clients.get(conn, (f"c{conn}", ANONYMOUS))
        digest = incarnation_digest(self.tokens.get(conn))
        return Peer(conn, client_id, "127.0.0.1", principal, digest)

    def send(self, conn: int, request: Request) -> int:
        cid = next(self._cids)
        self._collect(self.core.handle(self.peer(conn), cid, request, self.now))
        return cid

    def reconnect(self, old: int, new: int) -> None:
        """Connection ``new`` is the client of connection ``old`` come back: the same
        client id, principal and incarnation token."""
        peer = self.peer(old)
        self.clients[new] = (peer.client_id, peer.principal)
        if old in self.tokens:
            self.tokens[new] = self.tokens[old]

    def present(self, conn: int, token: bytes) -> None:
        """Connection ``conn`` presented this incarnation token in its handshake."""
        self.tokens[conn] = token

    def connect_as(self, conn: int, client_id: str, principal: str = ANONYMOUS) -> None:
        """Connection ``conn`` is a client with this client id and principal."""
        self.clients[conn] = (client_id, principal)

    def shutdown(self) -> None:
        """The coordinator stops: every held request is answered."""
        self._collect(self.core.shutdown())

    def advance(self, ms: float, unread: Callable[[int], bool] | None = None) -> None:
        """Move the clock, firing every deadline on the way in order (``unread``: as the
        transport would say, which connections have input not yet handed over)."""
        target = self.now + ms
        while True:
            deadline = self.core.next_deadline()
            if deadline is None or deadline > target:
                break
            self.now = max(self.now, deadline)
            self._collect(self.core.advance(self.now, unread))
        self.now = target
        self._collect(self.core.advance(self.now))

    def close(self, conn: int) -> None:
        self.closed.add(conn)
        self._collect(self.core.connection_closed(conn, self.now))

    def answered(self, cid: int) -> bool:
        return cid in self.replies

    def response(self, cid: int) -> Response:
        assert cid in self.replies, f"request {cid} has not been answered"
        return self.replies[cid]

    def take_notices(self, conn: int) -> list[Notice]:
        return self.notices.pop(conn, [])

    def group(self, group_id: str = "g") -> Group:
        return self.core.groups[group_id]

    # --- requests --------------------------------------------------------------------

    def join(
        self,
        conn: int,
        member_id: str = "",
        *,
        group: str = "g",
        instance: str | None = None,
        names: tuple[str, ...] = ("range",),
        metadata: bytes = b"",
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
    ) -> int:
        return self.send(
            conn,
            JoinGroupRequest(
                group_id=group,
                member_id=member_id,
                group_instance_id=instance,
                protocol_type=protocol_type,
                protocols=protocols(*names, metadata=metadata),
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms,
            ),
        )

    def join_new(self, conn: int, **kwargs: Any) -> tuple[str, int]:
        """A dynamic member's two-step join (KIP-394): returns (member id, held join cid)."""
        first = self.join_response(self.join(conn, **kwargs))
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED, first
        return first.member_id, self.join(conn, first.member_id, **kwargs)

    def join_response(self, cid: int) -> JoinGroupResponse:
        response = self.response(cid)
        assert isinstance(response, JoinGroupResponse), response
        return response

    def sync(
        self,
        conn: int,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group: str = "g",
        instance: str | None = None,
    ) -> int:
        return self.send(
            conn,
            SyncGroupRequest(
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance,
                assignments=[
                    SyncGroupAssignment(member_id=m, assignment=a)
                    for m, a in (assignments or {}).items()
                ],
            ),
        )

    def sync_response(self, cid: int) -> SyncGroupResponse:
        response = self.response(cid)
        assert isinstance(response, SyncGroupResponse), response
        return response

    def heartbeat(
        self,
        conn: int,
        member_id: str,
        generation: int,
        *,
        group: str = "g",
        instance: str | None = None,
    ) -> int:
        cid = self.send(
            conn,
            HeartbeatRequest(
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance,
            ),
        )
        response = self.response(cid)
        assert isinstance(response, HeartbeatResponse)
        return response.error_code

    def leave(
        self, conn: int, *members: MemberIdentity | str, group: str = "g"
    ) -> LeaveGroupResponse:
        idents = [MemberIdentity(member_id=m) if isinstance(m, str) else m for m in members]
        response = self.response(self.send(conn, LeaveGroupRequest(group_id=group, members=idents)))
        assert isinstance(response, LeaveGroupResponse)
        return response

    def commit(
        self,
        conn: int,
        offsets: dict[tuple[str, int], int],
        *,
        member_id: str = "",
        generation: int = -1,
        group: str = "g",
        instance: str | None = None,
    ) -> OffsetCommitResponse:
        topics: dict[str, list[OffsetCommitPartition]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                OffsetCommitPartition(partition=partition, offset=offset)
            )
        request = OffsetCommitRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            topics=[OffsetCommitTopic(name=t, partitions=ps) for t, ps in topics.items()],
        )
        response = self.response(self.send(conn, request))
        assert isinstance(response, OffsetCommitResponse)
        return response

    # --- whole steps -----------------------------------------------------------------

    def form(self, *conns: int, **kwargs: Any) -> list[str]:
        """Join one dynamic member per connection into one generation and sync them all.
        Returns the member ids in connection order; the group ends Stable."""
        ids: dict[int, str] = {}
        held: dict[int, int] = {}
        for conn in conns:
            ids[conn], held[conn] = self.join_new(conn, **kwargs)
            for other in conns:
                if other in held and other != conn and self.answered(held[other]):
                    held[other] = self.join(other, ids[other], **kwargs)
        self.sync_all(ids, [held[c] for c in conns], group=kwargs.get("group", "g"))
        return [ids[c] for c in conns]

    def sync_all(self, members: dict[int, str], join_cids: list[int], *, group: str = "g") -> int:
        """Every member syncs the generation its join answer named; the leader assigns each
        member its own id as bytes. Returns the generation."""
        responses = [self.join_response(cid) for cid in join_cids]
        generation = responses[0].generation_id
        assert all(r.error_code == ErrorCode.NONE for r in responses), responses
        assert {r.generation_id for r in responses} == {generation}
        leader = responses[0].leader
        for conn, member_id in members.items():
            assignments = None
            if member_id == leader:
                assignments = {m: m.encode() for m in members.values()}
            self.sync(conn, member_id, generation, assignments, group=group)
        return generation
