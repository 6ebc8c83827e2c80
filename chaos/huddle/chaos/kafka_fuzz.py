"""Fuzzed frames for the Kafka listener: valid Kafka requests, then mutated.

``KafkaFrameFuzzer(seed)`` makes frames from one seeded RNG (a run is reproducible from its
seed): a well-formed request of any (API, version) the listener serves (``kafka_frames``),
behind its header, then mutated:

- **bytes**, as for huddle's wire: bit flips, bytes inserted, deleted or replaced, the
  request cut short, a random body;
- **header**: a wrong API key (unknown, or another API's) or version (not served, or
  another served one, so the body is read by the wrong schema);
- **lengths**: a string, bytes or array length made huge (past the end, or near 2^31) or
  negative (-1 is null: a null where none is allowed);
- **flexible versions**: a compact length made a bad varint (longer than 5 bytes, or never
  ending); tagged fields added, well-formed (an unknown tag, which Kafka skips: the
  request is still valid) or not (a count or size past the end);
- **framing**: the size in front of the frame wrong (longer or shorter, zero, huge).

Each frame keeps its mutation's name; ``kafka_oracle`` says, from the bytes alone, what
the listener must answer.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from huddle.chaos.kafka_frames import SERVED_VERSIONS, Encoded, KafkaSeeds, Prefix, encode
from huddle.coordinator.kafka.apis import SERVED, Api
from huddle.coordinator.kafka.walk import uvarint

UNKNOWN_APIS: Final = (999, -1, 4, 22, 67, 71, 32_767)  # none served: 4 LeaderAndIsr ...
_LENGTH_KINDS: Final = frozenset({"int16", "int32", "uvarint"})


@dataclass(frozen=True, slots=True)
class KafkaFuzzed:
    data: bytes  # one whole frame (its size included), as sent
    mutation: str  # what was done to it ("valid" for none)
    api_key: int  # of the request it was made from
    version: int


class KafkaFrameFuzzer:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seeds = KafkaSeeds(self.rng)
        self._ids = 0
        mutations: list[tuple[str, Callable[[Encoded], bytes], int]] = [
            ("valid", lambda e: e.body, 3),
            ("bit-flips", self._flip, 3),
            ("bytes-inserted", self._insert, 1),
            ("bytes-deleted", self._delete, 1),
            ("bytes-replaced", self._replace, 1),
            ("cut-short", self._cut, 2),
            ("random-body", self._random_body, 1),
            ("wrong-api-key", self._api_key, 1),
            ("wrong-version", self._version, 2),
            ("huge-length", self._huge, 2),
            ("negative-length", self._negative, 2),
            ("bad-varint", self._bad_varint, 1),
            ("tags-unknown", self._tags_unknown, 2),
            ("tags-garbage", self._tags_garbage, 2),
        ]
        self._names = [name for name, _, _ in mutations]
        self._funcs = {name: func for name, func, _ in mutations}
        self._weights = [weight for *_, weight in mutations]
        self._apis = sorted({api for api, _ in SERVED_VERSIONS})

    def connection(self) -> None:
        """A new connection: its requests name groups of their own, so a request held by
        one connection's group (a JoinGroup waiting for its members) holds no other. A
        random tag names them: a bit flipped in one names no other connection's group."""
        tag = f"fz-{self.rng.getrandbits(64):016x}"
        odd = self.rng.choice(("\u00fc\u4e2d\x00", "x" * 300))
        self.seeds.groups = (f"{tag}-a", f"{tag}-b", f"{tag}-a", f"{tag}-b", f"{tag}-{odd}")

    def valid(self, api_key: int, version: int) -> Encoded:
        self._ids += 1
        request = self.seeds.request(api_key, version)
        return encode(api_key, version, self._ids, request, "fuzz")

    def next(self, *, soft: bool = False) -> KafkaFuzzed:
        """One fuzzed frame; ``soft``: one the listener answers (valid, perhaps with an
        unknown tagged field) rather than one that ends the connection."""
        rng = self.rng
        api_key = rng.choice(self._apis)
        low, high = SERVED[Api(api_key)]
        version = rng.randint(low, high)
        encoded = self.valid(api_key, version)
        if soft:
            mutation = "valid" if rng.random() < 0.8 or not encoded.flexible else "tags-unknown"
        else:
            mutation = rng.choices(self._names, self._weights)[0]
        body = self._funcs[mutation](encoded)
        if not soft and rng.random() < 0.03:
            return KafkaFuzzed(self._bad_size(body), mutation + "+bad-size", api_key, version)
        return KafkaFuzzed(struct.pack(">i", len(body)) + body, mutation, api_key, version)

    def frame(self, api_key: int, version: int) -> bytes:
        """A valid frame of that API and version."""
        body = self.valid(api_key, version).body
        return struct.pack(">i", len(body)) + body

    # --- the mutations ----------------------------------------------------------------

    def _bad_size(self, body: bytes) -> bytes:
        n = len(body)
        size = self.rng.choice((0, n + 1, n + 100, max(n - 1, 1), 2**31 - 1, 2**32 - 1))
        return struct.pack(">I", size) + body

    def _positions(self, body: bytes) -> list[int]:
        return [self.rng.randrange(len(body)) for _ in range(self.rng.randint(1, 6))]

    def _flip(self, e: Encoded) -> bytes:
        data = bytearray(e.body)
        for i in self._positions(e.body):
            data[i] ^= 1 << self.rng.randrange(8)
        return bytes(data)

    def _insert(self, e: Encoded) -> bytes:
        data = bytearray(e.body)
        for i in self._positions(e.body):
            data[i:i] = self.rng.randbytes(self.rng.randint(1, 4))
        return bytes(data)

    def _delete(self, e: Encoded) -> bytes:
        data = bytearray(e.body)
        for _ in range(self.rng.randint(1, 4)):
            del data[self.rng.randrange(len(data))]
        return bytes(data) or b"\x00"

    def _replace(self, e: Encoded) -> bytes:
        data = bytearray(e.body)
        for i in self._positions(e.body):
            data[i] = self.rng.choice((0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE))
        return bytes(data)

    def _cut(self, e: Encoded) -> bytes:
        return e.body[: self.rng.randrange(1, len(e.body))]

    def _random_body(self, e: Encoded) -> bytes:
        junk = self.rng.randbytes(self.rng.randint(1, 64))
        return e.body[:8] + junk if self.rng.random() < 0.5 else junk  # behind a real header

    def _api_key(self, e: Encoded) -> bytes:
        key = self.rng.choice((*UNKNOWN_APIS, *self._apis))
        return struct.pack(">h", key) + e.body[2:]

    def _version(self, e: Encoded) -> bytes:
        api_key = struct.unpack_from(">h", e.body)[0]
        low, high = SERVED[Api(api_key)]
        version = self.rng.choice((low - 1, high + 1, -1, 32_767, self.rng.randint(low, high)))
        return e.body[:2] + struct.pack(">h", version) + e.body[4:]

    def _lengths(self, e: Encoded) -> list[Prefix]:
        return [p for p in e.prefixes if p.kind in _LENGTH_KINDS]

    def _put(self, e: Encoded, prefix: Prefix, data: bytes) -> bytes:
        return e.body[: prefix.offset] + data + e.body[prefix.offset + prefix.width :]

    def _huge(self, e: Encoded) -> bytes:
        prefixes = self._lengths(e)
        if not prefixes:
            return self._flip(e)
        prefix = self.rng.choice(prefixes)
        rng = self.rng
        if prefix.kind == "int16":
            data = struct.pack(">h", rng.choice((32_767, len(e.body))))
        elif prefix.kind == "int32":
            data = struct.pack(">i", rng.choice((2**31 - 1, 2**28, len(e.body))))
        else:
            data = uvarint(rng.choice((2**31, 2**32 - 1, 2**28, len(e.body))))
        return self._put(e, prefix, data)

    def _negative(self, e: Encoded) -> bytes:
        prefixes = self._lengths(e)
        if not prefixes:
            return self._flip(e)
        prefix = self.rng.choice(prefixes)
        if prefix.kind == "int16":
            data = struct.pack(">h", self.rng.choice((-1, -2, -32_768)))
        elif prefix.kind == "int32":
            data = struct.pack(">i", self.rng.choice((-1, -2, -(2**31))))
        else:
            data = b"\x00"  # compact: null
        return self._put(e, prefix, data)

    def _bad_varint(self, e: Encoded) -> bytes:
        prefixes = [p for p in e.prefixes if p.kind in ("uvarint", "tags")]
        if not prefixes:
            return self._huge(e)
        prefix = self.rng.choice(prefixes)
        choice = self.rng.random()
        if choice < 0.4:
            return self._put(e, prefix, b"\xff" * self.rng.randint(5, 10) + b"\x01")
        if choice < 0.7:  # a varint that never ends
            return e.body[: prefix.offset] + b"\x80" * self.rng.randint(1, 8)
        return self._put(e, prefix, b"\x80" * self.rng.randint(1, 4) + b"\x00")  # padded

    def _empty_tags(self, e: Encoded) -> list[Prefix]:
        return [p for p in e.prefixes if p.kind == "tags" and e.body[p.offset] == 0]

    def _tags_unknown(self, e: Encoded) -> bytes:
        """An unknown tagged field, well-formed: Kafka skips it."""
        prefixes = self._empty_tags(e)
        if not prefixes:
            return e.body
        rng = self.rng
        data = rng.randbytes(rng.choice((0, 1, 7, 200)))
        tagged = uvarint(rng.choice((7, 100, 10_000))) + uvarint(len(data)) + data
        return self._put(e, rng.choice(prefixes), b"\x01" + tagged)

    def _tags_garbage(self, e: Encoded) -> bytes:
        prefixes = self._empty_tags(e)
        if not prefixes:
            return self._huge(e)
        rng = self.rng
        choice = rng.random()
        if choice < 0.3:  # more fields than follow
            data = uvarint(rng.choice((2, 1_000, 2**31)))
        elif choice < 0.6:  # a field's size past the end
            data = b"\x01" + uvarint(9) + uvarint(rng.choice((len(e.body), 2**31)))
        elif choice < 0.8:  # a known tag (0) with garbage in it
            data = b"\x01\x00" + uvarint(3) + b"\xff\xff\xff"
        else:  # the same tag twice
            data = b"\x02" + (uvarint(9) + b"\x01\x00") * 2
        return self._put(e, rng.choice(prefixes), data)
