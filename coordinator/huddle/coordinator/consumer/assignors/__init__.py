"""Server-side assignors of the consumer group protocol, by the names Kafka gives them.

``ASSIGNORS`` maps a name to an assignor; a group uses the one its members ask for
(``server_assignor`` in their heartbeats; the most asked-for wins), else the coordinator's
default, the first of ``ConsumerGroupConfig.assignors``. ``register`` adds one (huddle's own
policies plug in here).
"""

from __future__ import annotations

from huddle.coordinator.consumer.assignors.base import (
    AssignorError,
    AssignorResult,
    Departure,
    GroupSpec,
    MemberSpec,
    ServerAssignor,
    spec_of,
)
from huddle.coordinator.consumer.assignors.range import RangeAssignor
from huddle.coordinator.consumer.assignors.uniform import UniformAssignor

ASSIGNORS: dict[str, ServerAssignor] = {
    "uniform": UniformAssignor(),
    "range": RangeAssignor(),
}


def register(assignor: ServerAssignor) -> None:
    ASSIGNORS[assignor.name] = assignor


__all__ = [
    "ASSIGNORS",
    "AssignorError",
    "AssignorResult",
    "Departure",
    "GroupSpec",
    "MemberSpec",
    "RangeAssignor",
    "ServerAssignor",
    "UniformAssignor",
    "register",
    "spec_of",
]
