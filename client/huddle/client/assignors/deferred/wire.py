"""The assignment user data of ``cooperative-deferred``: what a follower must know to lead.

``scheduled_rebalance_delay_ms`` may also be a pacing or back-off wait, so the leader tells
every member separately how long lost partitions are still held for, and the partition
count of every topic it assigned. A member that becomes leader later keeps the running
delay, and can tell partitions that existed but are now owned by nobody (lost: their
owner left, perhaps the old leader itself) from new ones, and from partitions in flight: the
ones that round revoked to hand over in the next (``moving``), which are not lost.
"""

from __future__ import annotations

import msgspec

_TAG = b"deferred/3:"
_TAG_2 = b"deferred/2:"  # before ``moving``: still read


class LeaderState(msgspec.Struct, frozen=True, array_like=True):
    lost_delay_ms: int
    partitions: dict[str, int]
    moving: list[tuple[str, int]] = []  # (topic, partition) revoked for a hand-over


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(LeaderState)


def encode_state(
    remaining_ms: int, partitions: dict[str, int], moving: list[tuple[str, int]]
) -> bytes:
    return _TAG + _encoder.encode(LeaderState(remaining_ms, partitions, moving))


def decode_state(user_data: bytes) -> LeaderState | None:
    """The leader's state, or None when the bytes are not ours."""
    for tag in (_TAG, _TAG_2):
        if user_data.startswith(tag):
            try:
                return _decoder.decode(user_data[len(tag) :])
            except msgspec.MsgspecError:
                return None
    return None


# In each member's subscription: the partitions of its last assignment. One it gave up
# since (it dropped the topic before this join) was not lost: its holder is here.
_SUB_TAG = b"deferred-sub/1:"
_held_decoder = msgspec.msgpack.Decoder(list[tuple[str, int]])


def encode_last_assigned(partitions: list[tuple[str, int]]) -> bytes:
    return _SUB_TAG + _encoder.encode(partitions)


def decode_last_assigned(user_data: bytes) -> list[tuple[str, int]]:
    """The partitions a member says it was last assigned ([] when the bytes are not ours)."""
    if not user_data.startswith(_SUB_TAG):
        return []
    try:
        return _held_decoder.decode(user_data[len(_SUB_TAG) :])
    except msgspec.MsgspecError:
        return []
