"""What goes into and comes out of the consumer group protocol's core (KIP-848), as values.

``HeartbeatRequest`` and ``HeartbeatAnswer`` carry the fields of Kafka's
ConsumerGroupHeartbeat (API key 68, version 1) that the group state machine reads and
writes. A wire translates to and from them; the core never sees bytes.

Topics are keyed by **name** here. Kafka's messages carry topic ids (UUIDs); a wire that
serves them maps each id to its name with the topic view (``TopicView.ids``) before it calls
the core, and each name back to its id when it answers. The core reads the ids only to
notice a topic deleted and created again under the same name (``target``, ``reconcile``).

Times are milliseconds on the caller's clock (``now``), as everywhere in the coordinator
core.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import msgspec

from huddle.protocol.errors import ErrorCode, HuddleError

# topic name -> partition numbers. Treated as immutable: a new mapping replaces an old one.
Assignment = Mapping[str, frozenset[int]]

EMPTY: Assignment = {}

JOIN_EPOCH = 0  # a member (re)joins
LEAVE_EPOCH = -1  # a member leaves for good
STATIC_LEAVE_EPOCH = -2  # a static member leaves for now, and keeps its instance id's place

# migration policies (Kafka's group.consumer.migration.policy): which conversions of a group
# with members between the classic and the consumer protocol are made online
BIDIRECTIONAL = "bidirectional"  # both (Kafka 4.0's default, and huddle's)
UPGRADE = "upgrade"  # classic to consumer only
DOWNGRADE = "downgrade"  # consumer to classic only
DISABLED = "disabled"  # neither
MIGRATION_POLICIES = (BIDIRECTIONAL, UPGRADE, DOWNGRADE, DISABLED)


def upgrades(policy: str) -> bool:
    """Whether ``policy`` upgrades a classic group a consumer-protocol member joins."""
    return policy in (BIDIRECTIONAL, UPGRADE)


def downgrades(policy: str) -> bool:
    """Whether ``policy`` downgrades a consumer group left with classic members only."""
    return policy in (BIDIRECTIONAL, DOWNGRADE)


class TopicView(msgspec.Struct, frozen=True):
    """The topics the group coordinator may assign: name -> partition count.

    ``version`` changes whenever the view does (a topic created, deleted, or given
    partitions): a group resolves its regular expressions again, and looks at its topics'
    partition counts and ids again, only when it sees a new version. ``ids`` (name -> the
    topic's id, as text; a topic without one is left out) tells a topic deleted and created
    again apart from the one it replaced, even with the same partition count.
    ``describable``, when set, says which topics a regular expression may resolve to: those
    the principal of the heartbeat that resolves it may DESCRIBE (Kafka 4.x filters
    regex-resolved topics so); None: every topic.
    """

    partitions: Mapping[str, int]
    version: int = 0
    ids: Mapping[str, str] = msgspec.field(default_factory=dict)
    describable: Callable[[str], bool] | None = None


class ConsumerGroupConfig(msgspec.Struct, frozen=True):
    """The coordinator's settings for consumer-protocol groups, Kafka's defaults
    (``group.consumer.*``)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    # how long a group remembers a member that left, for assignors that hold its partitions
    departure_memory_ms: int = 300_000
    # group.consumer.migration.policy (``MIGRATION_POLICIES``): whether a consumer-protocol
    # member joining a classic group upgrades it online (``consumer.classic``), and whether
    # a consumer group whose last consumer-protocol member goes is downgraded back to a
    # classic group (``consumer.downgrade``)
    migration_policy: str = BIDIRECTIONAL
    # the classic groups' maximum size (0: none): a larger group is not downgraded
    classic_max_size: int = 0


class HeartbeatRequest(msgspec.Struct, frozen=True):
    """ConsumerGroupHeartbeat v1. ``None`` means "not sent, unchanged since the last one"
    (Kafka's null); an empty tuple or mapping is a value."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None  # the partitions the member owns now

    def is_full(self) -> bool:
        """A full request (a join, or a member resending everything after an error): it is
        always answered with the whole assignment."""
        subscribed = self.subscribed_topic_names is not None or (
            self.subscribed_topic_regex is not None
        )
        return self.member_epoch == JOIN_EPOCH or (
            self.rebalance_timeout_ms != -1 and subscribed and self.owned is not None
        )


class HeartbeatAnswer(msgspec.Struct, frozen=True):
    """ConsumerGroupHeartbeat's response. ``assignment`` is ``None`` when it did not change
    (and the request was not a full one): the member keeps what it has."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


class RefusedError(HuddleError):
    """A rule refused the request: answered with ``code`` and ``message``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ClassicSnapshot(msgspec.Struct, frozen=True):
    """One member of a stable classic group, as the classic coordinator has it."""

    member_id: str
    instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes  # its last SyncGroup's ConsumerProtocol assignment


class ClassicGroupSnapshot(msgspec.Struct, frozen=True):
    """A stable classic group as the upgrade takes it: its generation, its members."""

    generation: int
    members: tuple[ClassicSnapshot, ...]
