"""Reading a run's event files back, and checking them against ``huddle.chaos.events``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from huddle.chaos import events as ev

KNOWN = frozenset(ev.tag_of(t) for t in ev.EVENT_TYPES)


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every complete line of an event file (a line being written is left out)."""
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def problems(records: list[dict[str, Any]], proc: str) -> list[str]:
    """What is wrong with the records of one process's file (empty: well formed)."""
    found = []
    for i, r in enumerate(records):
        if not isinstance(r.get("ts"), float) or r.get("proc") != proc:
            found.append(f"line {i + 1}: ts or proc missing or wrong")
        elif r.get("event") not in KNOWN:
            found.append(f"line {i + 1}: unknown event {r.get('event')!r}")
        else:
            try:
                msgspec.convert(r, ev.AnyEvent)  # every field there, of its type
            except msgspec.ValidationError as exc:
                found.append(f"line {i + 1}: {r['event']}: {exc}")
    return found
