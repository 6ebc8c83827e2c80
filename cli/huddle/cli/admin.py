"""``huddle ping``, ``huddle topics ...``, ``huddle groups ...`` and ``huddle cluster
status``: the member library's ``Admin`` against a running coordinator; render the result.

The coordinator is ``--bootstrap``, else ``HUDDLE_BOOTSTRAP``, else 127.0.0.1:9292. Human
output is plain aligned tables; ``--json`` gives one JSON document on one line. A failure
prints one line on stderr and exits 1; a bad bootstrap address exits 2.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import Any, cast

import anyio
import msgspec

from huddle.cli.client_security import add_security_flags, security_of
from huddle.cli.consumer_render import groups_table, render_consumer_group
from huddle.cli.group_admin import add_group_admin, delete_group, offsets_table, reset_offsets
from huddle.cli.parsing import positive_seconds
from huddle.cli.render import format_table, plural, to_json
from huddle.cli.usage import UsageError
from huddle.client.admin import Admin, NodeAccount
from huddle.client.connection import ConnectionClosedError
from huddle.client.describe import GroupView, compact
from huddle.client.discovery import bootstrap_addresses, connect_any
from huddle.client.security import NO_SECURITY, Security, TlsError
from huddle.logs import printable
from huddle.protocol.addresses import format_address
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import SaslAuthenticationFailedError, ServerError, error_name
from huddle.protocol.messages import DescribeClusterResponse, ListedGroup, NodeLiveness

DEFAULT_BOOTSTRAP = "127.0.0.1:9292"


# --- arguments --------------------------------------------------------------------------


def _add_client_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        default=None,
        help=f"coordinator HOST:PORT (default {DEFAULT_BOOTSTRAP}) [env HUDDLE_BOOTSTRAP]",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=10.0,
        help="seconds to wait for the coordinator",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_security_flags(parser)


def add_ping(ping: argparse.ArgumentParser) -> None:
    _add_client_flags(ping)


def add_topics(topics: argparse.ArgumentParser) -> None:
    topic_commands = topics.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, help_text in (("create", "create a topic"), ("alter", "set a partition count")):
        sub = topic_commands.add_parser(action, help=help_text)
        sub.add_argument("name", help="topic name")
        sub.add_argument("--partitions", type=int, required=True, help="number of partitions")
        _add_client_flags(sub)
    delete = topic_commands.add_parser("delete", help="delete a topic")
    delete.add_argument("name", help="topic name")
    _add_client_flags(delete)
    _add_client_flags(topic_commands.add_parser("list", help="list topics"))


def add_groups(groups: argparse.ArgumentParser) -> None:
    group_commands = groups.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add_client_flags(group_commands.add_parser("list", help="list groups"))
    describe = group_commands.add_parser(
        "describe", help="a group: its members, what they own, its committed offsets"
    )
    describe.add_argument("group", help="group id")
    _add_client_flags(describe)
    add_group_admin(group_commands, _add_client_flags)


def add_cluster(cluster: argparse.ArgumentParser) -> None:
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    status = actions.add_parser(
        "status",
        help="nodes, shard owners and epochs, groups per node, each node's last lease "
        "refresh and reconcile",
    )
    status.add_argument("--shards", action="store_true", help="also list every shard")
    _add_client_flags(status)


def bootstrap_of(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    """``--bootstrap``, else ``HUDDLE_BOOTSTRAP``, else 127.0.0.1:9292; UsageError if bad."""
    bootstrap = args.bootstrap or environ.get("HUDDLE_BOOTSTRAP") or DEFAULT_BOOTSTRAP
    try:
        bootstrap_addresses(bootstrap)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return str(bootstrap)


# --- running ----------------------------------------------------------------------------


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Run ping / topics / groups; print the result; one error line and exit 1 on failure."""
    try:
        bootstrap = bootstrap_of(args, environ)
    except UsageError as exc:
        print(f"huddle: {exc}", file=sys.stderr)
        return 2
    try:
        security = security_of(args, environ)
    except UsageError as exc:
        print(f"huddle: {exc}", file=sys.stderr)
        return 2
    timeout = float(args.timeout)
    try:
        if args.command == "ping":
            output = anyio.run(_ping, bootstrap, timeout, security, bool(args.json))
        else:
            output = anyio.run(run_admin_command, args, bootstrap, timeout, security)
    except UsageError as exc:  # found once the coordinator was asked (an unknown topic)
        print(f"huddle: {exc}", file=sys.stderr)
        return 2
    except TlsError as exc:
        print(f"huddle: {printable(exc.message)}", file=sys.stderr)
        return 1
    except ServerError as exc:
        message = printable(exc.message)
        print(f"huddle: {message} ({error_name(exc.error_code)})", file=sys.stderr)
        return 1
    except ConnectionClosedError as exc:
        closed = printable(exc.message)
        print(f"huddle: connection to {bootstrap} closed: {closed}", file=sys.stderr)
        return 1
    except TimeoutError:
        print(f"huddle: no answer from {bootstrap} within {timeout:g} s", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"huddle: cannot connect to {bootstrap}: {_os_reason(exc)}", file=sys.stderr)
        return 1
    if output:
        print(output)
    return 0


def _os_reason(exc: OSError) -> str:
    """'connection refused' rather than 'All connection attempts failed'."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, socket.gaierror):
            return str(current.strerror or current).lower()
        if isinstance(current, OSError) and current.errno:
            return os.strerror(current.errno).lower()
        current = current.__cause__
    return str(exc).lower()


async def _ping(
    bootstrap: str, wait_s: float, security: Security = NO_SECURITY, as_json: bool = False
) -> str:
    try:
        async with connect_any(
            bootstrap, client_id="huddle-cli", timeout=wait_s, notices=False, security=security
        ) as conn:
            if as_json:
                return to_json(
                    {
                        "address": conn.bootstrap,
                        "protocol_version": conn.server_version,
                        "node_id": conn.node_id or None,
                        "principal": conn.principal or None,
                        "authentication_required": False,
                    }
                )
            who = f" as {conn.principal}" if conn.principal else ""
            return f"ok huddle protocol v{conn.server_version} at {conn.bootstrap}{who}"
    except SaslAuthenticationFailedError as exc:
        if security.username is not None:
            raise
        # It answered the handshake: it is up, and asks for credentials (a health check
        # needs none to know that).
        if as_json:
            return to_json(
                {
                    "address": bootstrap,
                    "protocol_version": None,
                    "node_id": None,
                    "principal": None,
                    "authentication_required": True,  # answered, but wants credentials
                }
            )
        return f"ok {bootstrap} answers; it requires authentication: {exc.message}"


# --- rendering --------------------------------------------------------------------------


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
        ("MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "TOPICS", "OWNED"),
        [
            (
                m.member_id,
                m.group_instance_id or "-",
                m.client_id or "-",
                m.client_host or "-",
                ",".join(m.topics) or "-",
                compact(m.owned),
            )
            for m in group.members
        ],
    )
    if group.state != "Stable":
        members += (
            f"\n(the group is {group.state}: what each member owns is shown once it is Stable)"
        )
    return f"{head}\n\n{members}"


def describe_view(group: GroupView, offsets: Mapping[TopicPartition, int]) -> dict[str, object]:
    """A group as ``huddle groups describe --json`` prints it: the group, its members and
    what each owns now, and every committed offset with the member that owns it."""
    owners = {tp: m.member_id for m in group.members for tp in m.owned}
    view = cast(dict[str, object], msgspec.to_builtins(group))
    view["offsets"] = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "offset": offsets.get(tp),
            "owner": owners.get(tp),
        }
        for tp in sorted(set(offsets) | set(owners))
    ]
    return view


def cluster_view(
    cluster: DescribeClusterResponse,
    groups: Mapping[str, list[ListedGroup]],
    accounts: Sequence[NodeAccount] = (),
) -> dict[str, object]:
    """The cluster as ``huddle cluster status --json`` prints it: each node with its own
    account of itself (``accounts``: its state, the shards it serves now, how it keeps up
    with etcd; null where it could not be asked) beside the shards etcd says it owns (as
    the node answering first last read them), and the nodes that answer but are not
    registered."""
    kafka = {n.node_id: n.kafka_address for n in cluster.nodes if n.kafka_address}
    owned: dict[str, list[int]] = {}
    for s in cluster.shards:
        owned.setdefault(s.owner, []).append(s.shard)
    listed = list(accounts) or [
        NodeAccount(n.node_id, format_address(n.host, n.port), None, True) for n in cluster.nodes
    ]
    nodes = []
    for a in listed:
        answer = a.answer
        served = None if answer is None or answer.served is None else sorted(answer.served)
        mine = sorted(owned.get(a.node_id, [])) if a.node_id else []
        if not accounts:  # not asked: etcd's word (a single coordinator has no shards)
            served = mine
        live = answer.liveness if answer is not None else None
        nodes.append(
            {
                "node_id": a.node_id or None,
                "address": a.address,
                "kafka_address": kafka.get(a.node_id),  # None: no Kafka listener
                "state": _state(a, served, mine) if accounts else None,
                "shards": served,
                "owned": mine,
                "groups": sorted(g.group_id for g in groups.get(a.node_id, [])),
                **_liveness_view(live),
            }
        )
    return {
        "answered_by": cluster.node_id,
        "shard_count": cluster.shard_count,
        "nodes": nodes,
        "shards": [
            {"shard": s.shard, "owner": s.owner or None, "epoch": s.epoch} for s in cluster.shards
        ],
    }


def _state(account: NodeAccount, served: list[int] | None, owned: list[int]) -> str:
    """What ``huddle cluster status`` says of a node: "ok" (it serves what etcd says it
    owns), "disagrees" (it serves other shards: loading them, fenced by its lease's
    deadline, or etcd's word as read is stale), "no lease" (it answers, holds no lease),
    "unregistered" (it answers, etcd does not list it), "no answer" (listed, could not be
    asked), "not answering" (a bootstrap address nobody answers at)."""
    answer = account.answer
    if answer is None:
        return "no answer" if account.registered else "not answering"
    if not account.registered:
        return "unregistered"
    live = answer.liveness
    if live is not None and live.registered is False:
        return "no lease"
    return "ok" if served is None or served == owned else "disagrees"


def _liveness_view(live: NodeLiveness | None) -> dict[str, object]:
    return {
        "lease_refreshed_s_ago": live.lease_refreshed_s_ago if live is not None else None,
        "reconciled_s_ago": live.reconciled_s_ago if live is not None else None,
        "task_restarts": live.task_restarts if live is not None else None,
        "registered": live.registered if live is not None else None,
    }


def _ago(seconds: object) -> str:
    return f"{seconds:.1f}s ago" if isinstance(seconds, float | int) else "-"


def _shards_cell(node: Mapping[str, Any]) -> str:
    served, owned = node["shards"], node["owned"]
    if served == owned:
        return str(len(owned))
    return f"{'-' if served is None else len(served)} (etcd: {len(owned)})"


def render_cluster(
    cluster: DescribeClusterResponse,
    groups: Mapping[str, list[ListedGroup]],
    *,
    shards: bool,
    accounts: Sequence[NodeAccount] = (),
) -> str:
    view = cluster_view(cluster, groups, accounts)
    nodes = cast(list[dict[str, Any]], view["nodes"])
    if not cluster.shard_count:
        alone: list[tuple[str, ...]] = [
            (
                n["node_id"],
                n["address"],
                n["kafka_address"] or "-",
                str(len(n["shards"])),
                str(len(n["groups"])),
            )
            for n in nodes
        ]
        table = format_table(("NODE", "ADDRESS", "KAFKA", "SHARDS", "GROUPS"), alone)
        return f"a single coordinator (no cluster)\n\n{table}"
    rows: list[tuple[str, ...]] = [
        (
            n["node_id"] or "-",
            n["address"],
            n["kafka_address"] or "-",
            n["state"] or "-",
            _shards_cell(n),
            str(len(n["groups"])),
            _ago(n["lease_refreshed_s_ago"]),
            _ago(n["reconciled_s_ago"]),
            "-" if n["task_restarts"] is None else str(n["task_restarts"]),
        )
        for n in nodes
    ]
    heads = ("NODE", "ADDRESS", "KAFKA", "STATE", "SHARDS", "GROUPS", "LEASE REFRESHED")
    table = format_table((*heads, "RECONCILED", "RESTARTS"), rows)
    unowned = [s.shard for s in cluster.shards if not s.owner]
    head = (
        f"{len(cluster.nodes)} {plural(len(cluster.nodes), 'node')}, "
        f"{cluster.shard_count} {plural(cluster.shard_count, 'shard')}"
        + (f", {len(unowned)} without a live owner: {unowned}" if unowned else ", all owned")
        + f" (as {cluster.node_id} sees it)"
    )
    out = f"{head}\n\n{table}"
    notes = [note for state, note in _NOTES.items() if any(n["state"] == state for n in nodes)]
    if notes:
        out += "\n\n" + "\n".join(notes)
    if shards:
        shard_rows = [(str(s.shard), s.owner or "-", str(s.epoch or "-")) for s in cluster.shards]
        out += "\n\n" + format_table(("SHARD", "OWNER", "EPOCH"), shard_rows)
    return out


_NOTES = {
    "disagrees": "disagrees: the node serves other shards than etcd says it owns (SHARDS: "
    "what it serves, by its own account; etcd: what etcd holds as its, as last read)",
    "no lease": "no lease: the node answers but holds no lease (it is registering again)",
    "unregistered": "unregistered: the node answers but etcd does not list it (it lost its "
    "lease, or is leaving): it serves no shard",
    "no answer": "no answer: etcd lists the node but it could not be asked",
    "not answering": "not answering: nothing answers at this bootstrap address",
}


async def run_admin_command(
    args: argparse.Namespace, bootstrap: str, wait_s: float, security: Security = NO_SECURITY
) -> str:
    """Run one topics/groups command against ``bootstrap``; return what to print.

    ``wait_s`` bounds connecting and each request.
    """
    as_json = bool(getattr(args, "json", False))
    async with Admin(bootstrap, client_id="huddle-cli", timeout=wait_s, security=security) as admin:
        match (args.command, args.action):
            case ("topics", "create"):
                await admin.create_topic(args.name, args.partitions)
                if as_json:
                    return to_json({"name": args.name, "partitions": args.partitions})
                partitions = plural(args.partitions, "partition")
                return f'created topic "{args.name}" with {args.partitions} {partitions}'
            case ("topics", "alter"):
                await admin.alter_topic(args.name, args.partitions)
                if as_json:
                    return to_json({"name": args.name, "partitions": args.partitions})
                partitions = plural(args.partitions, "partition")
                return f'topic "{args.name}" now has {args.partitions} {partitions}'
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
                return groups_table(groups)
            case ("groups", "describe"):
                group = await admin.describe(args.group)
                offsets = await admin.committed_offsets(args.group)
                if as_json:
                    return to_json(describe_view(group, offsets))
                owners = {tp: m.member_id for m in group.members for tp in m.owned}
                consumer = group.group_epoch is not None
                text = render_consumer_group(group) if consumer else render_group(group)
                if offsets or owners:
                    text += "\n\n" + offsets_table(offsets, owners)
                return text
            case ("groups", "delete"):
                return await delete_group(admin, args, as_json)
            case ("groups", "reset-offsets"):
                return await reset_offsets(admin, args, as_json)
            case ("cluster", "status"):
                cluster = await admin.describe_cluster()
                per_node = await admin.groups_by_node(cluster, strict=not cluster.shard_count)
                accounts = []
                if cluster.shard_count:
                    also = bootstrap_addresses(bootstrap)
                    accounts = await admin.node_accounts(cluster, also=also)
                if as_json:
                    return to_json(cluster_view(cluster, per_node, accounts))
                with_shards = bool(args.shards)
                return render_cluster(cluster, per_node, shards=with_shards, accounts=accounts)
    raise UsageError(f"unknown command {args.command} {args.action}")
