"""Batching the changes of one event-loop pass into one write."""

from __future__ import annotations

import asyncio


class EndOfPass:
    """``submit_soon`` calls ``submit`` once, after every read of the current loop pass is
    handled (the loop runs the callbacks it is given after the I/O callbacks of a pass)."""

    _loop: asyncio.AbstractEventLoop
    _submit_due: bool = False

    def submit(self) -> None:
        raise NotImplementedError

    def submit_soon(self) -> None:
        if not self._submit_due:
            self._submit_due = True
            self._loop.call_soon(self._submit_now)

    def _submit_now(self) -> None:
        self._submit_due = False
        self.submit()
