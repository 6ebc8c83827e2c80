"""A member process on the consumer group protocol (KIP-848), as the simulator runs it.

Its clock, timers, pauses and restarts are ``MemberProcess``'s; each start builds the
member library's ``ConsumerCore`` (a faulty one if a planted bug says so) with a member id
of its own, as ``Member(group_protocol="consumer")`` makes one, and hands it to
``huddle.sim.consumer_runtime.ConsumerRuntime``. The application on top processes what its
callbacks gave it, and what a running ``on_partitions_revoked`` is finishing; its callbacks
take up to ``callback_ms`` (a slow revocation: the fault's duration). The consumer protocol
member commits nothing (``Member.commit`` is not served on it yet).
"""

from __future__ import annotations

import uuid

from huddle.protocol.embedded import TopicPartition
from huddle.protocol.messages import ServerFrame
from huddle.sim.application import GROUP_ID
from huddle.sim.consumer_runtime import ConsumerRuntime
from huddle.sim.network import Link
from huddle.sim.process import MemberProcess


class ConsumerProcess(MemberProcess):
    def _build(self) -> None:
        world = self.world
        config = world.config
        self.consumer = world.parts.consumer_core(
            group_id=GROUP_ID,
            topics=[world.topic],
            instance_id=f"instance-{self.index}" if self.static else None,
            rebalance_timeout_ms=config.rebalance_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            member_id=str(uuid.UUID(bytes=self.token)),  # its own, drawn from the seed
        )
        self.owned: set[TopicPartition] = set()  # what its callbacks gave it
        self.revoking: frozenset[TopicPartition] = frozenset()  # a revocation running
        self.beats = ConsumerRuntime(self)
        self.beats.connect()

    def _stopped(self) -> None:
        self.beats.crashed()
        self.owned = set()
        self.revoking = frozenset()

    # --- the application's callbacks ----------------------------------------------------

    def callback(self, name: str, partitions: frozenset[TopicPartition]) -> float:
        """``name`` begins: what the application does; how long it takes."""
        duration = self.world.callback_ms(name)
        if name == "on_partitions_revoked":
            self.revoking = partitions  # finished until the callback returns
            self.owned -= partitions
        elif name == "on_partitions_lost":
            self.owned -= partitions  # gone already: nothing more is processed
        else:
            self.owned |= partitions
        return duration

    def callback_done(self, name: str, partitions: frozenset[TopicPartition]) -> None:
        self.revoking = frozenset()

    # --- what the checker reads ---------------------------------------------------------

    def processing(self) -> frozenset[TopicPartition]:
        if not self.alive or self.paused:
            return frozenset()
        return frozenset(self.owned) | self.revoking

    def idle(self) -> bool:
        """No callback runs and none is due: between reconciliations."""
        beats = self.beats
        return self.alive and beats.listening is None and not beats.steps

    @property
    def stable(self) -> bool:
        beats = self.beats
        return (
            self.alive
            and not self.paused
            and beats.connected
            and beats.settled
            and not beats.fenced
            and self.consumer.epoch > 0
            and self.idle()
        )

    def claim_falsely(self) -> None:
        """A fault: its next heartbeat claims a partition another member processes."""
        if self.alive:
            self.beats.false_claim = True

    # --- what the network calls ---------------------------------------------------------

    @property
    def link(self) -> Link | None:
        return self.beats.link

    def link_up(self, link: Link) -> None:
        self.run(self.epoch, self.beats.link_up, (link,))

    def link_down(self, link: Link, reason: str) -> None:
        self.run(self.epoch, self.beats.link_down, (link, reason))

    def frame_arrived(self, link: Link, frame: ServerFrame) -> None:
        self.run(self.epoch, self.beats.frame_arrived, (link, frame))
