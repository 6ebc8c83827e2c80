"""Assignors (placeholder: the built-in assignors are registered by their modules)."""

from client.assignors.base import (
    ASSIGNORS,
    Assignor,
    GroupAssignment,
    MemberAssignment,
    MemberSubscription,
    RebalanceProtocol,
)

__all__ = [
    "ASSIGNORS",
    "Assignor",
    "GroupAssignment",
    "MemberAssignment",
    "MemberSubscription",
    "RebalanceProtocol",
]
