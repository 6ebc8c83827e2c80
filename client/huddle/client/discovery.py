"""Finding a group's coordinator from a bootstrap list (Kafka's FindCoordinator).

A client is given one or more addresses (``"h1:9292,h2:9292"``). It asks them in turn which
node coordinates its group, and talks to that node. A node answers with its own address
when it coordinates the group (a single coordinator always does), so then the connection
that asked is the one used. A coordinator too old to know the request answers it with an
error frame: it is then taken as the coordinator of everything, as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from huddle.client.connection import Connection, connect
from huddle.client.security import NO_SECURITY, Security
from huddle.logs import library_logger
from huddle.protocol.addresses import (
    UNSPECIFIED_HOSTS,
    format_address,
    parse_address,
    parse_addresses,
)
from huddle.protocol.errors import (
    AuthenticationError,
    AuthorizationError,
    CoordinatorNotAvailableError,
    ErrorCode,
    HuddleError,
    error_name,
    raise_for,
)
from huddle.protocol.messages import ErrorResponse, FindCoordinatorRequest, FindCoordinatorResponse

log = library_logger("huddle.discovery")


def bootstrap_addresses(bootstrap: str) -> list[str]:
    """The addresses of a bootstrap list, normalised; ValueError if one is malformed."""
    return [format_address(h, p) for h, p in parse_addresses(bootstrap, what="bootstrap address")]


def _options(
    client_id: str,
    timeout: float,
    notices: bool,
    security: Security,
    incarnation: bytes | None = None,
) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "timeout": timeout,
        "notices": notices,
        "security": security,
        "incarnation": incarnation,
    }


async def _ask(conn: Connection, asked: tuple[str, int], group_id: str, timeout: float) -> str:
    """The coordinator's address as the node at ``asked`` names it: ``asked`` itself when
    that node names itself (it may have been reached through a proxy)."""
    response = await conn.request(FindCoordinatorRequest(group_id=group_id), timeout=timeout)
    if isinstance(response, ErrorResponse) and response.error_code == ErrorCode.INVALID_REQUEST:
        return format_address(*asked)  # a coordinator that predates FindCoordinator
    if (
        isinstance(response, FindCoordinatorResponse)
        and response.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    ):
        raise_for(response.error_code, response.error_message)
    if not isinstance(response, FindCoordinatorResponse) or response.error_code != ErrorCode.NONE:
        code = getattr(response, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
        message = getattr(response, "error_message", None) or ""
        raise CoordinatorNotAvailableError(f"{error_name(code)} {message}".strip())
    if response.node_id and response.node_id == conn.node_id:
        return format_address(*asked)
    host = asked[0] if response.host in UNSPECIFIED_HOSTS else response.host
    return format_address(host, response.port)


@asynccontextmanager
async def connect_any(
    bootstrap: str,
    *,
    client_id: str = "huddle-client",
    timeout: float = 10.0,
    notices: bool = True,
    security: Security = NO_SECURITY,
) -> AsyncIterator[Connection]:
    """A connection to the first bootstrap address that answers (any node serves topics
    and finds coordinators). Raises ValueError for a malformed list, the last address's
    error when none answers (CoordinatorUnreachableError, TimeoutError or another
    HuddleError)."""
    addresses = bootstrap_addresses(bootstrap)
    options = _options(client_id, timeout, notices, security)
    for i, address in enumerate(addresses):
        async with AsyncExitStack() as stack:
            try:
                conn = await stack.enter_async_context(connect(address, **options))
            except AuthenticationError:
                raise  # wrong credentials or certificates: another node says the same
            except (OSError, TimeoutError, HuddleError) as exc:
                if i == len(addresses) - 1:
                    raise  # the last one: its error is the caller's
                log.debug("bootstrap_unreachable", address=address, reason=str(exc))
                continue
            yield conn
            return


async def coordinator_of(conn: Connection, group_id: str, timeout: float = 10.0) -> str:
    """The address of ``group_id``'s coordinator, as the node ``conn`` is connected to
    says (its own address when it coordinates the group)."""
    return await _ask(conn, parse_address(conn.bootstrap), group_id, timeout)


@asynccontextmanager
async def connect_coordinator(
    bootstrap: str,
    group_id: str,
    *,
    client_id: str = "huddle-client",
    timeout: float = 10.0,
    notices: bool = True,
    start: int = 0,
    security: Security = NO_SECURITY,
    incarnation: bytes | None = None,
) -> AsyncIterator[Connection]:
    """A connection to the node that coordinates ``group_id``, found through the bootstrap
    addresses in turn, from the one numbered ``start`` (a caller that lost its coordinator
    asks another node first: that one may be frozen, with connections accepted by the
    kernel and never answered). ``timeout`` bounds each connection and each request.
    Raises ValueError for a malformed list, CoordinatorNotAvailableError when no address
    answered with a coordinator (each one's reason in the message; raised from each one's
    error, a group of them when there were several). ``incarnation``: as ``connect``'s, sent
    on every connection made."""
    failures: list[str] = []
    errors: list[Exception] = []
    addresses = bootstrap_addresses(bootstrap)
    shift = start % len(addresses)
    options = _options(client_id, timeout, notices, security, incarnation)
    for address in addresses[shift:] + addresses[:shift]:
        async with AsyncExitStack() as stack:
            try:
                conn = await stack.enter_async_context(connect(address, **options))
                asked = parse_address(address)
                found = await _ask(conn, asked, group_id, timeout)
                if found != format_address(*asked):
                    await stack.aclose()
                    conn = await stack.enter_async_context(connect(found, **options))
            except (AuthenticationError, AuthorizationError):
                raise  # not the node's fault: every node answers the same
            except (OSError, TimeoutError, HuddleError) as exc:
                failures.append(f"{address}: {str(exc) or type(exc).__name__}")
                errors.append(exc)
                log.debug("coordinator_not_found", address=address, reason=failures[-1])
                continue
            yield conn
            return
    raise CoordinatorNotAvailableError(
        f"no coordinator found for group {group_id!r}: " + "; ".join(failures)
    ) from (errors[0] if len(errors) == 1 else ExceptionGroup("each address's failure", errors))
