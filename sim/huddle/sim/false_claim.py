"""A faulty client's JoinGroup: the ``false-claim`` fault.

The member rejoins and its subscription claims a partition that another member owns, in
that member's generation (as a client with a bug, or one restored from a copy of another's
state, would). The coordinator and the leader must keep that claim from handing the
partition to two members at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from huddle.protocol.embedded import decode_subscription, encode, grouped
from huddle.protocol.messages import JoinGroupRequest
from huddle.sim.application import GROUP_ID

if TYPE_CHECKING:
    from huddle.sim.process import MemberProcess


def false_claim(member: MemberProcess, request: JoinGroupRequest) -> JoinGroupRequest:
    """``request`` with a claim on a partition a current member of the group owns."""
    mine = member.core.owned_generation if member.core.owned else None
    # Only a current member's claim is copied: the generation of a member the group
    # dropped (or one from before a coordinator restart, when generations began
    # again) is not one a client of this group could hold.
    core = member.world.host.core
    group = core.groups.get(GROUP_ID) if core is not None else None
    current = group.members if group is not None else {}
    victims = sorted(
        (tp, m.core.owned_generation)
        for m in member.world.members
        if m is not member and m.alive and m.core.member_id in current
        for tp in m.core.owned
        if mine is None or m.core.owned_generation == mine
        if tp not in member.core.owned
    )
    if not victims:
        return request
    tp, generation = member.world.rng.choice(victims)
    member.core.joined_claims |= {tp}  # the client believes its own claim
    member.world.trace(
        member, "false claim", partition=f"{tp.topic}-{tp.partition}", generation=generation
    )
    protocols = []
    for protocol in request.protocols:
        sub = decode_subscription(protocol.metadata)
        lie = msgspec.structs.replace(
            sub, owned_partitions=grouped(sub.owned | {tp}), generation=generation
        )
        protocols.append(msgspec.structs.replace(protocol, metadata=encode(lie)))
    return msgspec.structs.replace(request, protocols=protocols)
