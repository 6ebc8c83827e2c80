"""Partition assignors. Importing this package registers every built-in one in
``ASSIGNORS``: ``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``,
``cooperative-deferred`` (Designs II and III) and ``high-availability`` (KIP-441)."""

from client.assignors.base import (
    ASSIGNORS,
    Assignor,
    AssignorRegistry,
    GroupAssignment,
    MemberAssignment,
    MemberSubscription,
    RebalanceProtocol,
)
from client.assignors.deferred import DeferredAssignor
from client.assignors.high_availability import HighAvailabilityAssignor
from client.assignors.range import RangeAssignor
from client.assignors.roundrobin import RoundRobinAssignor
from client.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

__all__ = [
    "ASSIGNORS",
    "Assignor",
    "AssignorRegistry",
    "CooperativeStickyAssignor",
    "DeferredAssignor",
    "GroupAssignment",
    "HighAvailabilityAssignor",
    "MemberAssignment",
    "MemberSubscription",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
]
