"""``huddle groups delete`` and ``huddle groups reset-offsets``: kafka-consumer-groups'
group administration, and the committed offsets in ``huddle groups describe``."""

from __future__ import annotations

import argparse
from typing import Any

from huddle.cli.render import format_table, plural, to_json
from huddle.cli.usage import UsageError
from huddle.client.admin import Admin
from huddle.client.offset_reset import PlannedOffset, Reset, chosen_partitions, plan
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import GroupIdNotFoundError, NonEmptyGroupError


def add_group_admin(actions: Any, add_client_flags: Any) -> None:
    """``delete`` and ``reset-offsets`` under ``huddle groups``."""
    delete = actions.add_parser("delete", help="delete a group with no members, and its offsets")
    delete.add_argument("group", help="group id")
    add_client_flags(delete)
    reset = actions.add_parser(
        "reset-offsets", help="set a group's committed offsets (the group must have no members)"
    )
    reset.add_argument("group", help="group id")
    reset.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="TOPIC[:P,...]",
        help="a topic, or some of its partitions (repeatable)",
    )
    where = reset.add_mutually_exclusive_group(required=True)
    where.add_argument("--to-earliest", action="store_true", help="offset 0")
    where.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    where.add_argument("--shift-by", type=int, metavar="N", help="the committed offset + N")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the plan")
    add_client_flags(reset)


def reset_of(args: argparse.Namespace) -> Reset:
    try:
        if args.to_earliest:
            return Reset("to-earliest")
        if args.to_offset is not None:
            return Reset("to-offset", args.to_offset)
        return Reset("shift-by", args.shift_by)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


async def delete_group(admin: Admin, args: argparse.Namespace, as_json: bool) -> str:
    await admin.delete_group(args.group)
    if as_json:  # as ``topics delete --json``: what was deleted, and that it was
        return to_json({"group_id": args.group, "deleted": True})
    return f'deleted group "{args.group}"'


async def reset_offsets(admin: Admin, args: argparse.Namespace, as_json: bool) -> str:
    reset = reset_of(args)
    try:
        group = await admin.describe_group(args.group)
    except GroupIdNotFoundError:
        group = None
    if group is not None and group.members:
        raise NonEmptyGroupError(
            f"group {args.group!r} has {len(group.members)} "
            f"{plural(len(group.members), 'member')} ({group.state}): offsets "
            "are reset only for a group with none; stop its members first"
        )
    try:
        partitions = chosen_partitions(args.topic, await admin.list_topics())
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    planned = plan(reset, partitions, await admin.committed_offsets(args.group))
    if args.execute:
        await admin.set_offsets(args.group, {p.partition: p.new for p in planned})
    return render_plan(args.group, planned, executed=bool(args.execute), as_json=as_json)


def render_plan(group: str, planned: list[PlannedOffset], *, executed: bool, as_json: bool) -> str:
    if as_json:
        return to_json(
            {
                "group_id": group,
                "executed": executed,
                "offsets": [
                    {
                        "topic": p.partition.topic,
                        "partition": p.partition.partition,
                        "current": p.current,
                        "new": p.new,
                    }
                    for p in planned
                ],
            }
        )
    table = format_table(
        ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"),
        [
            (
                group,
                p.partition.topic,
                p.partition.partition,
                "-" if p.current is None else p.current,
                p.new,
            )
            for p in planned
        ],
    )
    tail = "offsets set" if executed else "dry run: nothing changed (--execute to set them)"
    return f"{table}\n\n{tail}"


def offsets_table(offsets: dict[TopicPartition, int], owners: dict[TopicPartition, str]) -> str:
    """The committed offsets, with the member that owns each partition now."""
    partitions = sorted(set(offsets) | set(owners))
    return format_table(
        ("TOPIC", "PARTITION", "COMMITTED-OFFSET", "OWNER"),
        [(tp.topic, tp.partition, offsets.get(tp, "-"), owners.get(tp, "-")) for tp in partitions],
    )
