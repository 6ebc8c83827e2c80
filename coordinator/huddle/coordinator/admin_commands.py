"""The ``huddle topics ...`` and ``huddle groups ...`` commands: run them, render the result.

Human output is plain aligned tables; ``--json`` gives one JSON document on one line.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import msgspec

from huddle.client.admin import Admin
from huddle.client.describe import GroupView, compact


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces; trailing spaces trimmed."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def to_json(value: object) -> str:
    return msgspec.json.encode(value).decode()


def render_group(group: GroupView) -> str:
    protocol = "/".join(p for p in (group.protocol_type, group.protocol) if p) or "-"
    head = format_table(
        ("group", group.group_id),
        [
            ("state", group.state or "-"),
            ("generation", group.generation),
            ("protocol", protocol),
            ("leader", group.leader or "-"),
            ("members", len(group.members)),
        ],
    )
    if not group.members:
        return head
    members = format_table(
        ("MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "TOPICS", "OWNED", "ASSIGNED"),
        [
            (
                m.member_id,
                m.group_instance_id or "-",
                m.client_id or "-",
                m.client_host or "-",
                ",".join(m.topics) or "-",
                compact(m.owned),
                compact(m.assigned),
            )
            for m in group.members
        ],
    )
    return f"{head}\n\n{members}"


async def run_admin_command(args: argparse.Namespace, bootstrap: str, wait_s: float) -> str:
    """Run one topics/groups command against ``bootstrap``; return what to print.

    ``wait_s`` bounds connecting and each request.
    """
    as_json = bool(getattr(args, "json", False))
    async with Admin(bootstrap, client_id="huddle-cli", timeout=wait_s) as admin:
        match (args.command, args.action):
            case ("topics", "create"):
                await admin.create_topic(args.name, args.partitions)
                if as_json:
                    return to_json({"name": args.name, "partitions": args.partitions})
                return f'created topic "{args.name}" with {args.partitions} partitions'
            case ("topics", "alter"):
                await admin.alter_topic(args.name, args.partitions)
                if as_json:
                    return to_json({"name": args.name, "partitions": args.partitions})
                return f'topic "{args.name}" now has {args.partitions} partitions'
            case ("topics", "delete"):
                await admin.delete_topic(args.name)
                if as_json:
                    return to_json({"name": args.name, "deleted": True})
                return f'deleted topic "{args.name}"'
            case ("topics", "list"):
                topics = await admin.list_topics()
                if as_json:
                    return to_json([{"name": n, "partitions": p} for n, p in topics.items()])
                if not topics:
                    return "no topics"
                return format_table(("TOPIC", "PARTITIONS"), list(topics.items()))
            case ("groups", "list"):
                groups = await admin.list_groups()
                if as_json:
                    return to_json(groups)
                if not groups:
                    return "no groups"
                return format_table(
                    ("GROUP", "PROTOCOL-TYPE", "STATE"),
                    [(g.group_id, g.protocol_type or "-", g.state or "-") for g in groups],
                )
            case ("groups", "describe"):
                group = await admin.describe(args.group)
                return to_json(group) if as_json else render_group(group)
    raise ValueError(f"unknown command {args.command} {args.action}")
