"""Network addresses as users write them: ``HOST:PORT`` and comma-separated lists of them."""

from __future__ import annotations

import ipaddress
import re
import socket

from huddle.protocol.errors import InvalidArgumentError, InvalidArgumentTypeError

UNSPECIFIED_HOSTS = frozenset({"0.0.0.0", "::", ""})  # listen on all: not an address to dial


def parse_address(address: str, *, what: str = "address") -> tuple[str, int]:
    """``"HOST:PORT"`` (IPv6 as ``"[::1]:9292"``) -> ``(host, port)``; InvalidArgumentError (a
    ValueError) if malformed."""
    _require_str(address, what)
    text = address.strip()
    problem = f"{what} {address!r} is not HOST:PORT"
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise InvalidArgumentError(problem)
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or ":" in host:
            raise InvalidArgumentError(
                problem + (" (write an IPv6 host in brackets)" if ":" in host else "")
            )
    if not host or not port_text.isdigit():
        raise InvalidArgumentError(problem)
    port = int(port_text)
    if not 0 < port <= 65_535:
        raise InvalidArgumentError(f"port {port} in {what} {address!r} is not in 1..65535")
    return host, port


_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def host_problem(host: str) -> str | None:
    """Why ``host`` is neither an IP address nor a host name (None if it is one; "" is all
    interfaces). A name whose last label is a number must be an IPv4 address (RFC 1123):
    ``256.1.1.1`` is a mistake to say at once, not a name to look up."""
    text = host.removesuffix(".")
    if host == "":
        return None
    if host.startswith("["):
        return f"host {host!r} is not an IP address (write an IPv6 host without brackets)"
    try:
        if ":" in host:
            ipaddress.IPv6Address(host)
            return None
        if text.rpartition(".")[2].isdigit():
            ipaddress.IPv4Address(host)
            return None
    except ValueError as exc:
        return f"host {host!r} is not an IP address ({exc})"
    if len(text) > 253 or not all(_LABEL.fullmatch(label) for label in text.split(".")):
        return f"host {host!r} is not an IP address or a host name"
    return None


def parse_addresses(addresses: str, *, what: str = "address") -> list[tuple[str, int]]:
    """``"h1:9292,h2:9292"`` -> ``[(h1, 9292), (h2, 9292)]``, in order, duplicates dropped;
    InvalidArgumentError (a ValueError) naming the malformed part, or for an empty list."""
    _require_str(addresses, what)
    parsed: list[tuple[str, int]] = []
    for part in addresses.split(","):
        if not part.strip():
            continue
        address = parse_address(part, what=what)
        if address not in parsed:
            parsed.append(address)
    if not parsed:
        raise InvalidArgumentError(f"no {what} given in {addresses!r}")
    return parsed


def parse_endpoints(spec: str) -> list[tuple[str, int]]:
    """A cluster's etcd, ``etcd://h1:2379,h2:2379`` (the scheme may be left out) ->
    ``[(h1, 2379), (h2, 2379)]``; InvalidArgumentError (a ValueError) naming the part that
    is not HOST:PORT."""
    text = spec.removeprefix("etcd://")
    endpoints = []
    for part in text.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgumentError(
                f"not an etcd endpoint (host:port): {part.strip()!r} in {spec!r}"
            )
        endpoints.append((host.strip("[]"), int(port)))
    return endpoints


def _require_str(value: object, what: str) -> None:
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(
            f"{what} must be a str ('HOST:PORT', several separated by commas), "
            f"not {type(value).__name__}"
        )


def format_address(host: str, port: int) -> str:
    """``(host, port)`` -> ``"HOST:PORT"`` (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick), for a process a test, a bench or
    the chaos harness starts. Nothing holds it: bind it soon, and start again on a fresh one
    if another took it. (Here, the lowest layer, so every part uses this one; the public
    name is ``huddle.testing.free_port``.)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
