"""Certificates (made with trustme), users and ACLs for the security tests."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import msgspec
import trustme

from huddle.coordinator.security.acls import Acl, Operation, PatternType, Permission, ResourceType
from huddle.coordinator.security.credentials import make_user
from huddle.coordinator.security.store import FileStore, SecurityState


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: str  # the CA file clients trust
    server: str  # the server's certificate and key, one PEM
    alice: str  # a client certificate (CN=alice) and key, by the CA
    stranger: str  # a client certificate by another CA
    expired: str  # a client certificate by the CA, expired yesterday


def make_pki(directory: Path) -> Pki:
    ca = trustme.CA()
    other = trustme.CA()
    now = datetime.datetime.now(datetime.UTC)
    files = {
        "ca": ca.cert_pem,
        "server": ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem,
        "alice": ca.issue_cert(
            "alice@example.org",
            common_name="alice",
            organization_name="acme",
            organization_unit_name="eng",
        ).private_key_and_cert_chain_pem,
        "stranger": other.issue_cert(
            "mallory@example.org", common_name="mallory"
        ).private_key_and_cert_chain_pem,
        "expired": ca.issue_cert(
            "old@example.org",
            common_name="old",
            not_before=now - datetime.timedelta(days=2),
            not_after=now - datetime.timedelta(days=1),
        ).private_key_and_cert_chain_pem,
    }
    paths = {}
    for name, blob in files.items():
        path = directory / f"{name}.pem"
        blob.write_to_path(str(path))
        paths[name] = str(path)
    return Pki(directory=directory, **paths)


def acl(
    principal: str,
    operation: Operation,
    kind: ResourceType,
    name: str,
    *,
    prefixed: bool = False,
    deny: bool = False,
    host: str = "*",
) -> Acl:
    return Acl(
        resource_type=kind,
        resource_name=name,
        pattern_type=PatternType.PREFIXED if prefixed else PatternType.LITERAL,
        principal=principal,
        host=host,
        operation=operation,
        permission=Permission.DENY if deny else Permission.ALLOW,
    )


async def keep(data_dir: Path, users: dict[str, str], acls: Iterable[Acl] = ()) -> None:
    """Users (name -> password, at the minimum iterations: fast tests) and ACLs, kept in
    ``data_dir`` as ``huddle users`` and ``huddle acls`` keep them."""
    made = {n: make_user(n, p, iterations=4096) for n, p in users.items()}
    chosen = list(acls)

    def change(state: SecurityState) -> SecurityState:
        return msgspec.structs.replace(
            state, users={**state.users, **made}, acls=[*state.acls, *chosen]
        )

    await FileStore(data_dir).update(change)


async def set_acls(data_dir: Path, acls: Iterable[Acl]) -> None:
    chosen = list(acls)
    await FileStore(data_dir).update(lambda s: msgspec.structs.replace(s, acls=chosen))
