"""Fuzzed frames for the coordinator: valid client frames, then mutated.

``FrameFuzzer(seed)`` makes frames from one seeded RNG (a run is reproducible from its seed):
random but valid ``Handshake`` and ``Call`` frames of every request type (values drawn from
the message types themselves, within their bounds), then mutated at one of three levels:

- **bytes**: bit flips, bytes inserted, deleted or replaced, the body cut short or replaced;
- **msgpack**: the decoded tree changed (a value of the wrong type, a key dropped or added,
  the ``type`` tag changed, huge or negative numbers, a container nested deep) and encoded
  again, or raw msgpack the decoder must refuse (invalid UTF-8, nesting 100,000 deep,
  containers that claim more items than follow, extension types);
- **framing**: the length header wrong (longer or shorter than the body, zero, huge).

Each frame comes with its ``Mutation`` name, so a run can say which kinds it tried.
"""

from __future__ import annotations

import random
import struct
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import msgspec.inspect as mi

from huddle.protocol.errors import InvalidArgumentTypeError
from huddle.protocol.framing import frame_header
from huddle.protocol.messages import PROTOCOL_VERSION, Call, Handshake, Message, Request

GROUPS: Final = ("fuzz", "fuzz-2", "", "g")  # never the bystander's group
TOPICS: Final = ("fuzz-t", "t", "", "x" * 250)
REQUEST_TYPES: Final[tuple[type[Message], ...]] = typing.get_args(Request)


@dataclass(frozen=True, slots=True)
class Fuzzed:
    data: bytes  # one whole frame (header included), as sent
    mutation: str  # what was done to it ("valid" for none)
    correlation_id: int | None  # of the call it was made from, if it was a call


class FrameFuzzer:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self._encoder = msgspec.msgpack.Encoder()
        self._ids = 0
        mutations: list[tuple[str, Callable[[bytes], bytes], int]] = [
            ("valid", lambda body: body, 3),
            ("bit-flips", self._flip, 4),
            ("bytes-inserted", self._insert, 2),
            ("bytes-deleted", self._delete, 2),
            ("bytes-replaced", self._replace, 2),
            ("cut-short", self._cut, 2),
            ("random-body", self._random_body, 1),
            ("tree-changed", self._tree, 6),
            ("request-changed", self._request_tree, 0),
            ("raw-msgpack", self._raw, 2),
        ]
        self._names = [name for name, _, _ in mutations]
        self._funcs = {name: func for name, func, _ in mutations}
        self._weights = [weight for *_, weight in mutations]

    # --- valid frames ------------------------------------------------------------------

    def handshake(self) -> bytes:
        return self._frame(
            self._encoder.encode(Handshake(version=PROTOCOL_VERSION, client_id="fuzz"))
        )

    def call(self, request: Request, correlation_id: int) -> bytes:
        return self._frame(
            self._encoder.encode(Call(correlation_id=correlation_id, request=request))
        )

    def valid_request(self) -> Request:
        kind = self.rng.choice(REQUEST_TYPES)
        value: Request = self._value(mi.type_info(kind))
        return value

    def _value(self, info: mi.Type) -> Any:
        rng = self.rng
        match info:
            case mi.StructType(cls=cls, fields=fields):
                chosen = [f for f in fields if f.required or rng.random() < 0.9]
                return cls(**{f.name: self._value(f.type) for f in chosen})
            case mi.UnionType(types=types):
                return self._value(rng.choice(types))
            case mi.ListType(item_type=item):
                return [self._value(item) for _ in range(rng.choice((0, 1, 1, 2, 3, 8)))]
            case mi.StrType(max_length=bound):
                text = rng.choice((*GROUPS, *TOPICS, "range", "consumer", "m-1"))
                return text if bound is None else text[:bound]
            case mi.IntType():
                return rng.choice((0, 1, -1, 2, 7, 100, 2**31, -(2**63), 2**63 - 1))
            case mi.BytesType():
                return rng.randbytes(rng.choice((0, 1, 8, 40)))
            case mi.BoolType():
                return rng.random() < 0.5
            case mi.NoneType():
                return None
            case _:  # pragma: no cover - every field type of a request is above
                raise InvalidArgumentTypeError(f"no values for {info!r}")

    # --- fuzzed frames -----------------------------------------------------------------

    def next(self, *, soft: bool = False) -> Fuzzed:
        """One fuzzed frame; ``soft``: valid msgpack only, a frame the coordinator answers
        (valid, or a changed tree) rather than one that ends the connection."""
        rng = self.rng
        self._ids += 1
        correlation_id = self._ids
        request = self.valid_request()
        body = self._encoder.encode(Call(correlation_id=correlation_id, request=request))
        if soft:
            mutation = "valid" if rng.random() < 0.3 else "request-changed"
        else:
            mutation = rng.choices(self._names, self._weights)[0]
        body = self._funcs[mutation](body) or b"\x90"
        if not soft and rng.random() < 0.03:
            mutation += "+bad-length"
            return Fuzzed(self._bad_length(body), mutation, correlation_id)
        return Fuzzed(self._frame(body), mutation, correlation_id)

    @staticmethod
    def _frame(body: bytes) -> bytes:
        return frame_header(len(body)) + body

    def _bad_length(self, body: bytes) -> bytes:
        rng = self.rng
        length = rng.choice((0, len(body) + 1, max(len(body) - 1, 1), 2**31 - 1, 2**32 - 1))
        return struct.pack(">I", length) + body

    def _positions(self, body: bytes) -> list[int]:
        return [self.rng.randrange(len(body)) for _ in range(self.rng.randint(1, 8))]

    def _flip(self, body: bytes) -> bytes:
        data = bytearray(body)
        for i in self._positions(body):
            data[i] ^= 1 << self.rng.randrange(8)
        return bytes(data)

    def _insert(self, body: bytes) -> bytes:
        data = bytearray(body)
        for i in self._positions(body):
            data[i:i] = self.rng.randbytes(self.rng.randint(1, 4))
        return bytes(data)

    def _delete(self, body: bytes) -> bytes:
        data = bytearray(body)
        for _ in range(self.rng.randint(1, 4)):
            if len(data) > 1:
                del data[self.rng.randrange(len(data))]
        return bytes(data)

    def _replace(self, body: bytes) -> bytes:
        data = bytearray(body)
        for i in self._positions(body):
            data[i] = self.rng.choice((0x00, 0xC0, 0xC1, 0xFF, 0x7F, 0x80, 0xDC, 0xDD, 0xDF, 0xD9))
        return bytes(data)

    def _cut(self, body: bytes) -> bytes:
        return body[: self.rng.randrange(1, len(body))] if len(body) > 1 else body

    def _random_body(self, body: bytes) -> bytes:
        return self.rng.randbytes(self.rng.randint(1, 64))

    def _tree(self, body: bytes) -> bytes:
        tree = msgspec.msgpack.decode(body)
        for _ in range(self.rng.randint(1, 3)):
            tree = self._mutate(tree, depth=0)
        try:
            return self._encoder.encode(tree)
        except (TypeError, OverflowError):  # a value msgpack cannot hold: the bytes then
            return self._flip(body)

    def _request_tree(self, body: bytes) -> bytes:
        """The request inside the call changed; the call itself (its correlation id) stays
        readable, so the coordinator answers it and the connection goes on."""
        tree = msgspec.msgpack.decode(body)
        for _ in range(self.rng.randint(1, 3)):
            tree["request"] = self._mutate(tree["request"], depth=1)
        try:
            return self._encoder.encode(tree)
        except (TypeError, OverflowError):
            return body

    def _mutate(self, node: Any, depth: int) -> Any:
        rng = self.rng
        if isinstance(node, dict) and node and (depth < 3 or rng.random() < 0.5):
            key = rng.choice(list(node))
            action = rng.random()
            if action < 0.6:
                node[key] = self._mutate(node[key], depth + 1)
            elif action < 0.75:
                del node[key]
            elif action < 0.9:
                node[rng.choice(("extra", "type", "request", "correlation_id", "version"))] = (
                    self._odd_value()
                )
            else:
                node["type"] = rng.choice(("heartbeat", "call", "handshake", "nope", "", "Call"))
            return node
        if isinstance(node, list) and node and rng.random() < 0.7:
            i = rng.randrange(len(node))
            node[i] = self._mutate(node[i], depth + 1)
            return node
        return self._odd_value()

    def _odd_value(self) -> Any:
        rng = self.rng
        return rng.choice(
            (
                None,
                True,
                -1,
                2**64 - 1,
                -(2**63),
                1.5,
                float("nan"),
                "",
                "x" * rng.choice((1, 256, 70_000)),
                b"\x00\xff",
                [],
                {},
                [[[[[]]]]],
                {"type": "call"},
                msgspec.msgpack.Ext(rng.randrange(-128, 128), b"ext"),
            )
        )

    def _raw(self, body: bytes) -> bytes:
        rng = self.rng
        return rng.choice(
            (
                b"\x81\xa1a" * 100_000 + b"\xc0",  # a map nested 100,000 deep
                b"\x91" * 100_000 + b"\xc0",  # an array nested as deep
                b"\x82\xa4type\xa4\xff\xfe\xfd\xfc\xa7version\x01",  # the tag not UTF-8
                b"\x83\xa4type\xa9handshake\xa7version\x01\xa9client_id\xa2\xff\xfe",
                b"\xdd\xff\xff\xff\xff\xc0",  # an array claiming 4 billion items
                b"\xdf\xff\xff\xff\xff\xc0",  # a map claiming as many
                b"\xdb\xff\xff\xff\xff" + b"a" * 8,  # a string claiming 4 GiB
                b"\xc7\x03\x05abc",  # an extension type
                body + b"\xc0",  # trailing bytes
            )
        )
