"""Password guessing is slowed down per address group, however many connections it uses.

An *address group* is what one attacker is taken to hold (``address_group``): an IPv4
address; an IPv6 /56 (what a provider commonly gives one customer or site: 256 /64s, each
with as many addresses as it wants); every loopback address (127.0.0.0/8 and ::1: all of
them are this machine's).

Two rules hold per group, from its first exchange on:

* ``ProofTurns``: at most ``per_group`` password checks (a SCRAM proof, a PLAIN password)
  hold a turn at once; another one waits its turn, in order. A check that succeeds gives
  its turn back at once; one that fails keeps it until its answer's time (held back, see
  below), whether or not its client stays for the answer. So the failed checks of a group
  within any time are bounded, whatever its clients do: many connections, or connections
  closed once the guess is sent, buy no more guesses.
* ``FailureThrottle``: each failure doubles the time its answer is held back (from
  ``base_s``, at most ``max_s``), as Kafka holds a failed authentication's answer
  (``connection.failed.authentication.delay.ms``) but growing: a guesser gets a few tries
  a second at first and ``per_group`` every ``max_s`` after. A group that has not failed
  for ``forget_s`` starts again from ``base_s``. The table is bounded: the group that
  failed longest ago is forgotten first. A success does not wipe a group's failures: one
  valid account (or a NAT shared with one) must not reset the slow-down between guesses.
  While the group has recent failures, a success's answer is held back exactly as long as
  a failure's at that moment would be (``penalty``): the delay does not tell them apart.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from huddle.protocol.errors import InvalidArgumentError
from huddle.protocol.messages import MAX_LOGIN_HOLD_S

LOOPBACK = "loopback"
IPV6_GROUP_PREFIX = 56  # bits: a customer's or site's delegation (RIPE-690: /56 or /48)


def address_group(host: str) -> str:
    """The group of a peer's address: ``203.0.113.7``, ``2001:db8:1:200::/56``,
    ``loopback`` (an address that is not an IP, as a Unix socket's, is its own group)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # no IPv6 zone
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return LOOPBACK
    if isinstance(address, ipaddress.IPv4Address):
        return str(address)
    return str(ipaddress.IPv6Network((address, IPV6_GROUP_PREFIX), strict=False))


@dataclass(slots=True)
class _Record:
    failures: int
    last: float


class FailureThrottle:
    def __init__(
        self,
        base_s: float = 0.1,
        max_s: float = MAX_LOGIN_HOLD_S,
        forget_s: float = 60.0,
        max_hosts: int = 10_000,
    ) -> None:
        if max_s > MAX_LOGIN_HOLD_S:  # clients wait for a login's answer only so long
            raise InvalidArgumentError(
                f"max_s must be at most {MAX_LOGIN_HOLD_S:g} s, not {max_s:g}"
            )
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

    def delay(self, failures: int) -> float:
        """How long (s) the answer after ``failures`` recent failures is held back."""
        if failures == 0:
            return 0.0
        return min(self.base_s * float(2 ** min(failures - 1, 30)), self.max_s)

    def penalty(self, host: str, now: float) -> float:
        """How long (s) a success's answer to this host is held back now: while it has
        recent failures, as long as a failure now would be (``failed``), so that a guesser
        cannot tell a right guess by its answer coming sooner; at once without any."""
        failures = self.failures(host, now)
        return self.delay(failures + 1) if failures else 0.0

    def failed(self, host: str, now: float) -> float:
        """Count a failure; how long (s) to hold its answer back."""
        count = self.failures(host, now) + 1
        self._hosts[host] = _Record(count, now)
        self._hosts.move_to_end(host)
        while len(self._hosts) > self.max_hosts:
            self._hosts.popitem(last=False)
        return self.delay(count)


Turn = Callable[[], None]


class ProofTurns:
    """At most ``per_group`` password checks hold a turn per address group; the others
    wait their turn in order. A check is named by a key (its connection's id): ``take``
    starts it (True) or queues it with the ``turn`` to call when it may start; ``end`` ends
    its turn (the caller says when: at once for a success, at its answer's time for a
    failure), or takes it out of the queue, and returns the ``turn`` of the check that
    starts in its place, for the caller to call."""

    def __init__(self, per_group: int) -> None:
        self.per_group = per_group
        self._group_of: dict[int, str] = {}  # key -> its group, checking or waiting
        self._checking: dict[str, set[int]] = {}
        self._waiting: dict[str, OrderedDict[int, Turn]] = {}

    def checking(self, group: str) -> int:
        return len(self._checking.get(group, ()))

    def waiting(self, group: str) -> int:
        return len(self._waiting.get(group, ()))

    def is_waiting(self, key: int) -> bool:
        group = self._group_of.get(key)
        return group is not None and key in self._waiting.get(group, ())

    def take(self, key: int, group: str, turn: Turn) -> bool:
        if key in self._group_of:
            raise InvalidArgumentError(f"check {key} is already under way or waiting")
        self._group_of[key] = group
        checking = self._checking.setdefault(group, set())
        if len(checking) < self.per_group:
            checking.add(key)
            return True
        self._waiting.setdefault(group, OrderedDict())[key] = turn
        return False

    def end(self, key: int) -> Turn | None:
        group = self._group_of.pop(key, None)
        if group is None:
            return None
        waiting = self._waiting.get(group)
        if waiting is not None and waiting.pop(key, None) is not None:
            if not waiting:
                del self._waiting[group]
            return None
        checking = self._checking[group]
        checking.discard(key)
        if waiting:  # the next check of the group starts in its place
            key, turn = waiting.popitem(last=False)
            if not waiting:
                del self._waiting[group]
            checking.add(key)
            return turn
        if not checking:
            del self._checking[group]
        return None
