"""Partition assignors. Importing this package registers every built-in one in
``ASSIGNORS``: ``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``,
``cooperative-deferred`` (Designs II and III) and ``high-availability`` (KIP-441)."""

from huddle.client.assignors.base import (
    ASSIGNORS,
    Assignor,
    AssignorRegistry,
    GroupAssignment,
    MemberAssignment,
    MemberSubscription,
    RebalanceProtocol,
)
from huddle.client.assignors.deferred import DeferredAssignor
from huddle.client.assignors.high_availability import HighAvailabilityAssignor
from huddle.client.assignors.range import RangeAssignor
from huddle.client.assignors.roundrobin import RoundRobinAssignor
from huddle.client.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

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
