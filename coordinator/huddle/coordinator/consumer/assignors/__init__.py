"""Server-side assignors of the consumer group protocol, by the names Kafka gives them.

``ASSIGNORS`` maps a name to an assignor; a group uses the one its members ask for
(``server_assignor`` in their heartbeats; the most asked-for wins), else the coordinator's
default, the first of ``ConsumerGroupConfig.assignors``. Kafka's two, ``uniform`` and
``range``, are what a coordinator offers by default; huddle's ``deferred`` (Design II: a
departed member's partitions held for its return) and ``paced`` (Design III: moves in
batches) are here too, offered when the configuration names them. ``register`` adds one.
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
from huddle.coordinator.consumer.assignors.deferred import DeferredAssignor
from huddle.coordinator.consumer.assignors.paced import PacedAssignor
from huddle.coordinator.consumer.assignors.range import RangeAssignor
from huddle.coordinator.consumer.assignors.uniform import UniformAssignor

ASSIGNORS: dict[str, ServerAssignor] = {
    "uniform": UniformAssignor(),
    "range": RangeAssignor(),
    "deferred": DeferredAssignor(),
    "paced": PacedAssignor(),
}


def register(assignor: ServerAssignor) -> None:
    ASSIGNORS[assignor.name] = assignor


__all__ = [
    "ASSIGNORS",
    "AssignorError",
    "AssignorResult",
    "DeferredAssignor",
    "Departure",
    "GroupSpec",
    "MemberSpec",
    "PacedAssignor",
    "RangeAssignor",
    "ServerAssignor",
    "UniformAssignor",
    "register",
    "spec_of",
]
