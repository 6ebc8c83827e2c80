"""OffsetCommit answers, written by hand rather than through kio.

An OffsetCommit answer is an error code per partition asked about, and a consumer commits
about as often as it heartbeats; kio's writer (pure Python, an object per partition) took
about 43% of the Kafka listener's time for a commit of 6 partitions (BENCHMARKS.md,
section 18). The answer of every served version (2-10; 8+ flexible, no tagged fields
written; 10 names each topic by its id) is the bytes kio writes
(``tests/kafka/test_offset_commit_encoding``), without its header: ``translate.Encoded``
carries it to the codec, which frames it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final
from uuid import UUID

from huddle.coordinator.kafka import schemas
from huddle.coordinator.kafka.walk import uvarint
from huddle.protocol.errors import ErrorCode

THROTTLE_FROM: Final = 3  # the throttle time comes first from v3
FLEXIBLE_FROM: Final = 8
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_PARTITION: Final = struct.Struct(">ih")  # index, error code
_NO_THROTTLE: Final = bytes(4)
_NO_TAGS: Final = b"\x00"
_UNKNOWN_SERVER_ERROR: Final = int(ErrorCode.UNKNOWN_SERVER_ERROR)

Partitions = Sequence[tuple[int, int]]  # (index, error code) per partition
Topics = Sequence[tuple[str | UUID, Partitions]]  # each topic by name, or (v10+) by id


def encode(version: int, topics: Topics) -> bytes:
    """The OffsetCommit response body of ``version`` for ``topics``, in their order (an
    error code kio does not know is UNKNOWN_SERVER_ERROR, as ``schemas.kafka_error``
    makes it)."""
    known = schemas.error_codes()
    flexible = version >= FLEXIBLE_FROM
    out = bytearray(_NO_THROTTLE if version >= THROTTLE_FROM else b"")
    out += uvarint(len(topics) + 1) if flexible else _INT32.pack(len(topics))
    pack = _PARTITION.pack
    for name, partitions in topics:
        if isinstance(name, UUID):  # v10+ (flexible)
            out += name.bytes + uvarint(len(partitions) + 1)
        elif flexible:
            raw = name.encode()
            out += uvarint(len(raw) + 1) + raw + uvarint(len(partitions) + 1)
        else:
            raw = name.encode()
            out += _INT16.pack(len(raw)) + raw + _INT32.pack(len(partitions))
        for index, code in partitions:
            out += pack(index, code if code in known else _UNKNOWN_SERVER_ERROR)
            if flexible:
                out += _NO_TAGS
        if flexible:
            out += _NO_TAGS
    if flexible:
        out += _NO_TAGS
    return bytes(out)
