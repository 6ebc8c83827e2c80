"""One member reconciled toward its target assignment (Kafka's CurrentAssignmentBuilder).

Given the member, the target assignment epoch, what the target gives it, what it says it
owns, and who owns each partition now, ``reconcile`` returns the member's next state:

- What the member has and the target no longer gives it must be revoked first. While the
  member still owns any of it (or did not say what it owns), it stays at its epoch in
  ``UNREVOKED_PARTITIONS`` with those partitions pending revocation.
- Then it moves to the target epoch and is given every target partition nobody else owns.
  Partitions still owned by another member (pending revocation there) are held back:
  ``UNRELEASED_PARTITIONS`` until a later heartbeat finds them free.

A partition is only ever added to a member's assignment when no other member owns it: this
is the rule that keeps two members from owning one partition at once.

A topic deleted and created again under its name (``target_ids``, name -> id, differs from
the member's ``topic_ids``) is another topic: every partition the member holds of the old
one is revoked, even one the target gives it again, before it is given any of the new one.
Ownership is by name and number (``owner_of``), so a partition of the new topic is given to
no member while any member still owns the old topic's partition of that number. Kafka keys
partitions by topic id and would not wait for that; huddle's members name partitions by
topic name, and to them the two are one ``name-number`` that is never owned twice at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from huddle.coordinator.consumer.member import ConsumerMember, MemberState, intersects
from huddle.coordinator.consumer.messages import EMPTY, Assignment

# (topic, partition) -> the member id owning it now, or None
OwnerOf = Callable[[str, int], str | None]


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owner_of: OwnerOf,
    target_ids: Mapping[str, str] | None = None,
) -> ConsumerMember:
    """The member's next state (the same object when nothing changes). ``target_ids``: the
    id of each target topic (name -> id; a name not in it: the one the member holds)."""
    state = member.state
    if state is MemberState.STABLE and member.member_epoch == target_epoch:
        return member  # reconciled already
    if state is MemberState.UNREVOKED_PARTITIONS and intersects(owned, member.pending_revocation):
        return member  # it still owns what it must give up first

    me = member.member_id
    current = member.assigned
    held_ids = member.topic_ids
    target_ids = target_ids or {}
    kept: dict[str, frozenset[int]] = {}
    revoking: dict[str, frozenset[int]] = {}
    adding: dict[str, frozenset[int]] = {}
    unreleased = False
    for topic in target.keys() | current.keys():
        wanted = target.get(topic, frozenset())
        had = current.get(topic, frozenset())
        held, now = held_ids.get(topic), target_ids.get(topic)
        # the topic was deleted and created again: nothing of the old one is kept
        keep = frozenset() if held and now and held != now else had & wanted
        if keep:
            kept[topic] = keep
        if had - keep:
            revoking[topic] = had - keep
        missing = wanted - keep
        if missing:
            free = frozenset(p for p in missing if owner_of(topic, p) in (None, me))
            if len(free) < len(missing):
                unreleased = True
            if free:
                adding[topic] = free

    if revoking and intersects(owned, revoking):
        # Give up first: the member stays at its epoch until it has.
        return member.at_epoch(
            member.member_epoch,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=kept,
            pending_revocation=revoking,
            topic_ids=_ids(kept, target_ids, held_ids, revoking),
        )
    assigned: Assignment = kept
    if adding:
        merged = dict(kept)
        for topic, partitions in adding.items():
            merged[topic] = merged.get(topic, frozenset()) | partitions
        assigned = merged
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    updated = member.at_epoch(
        target_epoch,
        state=state,
        assigned=assigned,
        pending_revocation=EMPTY,
        topic_ids=_ids(assigned, target_ids, held_ids, EMPTY),
    )
    return member if updated == member else updated


def _ids(
    assigned: Assignment,
    target_ids: Mapping[str, str],
    held_ids: Mapping[str, str],
    revoking: Assignment,
) -> dict[str, str]:
    """The ids of the topics of a member's partitions: the target's for what it is
    assigned, the one it held for what it must revoke (a name without one: left out)."""
    ids: dict[str, str] = {}
    for topic in revoking:
        if topic in held_ids:
            ids[topic] = held_ids[topic]
    for topic in assigned:
        topic_id = target_ids.get(topic) or held_ids.get(topic)
        if topic_id:
            ids[topic] = topic_id
    return ids
