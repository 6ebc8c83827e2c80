"""An address that takes no connection, or takes it and never answers, fails the client
with ``ConnectTimeoutError``: a ``ClientError`` (so a ``HuddleError``) and a
``TimeoutError``, naming the address, the limit and the phase."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any

import pytest

from huddle.client import Admin, ClientError, ConnectTimeoutError, HuddleError
from huddle.client.connection import connect
from huddle.client.discovery import connect_any
from huddle.client.security import Security


@asynccontextmanager
async def never_answering() -> AsyncIterator[str]:
    """An address that accepts TCP connections and never says a word."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for writer in held:
            writer.close()
        server.close()


@contextmanager
def dropping_syns() -> Iterator[str]:
    """An address whose SYNs go unanswered: a listener whose accept queue is full (its
    one place taken by a connection never accepted), as a host dropping them."""
    with socket.socket() as listener, socket.socket() as filler:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        filler.connect(listener.getsockname())
        yield f"127.0.0.1:{listener.getsockname()[1]}"


async def entered(opened: AbstractAsyncContextManager[Any]) -> None:
    async with opened:
        pass


WAYS: dict[str, Callable[[str], AbstractAsyncContextManager[Any]]] = {
    "connect": lambda address: connect(address, timeout=0.3),
    "Admin": lambda address: Admin(address, timeout=0.3),
    "connect_any": lambda address: connect_any(address, timeout=0.3),
}


def check(error: ConnectTimeoutError, address: str, phase: str) -> None:
    assert isinstance(error, ClientError)
    assert isinstance(error, HuddleError)
    assert isinstance(error, TimeoutError)
    assert (error.address, error.timeout, error.phase) == (address, 0.3, phase)
    assert address in str(error)
    assert "within 0.3 s" in str(error)
    assert f"({phase})" in str(error)


@pytest.mark.parametrize("way", WAYS.values(), ids=WAYS.keys())
async def test_an_address_that_never_answers_the_handshake(
    way: Callable[[str], AbstractAsyncContextManager[Any]],
) -> None:
    async with never_answering() as address:
        with pytest.raises(ConnectTimeoutError) as raised:
            await entered(way(address))
    check(raised.value, address, "handshake")
    assert str(raised.value) == f"{address} did not answer the handshake within 0.3 s (handshake)"


@pytest.mark.parametrize("way", WAYS.values(), ids=WAYS.keys())
async def test_an_address_that_drops_the_connection_attempt(
    way: Callable[[str], AbstractAsyncContextManager[Any]],
) -> None:
    with dropping_syns() as address, pytest.raises(ConnectTimeoutError) as raised:
        await entered(way(address))
    check(raised.value, address, "connect")


async def test_a_login_unanswered_says_answers_may_be_held_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("huddle.client.connection.LOGIN_TIMEOUT_S", 0.3)  # not 8 s, here
    login = Security(username="alice", password="secret")
    async with never_answering() as address:
        with pytest.raises(ConnectTimeoutError) as raised:
            await entered(connect(address, timeout=0.1, security=login))
    assert raised.value.timeout == 0.3  # the login's limit, not the shorter one given
    assert str(raised.value).startswith(
        f"{address} did not answer the handshake and SASL login within 0.3 s (handshake); "
        "after failed logins from this address the coordinator holds back its answer"
    )
