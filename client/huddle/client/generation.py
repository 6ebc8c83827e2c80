"""The generation of the group a member is in, as that member knows it, and the offset
commit a member makes in it (``offset_commit``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from huddle.protocol.messages import (
    NO_GENERATION,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
)


@dataclass(frozen=True, slots=True)
class Generation:
    """One generation of the group as the member was told it in a JoinGroup answer: its
    number, the member id the member holds in it, the embedded protocol the group chose, and
    which of the member's JoinGroup answers told it (``join``).

    An answer, a notice, a commit refusal or a session expiry concerns the member only if it
    is about the generation the member is in now. Comparing the whole value, not the number
    alone, keeps an answer from before a coordinator restart (when numbers start again at 1
    and the member has a new id) from being taken for one about the current generation; and
    ``join`` keeps one from a stay the member has left from being taken for one about a later
    stay in the same generation: a member that fell out (its session ran out while it could
    not reach the coordinator, say) and rejoined with an unchanged subscription is answered
    with the very generation it held, if the coordinator still counted it in.
    """

    id: int = NO_GENERATION
    member_id: str = ""
    protocol: str | None = None
    join: int = 0  # the member's count of JoinGroup answers when this one came; 0: none

    @property
    def joined(self) -> bool:
        """Whether the member is in a generation (not only holding a member id)."""
        return self.id != NO_GENERATION

    def left(self) -> Generation:
        """No generation any more; the member id is kept, to rejoin with (Kafka does so
        for a member that falls out with ILLEGAL_GENERATION or a lost session)."""
        return Generation(member_id=self.member_id)


NOT_JOINED = Generation()


def offset_commit(
    group_id: str,
    generation: int,
    member_id: str,
    instance_id: str | None,
    chunk: Mapping[str, Sequence[tuple[int, int]]],
    metadata: str | None,
) -> OffsetCommitRequest:
    """An OffsetCommit of ``chunk`` (topic -> [(partition, offset)]) by ``member_id`` in
    ``generation`` (a consumer-protocol member's: its member epoch)."""
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        topics=[
            OffsetCommitTopic(
                name=topic,
                partitions=[
                    OffsetCommitPartition(partition=p, offset=offset, metadata=metadata)
                    for p, offset in partitions
                ],
            )
            for topic, partitions in chunk.items()
        ],
    )
