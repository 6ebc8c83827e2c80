"""The application's view of rebalances (KIP-429 order)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import InvalidArgumentTypeError

REQUIRED = ("on_partitions_revoked", "on_partitions_assigned")
OPTIONAL = ("on_partitions_lost", "on_replicas_assigned")


class RebalanceListener:
    """Subclass and override what you need; every method is awaited by the member. A
    listener need not subclass this: any object with ``on_partitions_revoked`` and
    ``on_partitions_assigned`` will do, and a missing ``on_partitions_lost`` or
    ``on_replicas_assigned`` does what this class's does (nothing). ``Member`` checks the
    listener when it is made (``Callbacks``).

    Cooperative order in one rebalance: ``on_partitions_lost`` (only if the member fell out
    of the group), ``on_partitions_revoked`` (owned - assigned, only if not empty; a rejoin
    follows), ``on_partitions_assigned`` (assigned - owned, always, possibly empty). Eager:
    ``on_partitions_revoked`` with everything owned before every join, then
    ``on_partitions_assigned`` with the whole new assignment. A member keeps owning — and
    the application keeps processing — its partitions while it rejoins, until a callback
    takes them away.
    """

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        """Commit what was processed for ``revoked``; they move to another member."""

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        """Start processing ``assigned`` (resume from their committed offsets)."""

    async def on_partitions_lost(self, lost: frozenset[TopicPartition]) -> None:
        """Stop processing ``lost`` at once: they may already belong to someone else, and
        commits for them will be refused."""

    async def on_replicas_assigned(
        self, standby: frozenset[TopicPartition], warmup: frozenset[TopicPartition]
    ) -> None:
        """Lag-aware assignors (KIP-441): keep the local state of ``standby`` and ``warmup``
        tasks up to date without processing them; a warm-up that has caught up becomes an
        active task in a later (probing) rebalance. Called after ``on_partitions_assigned``
        whenever either set changes."""


class ListenerLike(Protocol):
    """What ``Member`` takes as a listener: the two required callbacks (the optional ones,
    ``on_partitions_lost`` and ``on_replicas_assigned``, as ``RebalanceListener`` has
    them, may be left out)."""

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None: ...


class Callbacks:
    """A listener's callbacks, checked when the ``Member`` is made: a listener without a
    required one, with one that cannot be called with the arguments it will be given
    (``inspect.signature``), or a listener class given instead of an instance, is refused
    then, with an ``InvalidArgumentTypeError`` (a ``TypeError``), never found out
    mid-rebalance. A missing optional one (or one set to None) is ``RebalanceListener``'s.
    Each callback is looked up on the listener when it is called, so one replaced later (a
    test's monkeypatch) is the one called."""

    def __init__(self, listener: object) -> None:
        if isinstance(listener, type):
            raise InvalidArgumentTypeError(
                f"the listener is the class {listener.__name__}, not an instance of it: give "
                f"{listener.__name__}()"
            )
        kind = type(listener).__name__
        missing = [name for name in REQUIRED if getattr(listener, name, None) is None]
        if missing:
            raise InvalidArgumentTypeError(
                f"the listener ({kind}) has no {' and no '.join(missing)}: give an object with "
                f"both {' and '.join(REQUIRED)} (optional: {', '.join(OPTIONAL)}), or "
                "subclass RebalanceListener"
            )
        self._listener = listener
        self._defaults = RebalanceListener()
        for name in REQUIRED + OPTIONAL:
            call = self._callback(name)
            if not callable(call):
                raise InvalidArgumentTypeError(f"the listener's {name} ({kind}) is not callable")
            _check_arguments(name, call, kind)

    def _callback(self, name: str) -> Any:
        call = getattr(self._listener, name, None)
        return call if call is not None else getattr(self._defaults, name)

    def call(self, name: str, *args: frozenset[TopicPartition]) -> Awaitable[None]:
        """Run callback ``name`` once awaited (a coroutine function is awaited; a plain
        function returns when it has run)."""
        return _completed(self._callback(name), args)


def _check_arguments(name: str, call: Callable[..., Any], kind: str) -> None:
    """``call`` takes what the member passes to callback ``name``: one set of partitions,
    or (``on_replicas_assigned``) two."""
    given = ("standby", "warmup") if name == "on_replicas_assigned" else ("partitions",)
    try:
        signature = inspect.signature(call)
    except (TypeError, ValueError):
        return  # no signature to read (some built-ins): found out when it is called
    try:
        signature.bind(*(frozenset[TopicPartition]() for _ in given))
    except TypeError as exc:
        raise InvalidArgumentTypeError(
            f"the listener's {name} ({kind}) cannot be called with ({', '.join(given)}): "
            f"{exc}; its signature is {name}{signature}"
        ) from None


async def _completed(call: Callable[..., Any], args: tuple[object, ...]) -> None:
    result = call(*args)
    if inspect.isawaitable(result):
        await result
