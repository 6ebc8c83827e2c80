"""The plug point of a wire: what the server needs of a wire to serve its connections.

A wire is how bytes on a listener's connections become the core's requests and how the
core's answers become bytes again. The server does everything else the same for every wire:
intake and fairness (``huddle.coordinator.intake``), screening and the core
(``huddle.coordinator.requests``), answers held until their changes are kept
(``huddle.coordinator.held``), the timers and sweeps (``huddle.coordinator.sweeps``).

A wire brings three things, all per connection:

- a ``Framing``: bytes read -> whole frame bodies (a length prefix, a size limit);
- a ``Codec``: the core's frames (``Reply``, notices) -> bytes in the write buffer;
- ``take``: one frame body -> the core's request (a ``Call``: a correlation id and one
  of ``huddle.protocol.messages``' requests), or None when the wire handled the frame
  itself (its handshake, an authentication step, a frame it could not read).

And it says whether its clients need their answers in request order (``in_order``), and
which disconnect grace its connections' members get (``disconnect_grace_ms``).
huddle's own clients match answers by correlation id, and the core answers some requests
later than others (a JoinGroup waits for the rest of its group, a commit for the data
dir). Kafka's clients read answers in the order they sent the requests: on such a wire a
connection's requests are taken one at a time, the next once the previous one is answered
(as Kafka's broker mutes a connection while a request is in flight), so the core's
answers and the wire's own go out in request order.

huddle's own msgpack wire (``huddle.coordinator.huddle_wire``) is the first; see
docs/coordinator.md ("The server and its wires") for what a second one plugs in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from huddle.protocol.errors import CorruptMessageError, ErrorCode, MessageTooLargeError
from huddle.protocol.messages import Call, ServerFrame

ConnT = TypeVar("ConnT", contravariant=True)


class Framing(Protocol):
    """Cuts a connection's byte stream into frame bodies (``FrameReader`` is one)."""

    @property
    def buffered(self) -> int:
        """Bytes of an unfinished frame held."""

    @property
    def mid_frame(self) -> bool:
        """Whether a frame was begun and not finished."""

    def split(
        self, data: bytes
    ) -> tuple[list[bytes], MessageTooLargeError | CorruptMessageError | None]:
        """Take bytes read; return the frame bodies they completed, and the error of a
        bad frame header after them, if any: those frames are handled, then the
        connection is closed."""


class Codec(Protocol):
    """Encodes the core's frames for one connection (``ServerCodec`` is one)."""

    @property
    def limits_size(self) -> bool:
        """Whether the codec keeps each answer it appends within ``--max-response-bytes``
        itself (one call may append several); False: the connection checks each frame."""

    def encode_into(self, frame: ServerFrame, buffer: bytearray) -> None:
        """Append ``frame``, framed, to ``buffer``."""


class Wire(Protocol[ConnT]):
    """A wire the server speaks: framing, codec, and translation to the core's requests.

    ``take`` runs once per frame on the request path: it decodes and translates, and does
    nothing else that every wire needs (the slice, the held answers, the screening and the
    core are the server's)."""

    @property
    def in_order(self) -> bool:
        """Whether a connection's requests are taken one at a time, each once the one
        before is answered, so that its answers go out in request order."""

    @property
    def listener(self) -> str:
        """The listener's name in the metrics' ``listener`` label (``huddle``, ``kafka``)."""

    @property
    def disconnect_grace_ms(self) -> int | None:
        """How long a dynamic member whose connection on this wire closed may stay away
        before it is removed: None for the server's ``--disconnect-grace-ms``, below 0 for
        never (the member stays until its session timeout, as with Kafka)."""

    def framing(self, max_frame_bytes: int) -> Framing:
        """A new connection's framing, for frames of at most ``max_frame_bytes``."""

    def codec(self) -> Codec:
        """A new connection's codec."""

    def take(self, conn: ConnT, body: bytes) -> Call | None:
        """One whole frame body read on ``conn``: the request for the core, or None when
        the wire handled the frame itself (answered it, or closed the connection)."""

    def overdue(self, conn: ConnT, timeout_ms: int) -> tuple[ErrorCode, str] | None:
        """``conn`` was not logged in within the handshake timeout: why it is closed, or
        None while it waits on the coordinator (an authentication step being checked)."""

    def gone(self, conn: ConnT) -> None:
        """``conn`` closed: forget what the wire keeps for it."""

    def after_answers(self, conn: ConnT, then: Callable[[], None]) -> None:
        """Call ``then`` (the close after a bad frame header) once the answers owed for
        the requests ``conn`` sent before have left, reading nothing more meanwhile: at
        once on a wire whose clients match answers by correlation id; on an in-order wire,
        after the answers the core still holds (a JoinGroup's), as Kafka's broker, which
        reads a connection's requests one at a time."""
