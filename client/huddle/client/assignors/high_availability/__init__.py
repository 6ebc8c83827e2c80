"""``high-availability`` (Kafka Streams' KIP-441 for partitions as tasks): the assignor and
its parts.

``assignor`` holds ``HighAvailabilityAssignor`` (registered on import); ``view`` is what it
knows in one round (tasks, owners, claims, lags), ``target`` the balanced target, and
``place`` turns the target into this round's actives, standbys and warm-ups.
"""

from huddle.client.assignors.high_availability.assignor import HighAvailabilityAssignor

__all__ = ["HighAvailabilityAssignor"]
