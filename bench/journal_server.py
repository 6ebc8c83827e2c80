"""``huddle serve`` for ``bench.journal``, with the data dir written either off the loop in
batches (what huddle does) or inline: one write (and fsync, where huddle now uses fdatasync)
per request on the event loop, as huddle did before group commit, to measure both in one run.

``python -m bench.journal_server --port P --data-dir D [--fsync] [--inline]``
"""

from __future__ import annotations

import argparse
import asyncio
import os

from bench.common import quiet_logs
from huddle.coordinator import server
from huddle.coordinator.config import GroupConfig, ServerConfig
from huddle.coordinator.effects import Outgoing
from huddle.coordinator.storage import group_commit, journal
from huddle.coordinator.storage.records import Record
from huddle.protocol.messages import Call


class InlineCommit(group_commit.GroupCommit):
    """The old path: each request's changes written (and fsynced) on the loop, then answered."""

    @property
    def busy(self) -> bool:
        return False

    def hold(
        self, records: list[Record], conn_id: int, call: Call | None, out: list[Outgoing]
    ) -> None:
        if self.failed:
            self._refuse([(conn_id, call, out)])
            return
        try:
            self.journal.append(records)
        except OSError:
            self.failed = True
            self._refuse([(conn_id, call, out)])
            self._on_failure()
            return
        self._release([(conn_id, call, out)])

    def submit(self) -> None:
        pass


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.journal_server")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--fsync", action="store_true")
    p.add_argument("--inline", action="store_true", help="the old path, for comparison")
    args = p.parse_args()
    quiet_logs()
    if args.inline:
        setattr(server, "GroupCommit", InlineCommit)  # noqa: B010 - swap the class the server uses
        setattr(journal, "_sync_data", os.fsync)  # noqa: B010 - and fsync, as before
    config = ServerConfig(
        host="127.0.0.1",
        port=args.port,
        data_dir=args.data_dir,
        fsync=args.fsync,
        group=GroupConfig(initial_rebalance_delay_ms=0),
    )
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover
        runner = asyncio.Runner()
    with runner:
        runner.run(server.serve(config))


if __name__ == "__main__":
    main()
