"""Reading a run's event files back, and checking them against ``huddle.chaos.events``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from huddle.chaos import events as ev

KNOWN = {
    ev.RUN_STARTED,
    ev.RUN_FINISHED,
    ev.FAULT,
    ev.STEADY,
    ev.PROCESS_STARTED,
    ev.PROCESS_STOPPED,
    ev.JOINED,
    ev.ASSIGNED,
    ev.REVOKED,
    ev.LOST,
    ev.RESTORED,
    ev.PROCESSED,
    ev.COMMITTED,
}
FIELDS = {
    ev.PROCESS_STARTED: {"pid", "role", "group_id", "protocol", "instance_id"},
    ev.PROCESS_STOPPED: {"reason"},
    ev.JOINED: {"member_id", "generation", "leader"},
    ev.ASSIGNED: {"member_id", "generation", "partitions"},
    ev.REVOKED: {"member_id", "generation", "partitions"},
    ev.LOST: {"member_id", "generation", "partitions"},
    ev.PROCESSED: {"member_id", "generation", "topic", "partition", "offset", "count"},
    ev.COMMITTED: {"member_id", "generation", "topic", "partition", "offset", "accepted", "error"},
    ev.FAULT: {"action", "target", "detail"},
    ev.RUN_STARTED: {"scenario", "protocol", "members", "partitions", "settings"},
    ev.RUN_FINISHED: {"outcome"},
    ev.STEADY: {"generation", "members", "settled"},
}


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
        elif missing := FIELDS.get(r["event"], set()) - set(r):
            found.append(f"line {i + 1}: {r['event']} lacks {sorted(missing)}")
    return found
