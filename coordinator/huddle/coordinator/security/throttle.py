"""Repeated authentication failures from one address are slowed down.

Each failure from a host doubles the time its next failure answer is held back (from
``base_s``, at most ``max_s``), as Kafka holds a failed authentication's answer
(``connection.failed.authentication.delay.ms``) but growing: a client guessing passwords
gets a few tries a second at first and one every ``max_s`` after. A host that has not
failed for ``forget_s`` starts again from ``base_s``. The table is bounded: the host that
failed longest ago is forgotten first. A success does not wipe a host's failures: one
valid account (or a NAT shared with one) must not reset the slow-down between guesses.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(slots=True)
class _Record:
    failures: int
    last: float


class FailureThrottle:
    def __init__(
        self,
        base_s: float = 0.1,
        max_s: float = 5.0,
        forget_s: float = 60.0,
        max_hosts: int = 10_000,
    ) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self.forget_s = forget_s
        self.max_hosts = max_hosts
        self._hosts: OrderedDict[str, _Record] = OrderedDict()

    def failures(self, host: str, now: float) -> int:
        record = self._hosts.get(host)
        if record is None or now - record.last > self.forget_s:
            return 0
        return record.failures

    def penalty(self, host: str, now: float) -> float:
        """How long (s) an answer to this host is held back now, for its recent failures."""
        count = self.failures(host, now)
        if count == 0:
            return 0.0
        return min(self.base_s * float(2 ** min(count - 1, 30)), self.max_s)

    def failed(self, host: str, now: float) -> float:
        """Count a failure; how long (s) to hold its answer back."""
        count = self.failures(host, now) + 1
        self._hosts[host] = _Record(count, now)
        self._hosts.move_to_end(host)
        while len(self._hosts) > self.max_hosts:
            self._hosts.popitem(last=False)
        return min(self.base_s * float(2 ** min(count - 1, 30)), self.max_s)
