"""The member core's vocabulary: its states, the ``Step`` it answers with, what comes
next, its configuration and its reactions to error codes, written once.

``huddle.client.member_core.MemberCore`` returns these; the runtime layers above it
(``huddle.client.driver``, ``huddle.client.flow``) and both adapters (``Member`` and the
simulator) act on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from huddle.client.assignors.base import Assignor, MemberAssignment, RebalanceProtocol
from huddle.protocol.embedded import FORMATS, HUDDLE, KAFKA, EmbeddedFormat, TopicPartition
from huddle.protocol.errors import ErrorCode, InvalidArgumentError
from huddle.protocol.messages import MAX_CLIENT_ID, MAX_GROUP_ID, MAX_INSTANCE_ID

E = ErrorCode


class MemberState(Enum):
    UNJOINED = "unjoined"  # no generation: must join
    JOINING = "joining"  # JoinGroup in flight
    SYNCING = "syncing"  # SyncGroup in flight
    STABLE = "stable"  # synced; heartbeating
    FAILED = "failed"  # a fatal error: the member stops


class Next(Enum):
    """What the runtime does after a step."""

    STAY = "stay"  # carry on (heartbeating)
    JOIN = "join"  # send a JoinGroup now
    SYNC = "sync"  # send a SyncGroup now
    RECONNECT = "reconnect"  # find the coordinator again (after a backoff), then rejoin
    RETRY = "retry"  # send the same kind of request again after a backoff
    FAIL = "fail"  # stop: a fatal error


# Reactions to error codes, written once (docs/coordinator.md section 2).
FATAL = frozenset(
    {
        E.FENCED_INSTANCE_ID,
        E.INCONSISTENT_GROUP_PROTOCOL,
        E.INVALID_SESSION_TIMEOUT,
        E.GROUP_MAX_SIZE_REACHED,
        E.INVALID_GROUP_ID,
        E.INVALID_REQUEST,
        E.UNSUPPORTED_VERSION,
        E.GROUP_AUTHORIZATION_FAILED,  # as Kafka's consumer: its ACLs will not change by retrying
    }
)
REDISCOVER = frozenset(
    {E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS}
)
FELL_OUT = frozenset({E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION})


@dataclass(frozen=True, slots=True)
class Step:
    """Callbacks to run, in this order, then ``next``."""

    lost: frozenset[TopicPartition] = frozenset()
    revoked: frozenset[TopicPartition] = frozenset()
    assigned: frozenset[TopicPartition] | None = None  # None: no on_partitions_assigned
    next: Next = Next.STAY
    error: ErrorCode = E.NONE
    message: str = ""
    rejoin_after_ms: int = 0  # a scheduled rebalance (Design II): rejoin after this delay
    # KIP-441: the new (standby, warm-up) sets, when they changed
    replicas: tuple[frozenset[TopicPartition], frozenset[TopicPartition]] | None = None
    # for the assignor's on_assignment, after on_partitions_revoked and before
    # on_partitions_assigned (KIP-429): the runtime calls MemberCore.assignment_received
    assignment: tuple[MemberAssignment, int] | None = None


@dataclass
class MemberConfig:
    group_id: str
    topics: Sequence[str]
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1_000
    rebalance_timeout_ms: int = 30_000
    client_id: str = "huddle-member"
    # the format of its subscription: huddle's, or Kafka's (a Kafka client may lead)
    embedded: EmbeddedFormat = HUDDLE

    def __post_init__(self) -> None:
        if self.embedded not in FORMATS:
            raise InvalidArgumentError(
                f"embedded must be one of {', '.join(FORMATS)}, not {self.embedded!r}"
            )
        bounds = (
            ("group id", self.group_id, MAX_GROUP_ID),
            ("group instance id", self.instance_id or "", MAX_INSTANCE_ID),
            ("client id", self.client_id, MAX_CLIENT_ID),
        )
        for what, value, bound in bounds:
            if len(value) > bound:
                raise InvalidArgumentError(f"the {what} has {len(value)} characters, over {bound}")
        if self.instance_id == "":
            raise InvalidArgumentError("the group instance id must be None (dynamic) or not empty")


def choose_protocol(assignors: Sequence[Assignor]) -> RebalanceProtocol:
    """The highest rebalance protocol every configured assignor supports (KIP-429)."""
    if not assignors:
        raise InvalidArgumentError("a member needs at least one assignor")
    common = set(assignors[0].supported_protocols)
    for assignor in assignors[1:]:
        common &= set(assignor.supported_protocols)
    if not common:
        names = ", ".join(a.name for a in assignors)
        raise InvalidArgumentError(f"the assignors {names} share no rebalance protocol")
    return max(common)


def check_embedded(embedded: EmbeddedFormat, assignors: Sequence[Assignor]) -> None:
    """Kafka's format has no room for what some assignors need (task lags, revoked
    partitions, a scheduled rebalance delay, standbys): those refuse it."""
    if embedded != KAFKA:
        return
    needing = [a.name for a in assignors if a.needs_huddle_format]
    if needing:
        raise InvalidArgumentError(
            f"embedded='kafka' cannot carry what {', '.join(needing)} needs: "
            "use Kafka's assignors (range, roundrobin, sticky, cooperative-sticky)"
        )
