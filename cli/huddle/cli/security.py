"""``huddle users`` and ``huddle acls``: the users SASL checks and the ACLs the authorizer
decides with, kept where the coordinator keeps its state.

The store is ``--data-dir DIR`` (``security.json`` in it), or ``--etcd etcd://...``
(a key under ``--cluster-prefix``); else ``HUDDLE_DATA_DIR``, ``HUDDLE_CLUSTER`` and
``HUDDLE_CLUSTER_PREFIX``, the variables ``huddle serve`` reads. A running coordinator
takes a change within a second. Passwords are read from ``--password-file``, standard
input (``--password-stdin``) or a prompt, never from the command line, and only their
salted SCRAM keys are kept.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import msgspec

from huddle.cli.render import format_table, to_json
from huddle.cli.usage import UsageError
from huddle.coordinator.security.acls import (
    CLUSTER_NAME,
    Acl,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from huddle.coordinator.security.credentials import (
    DEFAULT_ITERATIONS,
    SCRAM_MECHANISMS,
    CredentialError,
    check_username,
    make_user,
)
from huddle.coordinator.security.store import (
    FileStore,
    SecurityState,
    SecurityStore,
    SecurityStoreError,
)

__all__ = ["add_acls", "add_users", "run"]


def _add_store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="the coordinator's data dir [env HUDDLE_DATA_DIR]")
    parser.add_argument(
        "--etcd", help="a cluster's etcd: etcd://HOST:PORT[,...] [env HUDDLE_CLUSTER]"
    )
    parser.add_argument("--cluster-prefix", help="the cluster's keys in etcd (default /huddle)")


def _add_new_store_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--new-store",
        action="store_true",
        help="start a new store if there is none, even where a coordinator keeps its state "
        "(there, a missing store was most likely deleted: restore it instead)",
    )


def add_users(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="add a user, or set a user's password")
    add.add_argument("name", help="user name (its principal is User:NAME)")
    source = add.add_mutually_exclusive_group()
    source.add_argument("--password-file", help="read the password from this file's first line")
    source.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input"
    )
    add.add_argument(
        "--mechanism",
        action="append",
        choices=SCRAM_MECHANISMS,
        help="keep credentials for this mechanism (repeatable; default both)",
    )
    add.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations, at least 4096 (default {DEFAULT_ITERATIONS})",
    )
    _add_store_flags(add)
    _add_new_store_flag(add)
    remove = actions.add_parser("remove", help="remove a user")
    remove.add_argument("name")
    _add_store_flags(remove)
    listing = actions.add_parser("list", help="list users (names and mechanisms, no keys)")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    _add_store_flags(listing)


def _add_acl_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--principal", required=True, help="User:NAME, User:* for anyone, or a certificate subject"
    )
    parser.add_argument("--host", default="*", help="the client's address (default *: any)")
    parser.add_argument(
        "--operation",
        action="append",
        required=True,
        type=str.upper,
        choices=[o.value for o in Operation],
        help="repeatable",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--group", help="a group id (* for every group)")
    target.add_argument("--topic", help="a topic (* for every topic)")
    target.add_argument("--cluster", action="store_true", help="the cluster itself")
    parser.add_argument(
        "--prefixed", action="store_true", help="the name is a prefix (PREFIXED pattern)"
    )
    parser.add_argument("--deny", action="store_true", help="a DENY ACL (default ALLOW)")
    _add_store_flags(parser)
    _add_new_store_flag(parser)


def add_acls(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add_acl_flags(actions.add_parser("add", help="add ACLs (one per operation)"))
    _add_acl_flags(actions.add_parser("remove", help="remove the ACLs matching exactly"))
    listing = actions.add_parser("list", help="list ACLs")
    listing.add_argument("--principal", help="only this principal's")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    _add_store_flags(listing)


# --- running ----------------------------------------------------------------------------


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        output = anyio.run(_run, args, environ)
    except UsageError as exc:
        print(f"huddle: {exc}", file=sys.stderr)
        return 2
    except SecurityStoreError as exc:
        print(f"huddle: {exc}", file=sys.stderr)
        return 1
    if output:
        print(output)
    return 0


async def _run(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    action = _users_action(args, environ) if args.command == "users" else _acls_action(args)
    return await _with_store(args, environ, action)


async def _with_store(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    action: Callable[[SecurityStore], Awaitable[str]],
) -> str:
    etcd = args.etcd or (None if args.data_dir else environ.get("HUDDLE_CLUSTER")) or None
    data_dir = args.data_dir or (None if etcd else environ.get("HUDDLE_DATA_DIR"))
    if etcd and args.data_dir:
        raise UsageError("give --data-dir or an etcd cluster, not both")
    if data_dir:
        return await action(FileStore(data_dir))
    if not etcd:
        raise UsageError(
            "where are users and ACLs kept? give --data-dir DIR (or set HUDDLE_DATA_DIR), "
            "or a cluster's etcd"
        )
    try:
        from huddle.coordinator.cluster.store import (
            EtcdStore,
            StoreUnavailableError,
            parse_endpoints,
        )
        from huddle.coordinator.security.store import EtcdSecurityStore
    except ImportError as exc:
        message = f"a cluster needs the etcd client: pip install 'huddle[cluster]' ({exc})"
        raise UsageError(message) from None
    try:
        endpoints = parse_endpoints(etcd)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    prefix = args.cluster_prefix or environ.get("HUDDLE_CLUSTER_PREFIX") or "/huddle"
    try:
        store = await EtcdStore.connect(endpoints)
    except StoreUnavailableError as exc:
        raise SecurityStoreError(str(exc)) from None
    try:
        return await action(EtcdSecurityStore(store, prefix))
    finally:
        await store.close()


def _read_password(args: argparse.Namespace) -> str:
    if args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as f:
                password = f.readline().rstrip("\r\n")
        except OSError as exc:
            raise UsageError(f"cannot read {args.password_file}: {exc.strerror}") from None
    elif args.password_stdin or not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise UsageError("the passwords differ")
    if not password:
        raise UsageError("the password is empty")
    return password


def _users_action(
    args: argparse.Namespace, environ: Mapping[str, str]
) -> Callable[[SecurityStore], Awaitable[str]]:
    try:
        if args.action in ("add", "remove"):
            check_username(args.name)
    except CredentialError as exc:
        raise UsageError(str(exc)) from None
    if args.action == "add":
        password = _read_password(args)
        mechanisms = tuple(dict.fromkeys(args.mechanism or SCRAM_MECHANISMS))
        try:
            user = make_user(args.name, password, mechanisms=mechanisms, iterations=args.iterations)
        except CredentialError as exc:
            raise UsageError(str(exc)) from None

        async def add(store: SecurityStore) -> str:
            def change(state: SecurityState) -> SecurityState:
                return msgspec.structs.replace(state, users={**state.users, user.name: user})

            await store.update(change, create=args.new_store)
            return f"user {user.name} ({', '.join(mechanisms)}) kept in {store.where}"

        return add
    if args.action == "remove":

        async def remove(store: SecurityStore) -> str:
            found = False

            def change(state: SecurityState) -> SecurityState:
                nonlocal found
                found = args.name in state.users
                users = {k: v for k, v in state.users.items() if k != args.name}
                return msgspec.structs.replace(state, users=users)

            await store.update(change)
            if not found:
                raise SecurityStoreError(f"no user {args.name} in {store.where}")
            return f"user {args.name} removed"

        return remove

    async def listing(store: SecurityStore) -> str:
        state = await store.load()
        rows: list[dict[str, Any]] = [
            {
                "name": u.name,
                "mechanisms": sorted(u.scram),
                "iterations": max(c.iterations for c in u.scram.values()),
            }
            for u in sorted(state.users.values(), key=lambda u: u.name)
        ]
        if args.json:
            return to_json(rows)
        if not rows:
            return f"no users in {store.where}"
        return format_table(
            ("USER", "MECHANISMS", "ITERATIONS"),
            [(r["name"], ",".join(r["mechanisms"]), r["iterations"]) for r in rows],
        )

    return listing


def _acls_of(args: argparse.Namespace) -> list[Acl]:
    if args.group is not None:
        kind, name = ResourceType.GROUP, args.group
    elif args.topic is not None:
        kind, name = ResourceType.TOPIC, args.topic
    else:
        kind, name = ResourceType.CLUSTER, CLUSTER_NAME
    try:
        return [
            Acl(
                resource_type=kind,
                resource_name=name,
                pattern_type=PatternType.PREFIXED if args.prefixed else PatternType.LITERAL,
                principal=args.principal,
                host=args.host,
                operation=Operation(op),
                permission=Permission.DENY if args.deny else Permission.ALLOW,
            )
            for op in dict.fromkeys(args.operation)
        ]
    except AclError as exc:
        raise UsageError(str(exc)) from None


def _acls_action(args: argparse.Namespace) -> Callable[[SecurityStore], Awaitable[str]]:
    if args.action in ("add", "remove"):
        chosen = _acls_of(args)
        adding = args.action == "add"

        async def change_acls(store: SecurityStore) -> str:
            before = 0

            def change(state: SecurityState) -> SecurityState:
                nonlocal before
                before = len(state.acls)
                kept = [a for a in state.acls if a not in chosen]
                acls = [*kept, *chosen] if adding else kept
                return msgspec.structs.replace(state, acls=acls)

            state = await store.update(change, create=args.new_store)
            changed = abs(len(state.acls) - before)
            if not adding and changed == 0:
                raise SecurityStoreError("no ACL matched exactly: nothing removed")
            verb = "added" if adding else "removed"
            return "\n".join(f"{verb}: {a.describe()}" for a in chosen)

        return change_acls

    async def listing(store: SecurityStore) -> str:
        state = await store.load()
        acls = [a for a in sorted(state.acls) if args.principal in (None, a.principal)]
        if args.json:
            return to_json([_acl_json(a) for a in acls])
        if not acls:
            return f"no ACLs in {store.where}"
        return "\n".join(a.describe() for a in acls)

    return listing


def _acl_json(acl: Acl) -> dict[str, Any]:
    import msgspec

    return dict(msgspec.to_builtins(acl))
