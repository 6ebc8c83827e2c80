"""What the harness learns from the members' event files while a run goes on."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from huddle.chaos import events as ev

# ``processed`` lines are most of a run's events: read their two numbers without parsing
# JSON, so that following the run costs the harness (and the proxy it runs) little CPU.
_PROCESSED = re.compile(rb'"partition":(\d+).*?"count":(\d+)')
_CONTROL = tuple(
    b'"event":"%s"' % name.encode()
    for name in (ev.JOINED, ev.ASSIGNED, ev.REVOKED, ev.LOST, ev.PROCESS_STARTED)
)


@dataclass(slots=True)
class EventTail:
    """Reads what was appended to ``events/member-*.jsonl`` since the last call."""

    directory: Path
    generation: int | None = None
    processed: int = 0  # records processed, all members together
    partitions: set[int] = field(default_factory=set)  # every partition processed so far
    generations: dict[str, int] = field(default_factory=dict)  # proc -> latest joined
    owned: dict[str, set[int]] = field(default_factory=dict)  # proc -> partitions it owns
    last_join_ts: float | None = None  # wall clock of the latest ``joined`` event
    _offsets: dict[Path, int] = field(default_factory=dict)

    def poll(self) -> None:
        for path in sorted(self.directory.glob("member-*.jsonl")):
            start = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
            complete = data.rfind(b"\n") + 1  # a line being written is read next time
            self._offsets[path] = start + complete
            for line in data[:complete].splitlines():
                self._take(line)

    def _take(self, line: bytes) -> None:
        if b'"event":"processed"' in line:
            if match := _PROCESSED.search(line):
                self.partitions.add(int(match[1]))
                self.processed += int(match[2])
            return
        if not any(marker in line for marker in _CONTROL):
            return
        try:
            record = json.loads(line)
        except ValueError:
            return
        proc, event = str(record.get("proc")), record.get("event")
        if event == ev.JOINED:
            gen = int(record.get("generation", -1))
            self.generation = gen if self.generation is None else max(self.generation, gen)
            self.generations[proc] = gen
            ts = float(record.get("ts", 0.0))
            self.last_join_ts = ts if self.last_join_ts is None else max(self.last_join_ts, ts)
        elif event == ev.PROCESS_STARTED:
            self.owned[proc] = set()  # a new process owns nothing yet
        elif event in (ev.ASSIGNED, ev.REVOKED, ev.LOST):
            changed = {int(p) for _, p in record.get("partitions") or []}
            mine = self.owned.setdefault(proc, set())
            if event == ev.ASSIGNED:
                mine |= changed
            else:
                mine -= changed

    def settled(self, members: set[str], partitions: int, now: float, quiet_s: float) -> bool:
        """Every one of ``members`` joined the latest generation; together they own all
        ``partitions``, balanced (no member owns two more than another: a protocol that
        still has planned moves to make, such as a deferred one backing off, is not
        done); every partition was processed; and nobody joined a generation for
        ``quiet_s`` seconds up to ``now`` (wall clock)."""
        if self.generation is None or self.last_join_ts is None or not members:
            return False
        counts = [len(self.owned.get(m, ())) for m in members]
        owned = set().union(*(self.owned.get(m, set()) for m in members))
        return (
            all(self.generations.get(m) == self.generation for m in members)
            and len(owned) >= partitions
            and max(counts) - min(counts) <= 1
            and len(self.partitions) >= partitions
            and now - self.last_join_ts >= quiet_s
        )
