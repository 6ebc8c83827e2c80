"""The measurements of ``bench.kafka_clients``: one group of real-client drivers per
scenario, timed with the drivers' own monotonic stamps (``huddle.chaos.kafka_workers``).

Each function takes a fresh group and topic, returns seconds (or raises ``Failed`` with
what went wrong), and leaves every driver stopped.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from huddle.chaos.kafka_workers import brokers
from huddle.chaos.kafka_workers.options import COOPERATIVE_STICKY, DriverOptions
from huddle.chaos.kafka_workers.running import Drivers, DriverTimeoutError, partitions_of

PARTITIONS: Final = 6
SESSION_MS: Final = 6_000
HEARTBEAT_MS: Final = 1_000
WAIT_S: Final = 40.0  # the longest any step may take before it counts as failed
RECORDS: Final = 10  # per partition, for the resume measurement
_serial = itertools.count(1)


class Failed(Exception):
    """The scenario did not reach its end state; the message says where it stopped."""


@dataclass(frozen=True, slots=True)
class Setup:
    bootstrap: str
    client: str
    strategy: str
    log_dir: Path

    def fresh(self, what: str) -> tuple[str, str, Path]:
        """A new group, topic (created, ``PARTITIONS`` wide) and log folder."""
        n = next(_serial)
        topic = f"bench-{what}-{n}"
        brokers.create_topic(self.bootstrap, topic, PARTITIONS)
        return f"{topic}-group", topic, self.log_dir / f"{self.client}-{what}-{n}"

    def options(self, group: str, topic: str, **kw: object) -> DriverOptions:
        settings: dict[str, object] = {
            "bootstrap": self.bootstrap,
            "group": group,
            "topic": topic,
            "strategy": self.strategy,
            "session_ms": SESSION_MS,
            "heartbeat_ms": HEARTBEAT_MS,
            "commit": False,
            "max_seconds": 300.0,
            **kw,
        }
        return DriverOptions(**settings)  # type: ignore[arg-type]


def _balanced(d: Drivers, names: list[str], topic: str, what: str) -> float:
    wanted = partitions_of(topic, PARTITIONS)
    try:
        return d.wait(lambda: d.balanced(names, wanted), WAIT_S, what)
    except DriverTimeoutError as exc:
        raise Failed(str(exc)) from None


def _started(d: Drivers, name: str) -> float:
    driver = d.all[name]
    try:
        return float(d.wait(lambda: driver.last("started"), WAIT_S, f"{name} started")["mono"])
    except DriverTimeoutError as exc:
        raise Failed(str(exc)) from None


def _form(d: Drivers, s: Setup, group: str, topic: str, names: list[str], **kw: object) -> float:
    for name in names:
        d.start(name, s.client, s.options(group, topic, **kw))
    t0 = max(_started(d, n) for n in names)
    return _balanced(d, names, topic, f"{len(names)} members own all") - t0


def form(s: Setup) -> dict[str, float]:
    """3 members form; a 4th joins; one is killed (-9); one leaves cleanly (SIGTERM)."""
    group, topic, logs = s.fresh("chain")
    figures: dict[str, float] = {}
    with Drivers(logs) as d:
        names = ["m1", "m2", "m3"]
        figures["form"] = _form(d, s, group, topic, names)
        d.start("m4", s.client, s.options(group, topic))
        t0 = _started(d, "m4")
        names.append("m4")
        figures["join"] = _balanced(d, names, topic, "4 members own all") - t0
        t0 = d.all["m1"].kill()
        names.remove("m1")
        figures["kill"] = _balanced(d, names, topic, "survivors own all after kill -9") - t0
        t0 = d.all["m2"].terminate()
        names.remove("m2")
        figures["leave"] = _balanced(d, names, topic, "survivors own all after a leave") - t0
    return figures


def cooperative_join(s: Setup) -> float:
    """3 cooperative-sticky members form; the time for a 4th to join."""
    coop = Setup(s.bootstrap, s.client, COOPERATIVE_STICKY, s.log_dir)
    group, topic, logs = coop.fresh("coop")
    with Drivers(logs) as d:
        names = ["m1", "m2", "m3"]
        _form(d, coop, group, topic, names)
        d.start("m4", coop.client, coop.options(group, topic))
        t0 = _started(d, "m4")
        return _balanced(d, [*names, "m4"], topic, "4 cooperative members own all") - t0


def resume(s: Setup) -> float:
    """A member reads and commits ``RECORDS`` per partition and leaves; more are written;
    the time for a new member to read every partition from the committed offset."""
    group, topic, logs = s.fresh("resume")
    brokers.produce(s.bootstrap, topic, PARTITIONS, RECORDS)
    with Drivers(logs) as d:
        first = d.start("m1", s.client, s.options(group, topic, commit=True))

        def committed_all() -> bool | None:
            done = {
                (t, p) for e in first.of("committed") for t, p, o in e["offsets"] if o == RECORDS
            }
            return len(done) == PARTITIONS or None

        try:
            d.wait(committed_all, WAIT_S, f"m1 committed offset {RECORDS} on every partition")
        except DriverTimeoutError as exc:
            raise Failed(str(exc)) from None
        first.stop()
        brokers.produce(s.bootstrap, topic, PARTITIONS, RECORDS)
        second = d.start("m2", s.client, s.options(group, topic, commit=True))
        t0 = _started(d, "m2")

        def read_all() -> list[dict[str, object]] | None:
            found = second.of("consumed")
            return (
                found if len({(e["topic"], e["partition"]) for e in found}) == PARTITIONS else None
            )

        try:
            found = d.wait(read_all, WAIT_S, "m2 read every partition")
        except DriverTimeoutError as exc:
            raise Failed(str(exc)) from None
        wrong = [e for e in found if e["offset"] != RECORDS]
        if wrong:
            raise Failed(f"resumed at the wrong offsets: {wrong}")
        return max(float(e["mono"]) for e in found) - t0  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Bounce:
    seconds: float | None  # until the bounced member owned its partitions again
    kept: bool  # it got back the partitions it had
    rebalanced: bool  # another member's assignment changed meanwhile
    note: str = ""


def static_bounce(s: Setup) -> Bounce:
    """3 static members form; one closes (SIGTERM: a static member sends no LeaveGroup) and
    comes back with its group.instance.id; does it get its partitions back, and does anyone
    else notice?"""
    group, topic, logs = s.fresh("static")
    with Drivers(logs) as d:
        names = ["m1", "m2", "m3"]
        for name in names:
            d.start(name, s.client, s.options(group, topic, instance_id=f"static-{name}"))
        _balanced(d, names, topic, "3 static members own all")
        before = d.all["m1"].owned
        d.all["m1"].stop()
        bounce_at = d.all["m1"].last("left")
        back = d.start("m1", s.client, s.options(group, topic, instance_id="static-m1"))
        t0 = _started(d, "m1")
        since = float(bounce_at["mono"]) if bounce_at else t0
        others = [d.all["m2"], d.all["m3"]]

        def noticed() -> bool:
            return any(o.of(e, since) for o in others for e in ("revoked", "assigned", "lost"))

        try:
            d.wait(lambda: back.owned or None, WAIT_S, "the bounced member owns partitions")
        except DriverTimeoutError:
            return Bounce(None, False, noticed(), "no assignment within the wait")
        seconds = back.owned_since - t0
        # a rebalance the bounce set off may still be under way: let the group settle
        try:
            _balanced(d, names, topic, "the group settled after the bounce")
        except Failed as exc:
            return Bounce(seconds, back.owned == before, noticed(), str(exc)[:200])
        return Bounce(seconds, back.owned == before, noticed())


SCENARIOS: Final[dict[str, Callable[[Setup], object]]] = {
    "form": form,
    "cooperative_join": cooperative_join,
    "resume": resume,
    "static_bounce": static_bounce,
}
