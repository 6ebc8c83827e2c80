"""Members for a test, each in its own task: start them, stop them (they leave their group)
or kill them (their connection just drops, as when a process dies), in any order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc

from huddle.client.events import MemberFailedError
from huddle.client.member import Member
from huddle.protocol.errors import InvalidArgumentError


class _Running:
    __slots__ = ("done", "member", "scope", "stop", "withdrawn")

    def __init__(self, member: Member) -> None:
        self.member = member
        self.stop = anyio.Event()
        self.done = anyio.Event()
        self.scope = anyio.CancelScope()
        self.withdrawn = False  # stopped or killed by the test


class MemberSet:
    """Members of ``bootstrap``'s groups. Use ``async with members.running() as running:``
    (or the ``huddle_members`` fixture's ``running()``), then ``await running.start(name,
    group_id=..., topics=[...], **Member options)``. Works under any async test runner
    anyio supports (pytest-asyncio, anyio's plugin)."""

    def __init__(self, bootstrap: str, **defaults: Any) -> None:
        self.bootstrap = bootstrap
        self.defaults = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 500, **defaults}

    @asynccontextmanager
    async def running(self) -> AsyncIterator[RunningMembers]:
        async with anyio.create_task_group() as tg:
            running = RunningMembers(self, tg)
            try:
                yield running
            finally:
                await running.stop_all()
                tg.cancel_scope.cancel()


class RunningMembers:
    def __init__(self, owner: MemberSet, tg: anyio.abc.TaskGroup) -> None:
        self._owner = owner
        self._tg = tg
        self._members: dict[str, _Running] = {}

    def __getitem__(self, name: str) -> Member:
        return self._members[name].member

    @property
    def members(self) -> dict[str, Member]:
        """The members started and not stopped or killed, by name. One the coordinator
        refused for good stays until it is stopped: its ``wait_stable()``, and
        ``wait_settled`` over it, raise its ``MemberFailedError``."""
        return {n: r.member for n, r in self._members.items() if not r.withdrawn}

    async def start(self, name: str, **options: Any) -> Member:
        """A member in its own task (``group_id``, ``topics`` and any ``Member`` option;
        ``client_id`` defaults to the name). Returns once it runs, not once it joined:
        ``wait_settled`` or ``member.wait_stable()`` for that."""
        if name in self.members:
            raise InvalidArgumentError(f"a member named {name!r} runs already")
        settings = {**self._owner.defaults, "client_id": name, **options}
        member = Member(self._owner.bootstrap, **settings)
        running = _Running(member)
        self._members[name] = running
        started = anyio.Event()

        async def run() -> None:
            try:
                with running.scope:
                    async with member:
                        started.set()
                        await running.stop.wait()
            except MemberFailedError as failed:
                if failed.code is None:
                    raise  # the test's own listener or assignor broke: the test fails
                # the coordinator refused it for good: it stops (its wait_stable raises that)
            finally:
                started.set()
                running.done.set()

        self._tg.start_soon(run, name=f"huddle member {name}")
        await started.wait()
        return member

    async def stop(self, name: str) -> None:
        """Close the member as an application does: it leaves its group."""
        running = self._members[name]
        running.stop.set()
        await running.done.wait()
        running.withdrawn = True

    async def kill(self, name: str) -> None:
        """Drop the member as if its process died: no LeaveGroup, its connection closes;
        the coordinator removes it after the disconnect grace or its session timeout."""
        running = self._members[name]
        running.scope.cancel()
        await running.done.wait()
        running.withdrawn = True

    async def stop_all(self) -> None:
        for name in list(self.members):
            await self.stop(name)
