"""``huddle groups list`` and ``huddle groups describe`` for consumer-protocol (KIP-848)
groups: their epochs, server assignor, and each member's reconciliation."""

from __future__ import annotations

from collections.abc import Sequence

from huddle.cli.render import format_table
from huddle.client.describe import GroupView, compact
from huddle.protocol.messages import ListedGroup


def groups_table(groups: Sequence[ListedGroup]) -> str:
    """Every group, with its type (classic or consumer)."""
    return format_table(
        ("GROUP", "TYPE", "PROTOCOL-TYPE", "STATE"),
        [
            (g.group_id, g.group_type or "classic", g.protocol_type or "-", g.state or "-")
            for g in groups
        ],
    )


def render_consumer_group(group: GroupView) -> str:
    """A consumer group: its epochs and, per member, its epoch and state, what it owns, what
    it must give up (PENDING-REVOCATION) and what the target assignment gives it."""
    head = format_table(
        ("group", group.group_id),
        [
            ("type", group.group_type),
            ("state", group.state or "-"),
            ("group epoch", group.group_epoch),
            ("target epoch", group.target_epoch),
            ("assignor", group.assignor or "-"),
            ("members", len(group.members)),
        ],
    )
    if not group.members:
        return head
    members = format_table(
        (
            "MEMBER-ID",
            "INSTANCE-ID",
            "CLIENT-ID",
            "HOST",
            "EPOCH",
            "STATE",
            "TOPICS",
            "OWNED",
            "PENDING-REVOCATION",
            "TARGET",
        ),
        [
            (
                m.member_id,
                m.group_instance_id or "-",
                m.client_id or "-",
                m.client_host or "-",
                "-" if m.member_epoch is None else m.member_epoch,
                m.member_state or "-",
                ",".join([*m.topics, *([f"/{m.subscribed_regex}/"] if m.subscribed_regex else [])])
                or "-",
                compact(m.owned),
                compact(m.pending_revocation),
                compact(m.target),
            )
            for m in group.members
        ],
    )
    return f"{head}\n\n{members}"
