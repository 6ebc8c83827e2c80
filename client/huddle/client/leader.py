"""The leader's part of a rebalance, pure: subscriptions in, assignment bytes out."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from huddle.client.assignors.base import (
    Assignor,
    GroupAssignment,
    MemberSubscription,
    RebalanceProtocol,
)
from huddle.logs import library_logger
from huddle.protocol.embedded import (
    HUDDLE_SPEAKS,
    Assignment,
    EmbeddedSchemaError,
    Speaks,
    TopicPartition,
    decode_subscription,
    encode_assignment,
    grouped,
    spoken,
)
from huddle.protocol.errors import HuddleError

log = library_logger("huddle.leader")


class AssignmentError(HuddleError, RuntimeError):
    """An assignor produced an assignment that would break the group's guarantees."""


def decode_members(
    members: Sequence[tuple[str, str | None, bytes]],
) -> dict[str, MemberSubscription]:
    """The leader's JoinGroup member list as subscriptions. A member whose metadata cannot
    be read subscribes to nothing (and is logged), rather than failing the rebalance."""
    subscriptions: dict[str, MemberSubscription] = {}
    for member_id, instance_id, metadata in members:
        try:
            sub = decode_subscription(metadata)
        except EmbeddedSchemaError as exc:
            log.warning("subscription_unreadable", member_id=member_id, error_message=str(exc))
            subscriptions[member_id] = MemberSubscription(member_id, frozenset())
            continue
        subscriptions[member_id] = MemberSubscription(
            member_id=member_id,
            topics=frozenset(sub.topics),
            owned=sub.owned,
            generation=sub.generation,
            group_instance_id=instance_id,
            user_data=sub.user_data,
            lags=sub.lags,
        )
    return subscriptions


def speaking(members: Sequence[tuple[str, str | None, bytes]]) -> dict[str, Speaks]:
    """The format each member of the leader's JoinGroup member list spoke: huddle's, or
    Kafka's in some version (a Kafka client's, or a huddle member's with ``embedded="kafka"``)."""
    return {member_id: spoken(metadata) for member_id, _, metadata in members}


def subscribed_topics(subscriptions: Mapping[str, MemberSubscription]) -> set[str]:
    return {t for s in subscriptions.values() for t in s.topics}


def check_cooperative(
    subscriptions: Mapping[str, MemberSubscription], result: GroupAssignment
) -> None:
    """A round must never hand a member a partition that another member claims, unless the
    receiver owns it by right (a strictly higher generation): every other claimant revokes
    it this round and may still be working on it (KIP-429). That covers claims tied in one
    generation too: neither claimant owns such a partition, both revoke it, and it moves in
    the follow-up round (Kafka's partitionsTransferringOwnership)."""
    claims: dict[TopicPartition, list[tuple[str, int]]] = {}
    for member_id, sub in subscriptions.items():
        for tp in sub.owned:
            claims.setdefault(tp, []).append((member_id, sub.generation))
    for member_id, assignment in result.items():
        member = subscriptions.get(member_id)
        unclaimed = assignment.revoked - (member.owned if member is not None else frozenset())
        if unclaimed:
            raise AssignmentError(
                f"{member_id} is told to revoke {sorted(unclaimed)}, which it does not claim"
            )
        both = assignment.revoked & assignment.partitions
        if both:
            raise AssignmentError(f"{member_id} is told to revoke and keep {sorted(both)}")
        for tp in assignment.partitions:
            held = claims.get(tp)
            if held is None:
                continue
            others = [(m, g) for m, g in held if m != member_id]
            if not others:
                continue
            mine = [g for m, g in held if m == member_id]
            if mine and all(g < mine[0] for _, g in others):
                continue  # its claim wins: it keeps it, the stale claimants revoke
            owners = ", ".join(sorted(m for m, _ in others))
            raise AssignmentError(f"{tp} is assigned to {member_id} while {owners} still claim it")


RoundCheck = Callable[[Mapping[str, MemberSubscription], GroupAssignment], None]


def assign(
    assignor: Assignor,
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, MemberSubscription],
    check: RoundCheck = check_cooperative,
    speaks: Mapping[str, Speaks] | None = None,
) -> dict[str, bytes]:
    """Run the assignor and encode every member's Assignment. A cooperative round is
    vetted by ``check`` first (``check_cooperative``: it raises ``AssignmentError``). Each
    member's goes in the format it spoke (``speaks``, from ``speaking``; huddle's if not
    named): a Kafka member gets a ConsumerProtocolAssignment, which carries the assigned
    partitions and the user data only (it works out what it revokes itself, KIP-429)."""
    result = assignor.assign(partitions_per_topic, subscriptions)
    missing = set(subscriptions) - set(result)
    if missing:
        raise AssignmentError(f"assignor {assignor.name} left out members {sorted(missing)}")
    cooperative = RebalanceProtocol.COOPERATIVE in assignor.supported_protocols
    if cooperative:
        check(subscriptions, result)
    encoded: dict[str, bytes] = {}
    for member_id, sub in subscriptions.items():
        a = result[member_id]
        revoked = a.revoked or (sub.owned - a.partitions)
        encoded[member_id] = encode_assignment(
            Assignment(
                assigned=grouped(a.partitions),
                revoked=grouped(revoked),
                scheduled_rebalance_delay_ms=a.scheduled_rebalance_delay_ms,
                user_data=a.user_data,
                standby=grouped(a.standby),
                warmup=grouped(a.warmup),
            ),
            (speaks or {}).get(member_id, HUDDLE_SPEAKS),
        )
    return encoded
