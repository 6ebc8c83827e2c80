"""Known bugs that can be planted back, to prove the simulator finds them.

``huddle sim run --plant NAME`` (and the simulator's tests) plant one for a run; nothing
else does. Production code consults no switch: each safety rule is a part its owner is
given with the correct default (``ClaimRules`` for the assignors, ``Liveness`` for the
member driver, the leader's round check for the member core), and the simulator gives
the faulty parts below to the members of a run that plants them. Every name is a safety
rule huddle keeps, turned off:

- ``commit-fencing-off``: the coordinator accepts commits from any generation of a member;
- ``tie-handed-out``: two claims on a partition tied in one generation no longer cancel out,
  the first claimant keeps it;
- ``session-from-receive-time``: zombie safety counts a member's session from when a
  heartbeat's answer arrived instead of when the heartbeat was sent;
- ``leader-check-skipped``: the cooperative leader no longer withholds a partition another
  member still owns (the sticky assignors' withholding and the leader's check of the result
  are both skipped), so it moves in one round;
- ``heartbeats-paused-in-callbacks``: a member stops heartbeating while its callbacks run;
- ``consumer-released-unchecked`` (the consumer protocol): the coordinator gives a member a
  partition its previous owner is still revoking (neither the reconciliation's check nor
  the group's owner table stops it);
- ``consumer-fenced-keeps`` (the consumer protocol): a member answered FENCED_MEMBER_EPOCH or
  UNKNOWN_MEMBER_ID rejoins, but keeps what it owned (no ``on_partitions_lost``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from huddle.client.assignors._rules import ClaimRules
from huddle.client.assignors.base import GroupAssignment, MemberSubscription
from huddle.client.consumer_core import JOIN_EPOCH, REJOIN_CODES, ConsumerCore, Reconcile
from huddle.client.heartbeat import Liveness
from huddle.client.leader import RoundCheck, check_cooperative
from huddle.coordinator.consumer import ConsumerGroup, ConsumerMember
from huddle.protocol.errors import InvalidArgumentError
from huddle.protocol.messages import ConsumerHeartbeatResponse, ErrorResponse
from huddle.sim import faulty_offsets as coordinator_switch

BUGS = frozenset(
    {
        "commit-fencing-off",
        "tie-handed-out",
        "session-from-receive-time",
        "leader-check-skipped",
        "heartbeats-paused-in-callbacks",
        "consumer-released-unchecked",
        "consumer-fenced-keeps",
    }
)
COORDINATOR_BUGS = frozenset({"commit-fencing-off"})


def checked(names: Iterable[str]) -> frozenset[str]:
    wanted = frozenset(names)
    unknown = wanted - BUGS
    if unknown:
        raise InvalidArgumentError(f"no such planted bug: {sorted(unknown)}; known: {sorted(BUGS)}")
    return wanted


@contextmanager
def planting(names: Iterable[str]) -> Iterator[None]:
    """Plant the coordinator's bugs among ``names`` for the duration of the block (the
    members' bugs are parts: ``member_parts``)."""
    with coordinator_switch.planted_during(checked(names) & COORDINATOR_BUGS):
        yield


class FaultyClaims(ClaimRules):
    """Claim rules with ``tie-handed-out`` and/or ``leader-check-skipped`` planted."""

    __slots__ = ("hand_out_ties", "withhold")

    def __init__(self, *, hand_out_ties: bool, withhold: bool) -> None:
        self.hand_out_ties = hand_out_ties
        self.withhold = withhold

    def tie(self, first: int) -> int:
        return first if self.hand_out_ties else super().tie(first)

    def dealt(self, dealt: list[int], owner: list[int]) -> list[int]:
        return super().dealt(dealt, owner) if self.withhold else dealt


class FaultyLiveness(Liveness):
    """Liveness with ``session-from-receive-time`` and/or ``heartbeats-paused-in-callbacks``."""

    __slots__ = ("from_receipt", "paused")

    def __init__(self, *, from_receipt: bool, paused: bool) -> None:
        self.from_receipt = from_receipt
        self.paused = paused

    def session_proof(self, sent_at: float, received_at: float) -> float:
        return received_at if self.from_receipt else sent_at

    def paused_in_callbacks(self) -> bool:
        return self.paused


def no_round_check(
    subscriptions: Mapping[str, MemberSubscription], result: GroupAssignment
) -> None:
    """``leader-check-skipped``: the leader hands out whatever its assignor made."""


class UncheckedGroup(ConsumerGroup):
    """``consumer-released-unchecked``: a partition pending revocation counts as nobody's,
    and a member given one takes it over in the owner table (no ``DoubleOwnerError``)."""

    def owner_of(self, topic: str, partition: int) -> str | None:
        owner = super().owner_of(topic, partition)
        member = None if owner is None else self.members.get(owner)
        if member is not None and partition in member.pending_revocation.get(topic, ()):
            return None
        return owner

    def _claim(self, member: ConsumerMember, undo: ConsumerMember | None) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic, partitions in assignment.items():
                owners = self.owners.setdefault(topic, {})
                for partition in partitions:
                    owners[partition] = member.member_id


class FencedKeepsCore(ConsumerCore):
    """``consumer-fenced-keeps``: a fenced member rejoins and keeps what it owned."""

    def answered(
        self, answer: ConsumerHeartbeatResponse | ErrorResponse, sent_ms: float | None = None
    ) -> Reconcile:
        if answer.error_code in REJOIN_CODES:
            self.epoch = JOIN_EPOCH
            self.full = True
            return Reconcile(again=True)
        return super().answered(answer, sent_ms)


@dataclass(frozen=True, slots=True)
class MemberParts:
    """The parts a simulated member is built with: the correct ones unless a bug is planted
    (and, for the consumer protocol, the coordinator's group)."""

    claim_rules: ClaimRules | None = None  # None: the assignor's own
    liveness: Liveness | None = None  # None: the driver's own
    round_check: RoundCheck = check_cooperative
    consumer_core: type[ConsumerCore] = ConsumerCore
    consumer_group: type[ConsumerGroup] | None = None  # None: the coordinator makes its own


def member_parts(names: Iterable[str]) -> MemberParts:
    """The member parts of a run that plants ``names``."""
    bugs = checked(names)
    ties, skipped = "tie-handed-out" in bugs, "leader-check-skipped" in bugs
    receipt = "session-from-receive-time" in bugs
    paused = "heartbeats-paused-in-callbacks" in bugs
    return MemberParts(
        claim_rules=FaultyClaims(hand_out_ties=ties, withhold=not skipped)
        if ties or skipped
        else None,
        liveness=FaultyLiveness(from_receipt=receipt, paused=paused) if receipt or paused else None,
        round_check=no_round_check if skipped else check_cooperative,
        consumer_core=FencedKeepsCore if "consumer-fenced-keeps" in bugs else ConsumerCore,
        consumer_group=UncheckedGroup if "consumer-released-unchecked" in bugs else None,
    )
