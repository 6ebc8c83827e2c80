"""Partition assignors. Importing this package registers every built-in one in
``ASSIGNORS``: ``range``, ``roundrobin``, ``sticky`` and ``cooperative-sticky``."""

from client.assignors.base import (
    ASSIGNORS,
    Assignor,
    AssignorRegistry,
    GroupAssignment,
    MemberAssignment,
    MemberSubscription,
    RebalanceProtocol,
)
from client.assignors.range import RangeAssignor
from client.assignors.roundrobin import RoundRobinAssignor
from client.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

__all__ = [
    "ASSIGNORS",
    "Assignor",
    "AssignorRegistry",
    "CooperativeStickyAssignor",
    "GroupAssignment",
    "MemberAssignment",
    "MemberSubscription",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
]
