"""Kafka's ACL model: who may do which operation on which resource, from which host.

An ACL binds a principal (``User:alice``, or ``User:*`` for everyone), a host (an address,
or ``*``), an operation and a resource pattern (a type, a name, LITERAL or PREFIXED) to
ALLOW or DENY. The authorizer decides as Kafka's does:

* a super user may do anything;
* a DENY that matches wins over any ALLOW;
* else an ALLOW that matches allows; READ, WRITE, DELETE and ALTER each imply DESCRIBE;
* else the request is denied: with an authorizer on, nothing is allowed by default.

A LITERAL pattern named ``*`` matches every resource of its type. The one CLUSTER resource
is named ``huddle-cluster``.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

import msgspec

from huddle.protocol.errors import HuddleError

CLUSTER_NAME = "huddle-cluster"
WILDCARD = "*"
ANONYMOUS = "User:ANONYMOUS"


class Operation(StrEnum):
    ALL = "ALL"
    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DELETE = "DELETE"
    ALTER = "ALTER"
    DESCRIBE = "DESCRIBE"


class ResourceType(StrEnum):
    GROUP = "GROUP"
    TOPIC = "TOPIC"
    CLUSTER = "CLUSTER"


class PatternType(StrEnum):
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class Permission(StrEnum):
    ALLOW = "ALLOW"
    DENY = "DENY"


# An ALLOW of one of these operations allows DESCRIBE too (Kafka's implied operations).
_IMPLIES_DESCRIBE = frozenset(
    {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER, Operation.DESCRIBE}
)


class AclError(HuddleError, ValueError):
    """An ACL that cannot be: says which field and why."""


class Acl(msgspec.Struct, frozen=True, kw_only=True, order=True):
    """One ACL binding, as kept and as ``huddle acls list --json`` shows it."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType = PatternType.LITERAL
    principal: str
    host: str = WILDCARD
    operation: Operation
    permission: Permission = Permission.ALLOW

    def __post_init__(self) -> None:
        check_principal(self.principal)
        if not self.resource_name:
            raise AclError("the resource name must not be empty")
        if not self.host:
            raise AclError("the host must not be empty (use * for any host)")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise AclError(f"the CLUSTER resource is named {CLUSTER_NAME!r}")
        if self.pattern_type == PatternType.PREFIXED and self.resource_name == WILDCARD:
            raise AclError("a PREFIXED pattern cannot be '*' (a LITERAL '*' matches every name)")

    def matches_resource(self, kind: ResourceType, name: str) -> bool:
        if kind != self.resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def describe(self) -> str:
        pattern = "" if self.pattern_type == PatternType.LITERAL else " (prefixed)"
        return (
            f"{self.permission} {self.principal} from {self.host} to {self.operation} "
            f"{self.resource_type} {self.resource_name}{pattern}"
        )


def check_principal(principal: str) -> str:
    """A principal is ``TYPE:NAME`` (``User:alice``, ``User:*``); AclError otherwise."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise AclError(f"a principal is TYPE:NAME, as User:alice or User:*; got {principal!r}")
    return principal


class Authorizer:
    """Decides with a set of ACLs and super users. Decisions are cached until the ACLs
    change (a heartbeat asks the same question every second)."""

    def __init__(self, acls: Iterable[Acl] = (), super_users: Iterable[str] = ()) -> None:
        self.super_users = frozenset(super_users)
        self._acls: tuple[Acl, ...] = ()
        self._cache: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}
        self.replace(acls)

    @property
    def acls(self) -> tuple[Acl, ...]:
        return self._acls

    def replace(self, acls: Iterable[Acl]) -> None:
        self._acls = tuple(sorted(set(acls)))
        self._cache = {}

    def allowed(
        self, principal: str, host: str, operation: Operation, kind: ResourceType, name: str
    ) -> bool:
        key = (principal, host, operation, kind, name)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._decide(principal, host, operation, kind, name)
            if len(self._cache) > 100_000:  # bounded: names come from clients
                self._cache.clear()
            self._cache[key] = cached
        return cached

    def _decide(
        self, principal: str, host: str, operation: Operation, kind: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        user_type = principal.partition(":")[0]
        anyone = f"{user_type}:{WILDCARD}"
        allow = False
        for acl in self._acls:
            if acl.principal not in (principal, anyone) or acl.host not in (host, WILDCARD):
                continue
            if not acl.matches_resource(kind, name):
                continue
            if acl.permission == Permission.DENY:
                if acl.operation in (operation, Operation.ALL):
                    return False  # DENY wins
            elif acl.operation in (operation, Operation.ALL) or (
                operation == Operation.DESCRIBE and acl.operation in _IMPLIES_DESCRIBE
            ):
                allow = True
        return allow
