"""The application's view of rebalances (KIP-429 order)."""

from __future__ import annotations

from huddle.protocol.embedded import TopicPartition


class RebalanceListener:
    """Subclass and override what you need; every method is awaited by the member.

    Cooperative order in one rebalance: ``on_partitions_lost`` (only if the member fell out
    of the group), ``on_partitions_revoked`` (owned - assigned, only if not empty; a rejoin
    follows), ``on_partitions_assigned`` (assigned - owned, always, possibly empty). Eager:
    ``on_partitions_revoked`` with everything owned before every join, then
    ``on_partitions_assigned`` with the whole new assignment. A member keeps owning — and
    the application keeps processing — its partitions while it rejoins, until a callback
    takes them away.
    """

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        """Commit what was processed for ``revoked``; they move to another member."""

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        """Start processing ``assigned`` (resume from their committed offsets)."""

    async def on_partitions_lost(self, lost: frozenset[TopicPartition]) -> None:
        """Stop processing ``lost`` at once: they may already belong to someone else, and
        commits for them will be refused."""

    async def on_replicas_assigned(
        self, standby: frozenset[TopicPartition], warmup: frozenset[TopicPartition]
    ) -> None:
        """Lag-aware assignors (KIP-441): keep the local state of ``standby`` and ``warmup``
        tasks up to date without processing them; a warm-up that has caught up becomes an
        active task in a later (probing) rebalance. Called after ``on_partitions_assigned``
        whenever either set changes."""
