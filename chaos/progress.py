"""What the harness learns from the members' event files while a run goes on."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from chaos import events as ev


@dataclass(slots=True)
class EventTail:
    """Reads what was appended to ``events/member-*.jsonl`` since the last call."""

    directory: Path
    generation: int | None = None
    processed: int = 0  # records processed, all members together
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
        if b'"event":"joined"' not in line and b'"event":"processed"' not in line:
            return
        try:
            record = json.loads(line)
        except ValueError:
            return
        if record.get("event") == ev.JOINED:
            gen = int(record.get("generation", -1))
            self.generation = gen if self.generation is None else max(self.generation, gen)
        else:
            self.processed += int(record.get("count", 0))
