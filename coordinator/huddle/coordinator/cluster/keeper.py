"""Nothing is acknowledged before etcd has it: a cluster node's answers wait for their writes.

The server hands over each handled request's records with the answers it produced
(``hold``), as it does to the data dir's group commit. At the end of each loop pass the
records gathered become one batch, written by ``write`` (the node's fenced etcd writes);
batches go one at a time, in order, and a batch's answers go out once it is written.
Answers of requests that changed nothing but were handled after a change wait behind it,
so no answer shows a change etcd does not hold yet.

A batch whose write fails (the shard's epoch moved on, or etcd did not answer) is refused:
every answer it held becomes NOT_COORDINATOR to whoever it was for, so clients find the
coordinator again and retry; ``write`` has already stopped the node serving the shards it
could not write (their state in memory is ahead of etcd, and is dropped).

A batch etcd kept but for commits it refused for their size (``PartlyKept``) is
released, those commits answered OFFSET_METADATA_TOO_LARGE (``cluster.oversized``).

A write never holds the keeper up for good: one still under way after ``deadline_s`` (every
etcd call has its own deadline: this one is the last resort) is cancelled, its batch
refused and handed to ``give_up`` (which stops serving its shards); one that dies in any
way is refused too, and the next batch goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from huddle.coordinator.cluster.oversized import PartlyKept, answer_too_large
from huddle.coordinator.effects import Outgoing
from huddle.coordinator.storage.batching import EndOfPass
from huddle.coordinator.storage.records import Record
from huddle.protocol.messages import Call

log = structlog.get_logger("huddle.cluster")

# the caller's connection (NO_CALLER for changes a timer or a closed connection made), its
# call, the answers
Held = tuple[int, Call | None, list[Outgoing]]
NO_CALLER = -1


class Keeper(Protocol):
    """What the server hands handled requests to, so that their answers go out only once
    their changes are kept: the data dir's ``GroupCommit``, or a cluster's ``EtcdKeeper``."""

    @property
    def busy(self) -> bool: ...

    def hold(
        self, records: list[Record], conn_id: int, call: Call | None, out: list[Outgoing]
    ) -> None: ...

    def submit_soon(self) -> None: ...

    async def drain(self) -> None: ...

    def close(self, *, wait: bool = True) -> None: ...


# A record as it was held, with what it was made under: for a group's or an offset's, the
# serving of its shard (``ClusterNode.serving``; None: none served), a serving that ended
# since must not have it written; for a topic's, the topic as the node had seen it.
Stamped = tuple[Record, int | None]
# True: every record kept; PartlyKept: all but commits etcd refused for their size
Write = Callable[[list[Stamped]], Awaitable[bool | PartlyKept]]
Stamp = Callable[[Record], Stamped]


class EtcdKeeper(EndOfPass):
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        write: Write,
        *,
        stamp: Stamp,
        release: Callable[[list[Held]], None],
        refuse: Callable[[list[Held]], None],
        deadline_s: float | None = None,
        give_up: Callable[[list[Stamped]], None] | None = None,
    ) -> None:
        self._loop = loop
        self._write = write
        self._stamp = stamp
        self._release = release
        self._refuse = refuse
        self._deadline_s = deadline_s
        self._give_up = give_up
        self._records: list[Stamped] = []  # the next batch
        self._held: list[Held] = []  # answers waiting for the next batch
        self._writing: asyncio.Task[None] | None = None
        self._waiting: list[Held] = []  # answers waiting for the batch being written
        self._submit_due = False
        self._idle = asyncio.Event()
        self._idle.set()
        self.batches = 0

    @property
    def busy(self) -> bool:
        return self._writing is not None or bool(self._records) or bool(self._held)

    def hold(
        self, records: list[Record], conn_id: int, call: Call | None, out: list[Outgoing]
    ) -> None:
        self._records.extend(map(self._stamp, records))
        self._held.append((conn_id, call, out))
        self._idle.clear()

    def submit(self) -> None:
        if self._writing is not None:
            return  # the next batch goes when this one is written
        held, self._held = self._held, []
        if not self._records:
            self._release(held)
            self._settle()
            return
        records, self._records = self._records, []
        self._waiting = held
        self._writing = self._loop.create_task(self._run(records))

    async def _run(self, records: list[Stamped]) -> None:
        kept: bool | PartlyKept = False
        try:
            async with asyncio.timeout(self._deadline_s):
                kept = await self._write(records)
        except TimeoutError:
            log.error("cluster_write_stalled", records=len(records), deadline_s=self._deadline_s)
            if self._give_up is not None:
                self._give_up(records)
        except Exception as exc:  # the writer logs its own failures; this is a last resort
            log.error("cluster_write_failed", error=repr(exc), records=len(records))
            if self._give_up is not None:
                self._give_up(records)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the keeper is closed without waiting
            log.error("cluster_write_failed", error="cancelled from inside", records=len(records))
            if self._give_up is not None:
                self._give_up(records)
        finally:
            held, self._waiting, self._writing = self._waiting, [], None
            self.batches += 1
        if isinstance(kept, PartlyKept):
            answer_too_large(held, kept.too_large)
            self._release(held)
        elif kept:
            self._release(held)
        else:
            self._refuse(held)
        if self._held or self._records:
            self.submit()
        else:
            self._settle()

    def _settle(self) -> None:
        if not self.busy:
            self._idle.set()

    async def drain(self) -> None:
        """Until every held answer is released or refused (for shutdown)."""
        self.submit()
        await self._idle.wait()

    async def written(self) -> None:
        """Until the batch being written now, if any, is done (a shard given up: a batch
        that began before may still write to it; later ones refuse what its serving
        changed). Under steady traffic the keeper is never idle: this does not wait for that."""
        task = self._writing
        if task is not None:
            await asyncio.wait([task])

    def close(self, *, wait: bool = True) -> None:
        if self._writing is not None and not wait:
            self._writing.cancel()
