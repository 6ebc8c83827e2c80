"""A member in a task of its own: started and stopped in any order, like a process.

A ``Member`` holds an anyio task group from ``__aenter__`` to ``__aexit__``, so members
entered in one task must be left in reverse order. Scripts that start several members and
stop them in another order (a rolling bounce, a chaos test) run each in a ``MemberTask``::

    async with anyio.create_task_group() as tg:
        a = await MemberTask(Member(...)).start(tg)
        b = await MemberTask(Member(...)).start(tg)
        await a.stop()   # leaves the group cleanly
        await b.kill()   # as if the process died: no LeaveGroup, the connection just closes
"""

from __future__ import annotations

import anyio
from anyio.abc import TaskGroup

from huddle.client.member import Member


class MemberTask:
    def __init__(self, member: Member) -> None:
        self.member = member
        self._scope = anyio.CancelScope()
        self._stop = anyio.Event()
        self._done = anyio.Event()

    async def start(self, tg: TaskGroup) -> MemberTask:
        """Run the member in ``tg``; returns once it has been entered (not yet joined)."""
        started = anyio.Event()

        async def run() -> None:
            try:
                with self._scope:
                    async with self.member:
                        started.set()
                        await self._stop.wait()
            finally:
                started.set()
                self._done.set()

        tg.start_soon(run)
        await started.wait()
        return self

    async def stop(self) -> None:
        """Leave cleanly: revoke, LeaveGroup (dynamic members), close."""
        self._stop.set()
        await self._done.wait()

    async def kill(self) -> None:
        """Stop at once, as a killed process would: no callbacks, no LeaveGroup."""
        self._scope.cancel()
        await self._done.wait()

    @property
    def done(self) -> bool:
        return self._done.is_set()
