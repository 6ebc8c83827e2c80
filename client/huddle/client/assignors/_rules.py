"""The rules claims on one partition settle by, as a part the assignors are given.

``ClaimRules`` is the correct behaviour, and every assignor uses it unless given another
(``Assignor.claim_rules``): the simulator substitutes faulty rules to prove it finds what
they break (``huddle.sim.planted``). Nothing here is a switch: production code never
consults which rules it runs.
"""

from __future__ import annotations

NOBODY = -1  # no member owns the partition
CONTESTED = -2  # two claims tied at the highest generation: nobody owns it


class ClaimRules:
    """Who owns a partition claimed at one generation twice, and what a cooperative round
    may hand out."""

    __slots__ = ()

    def tie(self, first: int) -> int:
        """The owner of a partition that another member claims at the generation of the
        ``first`` claimant's claim: nobody (it is contested); both claimants revoke it."""
        return CONTESTED

    def dealt(self, dealt: list[int], owner: list[int]) -> list[int]:
        """What a cooperative round hands a member of the partitions ``dealt`` to it: only
        those no member owns by right (``owner``); the others are withheld until whoever
        claims them has revoked them (Kafka's partitionsTransferringOwnership)."""
        return [pid for pid in dealt if owner[pid] == NOBODY]


CLAIM_RULES = ClaimRules()
