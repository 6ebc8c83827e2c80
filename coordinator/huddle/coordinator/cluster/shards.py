"""Which shard a group belongs to.

The same function as Kafka's ``GroupMetadataManager.partitionFor``: Java's
``String.hashCode`` of the group id (over its UTF-16 code units, in 32-bit arithmetic), its
absolute value (Kafka's ``Utils.abs``: 0 for the one value with none, ``Integer.MIN_VALUE``),
modulo the shard count. A group therefore lands on the shard whose number is the
``__consumer_offsets`` partition Kafka would use with as many partitions.
"""

from __future__ import annotations

from huddle.protocol.errors import InvalidArgumentError

_MASK = 0xFFFFFFFF


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    as a signed 32-bit integer."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


def shard_of(group_id: str, shards: int) -> int:
    """The shard of ``group_id`` among ``shards`` (at least 1)."""
    if shards < 1:
        raise InvalidArgumentError(f"the shard count must be at least 1, not {shards}")
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % shards
