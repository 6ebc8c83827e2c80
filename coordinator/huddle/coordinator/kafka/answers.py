"""Each Kafka connection's answers leave in the order of its requests (Kafka's rule;
kafka-python and aiokafka fail on a correlation id out of turn), whoever makes them and
whenever: the core at once, the core late (a JoinGroup held until the group's members are
in, an answer held until its change is kept), the wire itself (ApiVersions), or a timer
(a Fetch that waits).

Every request takes a ``Slot`` in its connection's queue as it is read. A slot is answered
by one or more of the core's ``Reply`` frames (a request of several groups is one core
request per group), each under a call id of this connection (the ``Call``'s correlation
id: never the client's, which a client may reuse), or at once by the wire. Once answered,
the slot's Kafka response is built and encoded; the queue's head slots that are encoded
leave, in order, as soon as they are all answered.

``KafkaCodec`` is the connection's ``Codec``: the server hands it the core's frames (a
notice of huddle's own wire has no Kafka form and is dropped), and the wire answers its
own slots through ``release``: the connection then sends a ``Reply`` naming the slot's
call id, which releases it in turn.

A connection's queue is bounded: once ``MAX_WAITING`` requests wait in it, or answers of
``max_response_bytes`` in all wait behind one not made yet (a held JoinGroup, a Fetch that
waits), it is ``full`` and its wire reads no more of it until it drains (Kafka reads one
request of a connection at a time; a client pipelining behind a slow answer is held back,
not given a queue of answers without bound).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import structlog

from huddle.coordinator.kafka import heartbeat_fast, schemas
from huddle.coordinator.kafka.framing import SIZE_BYTES
from huddle.coordinator.kafka.translate import Encoded
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import ErrorResponse, Reply, Response, ServerFrame

log = structlog.get_logger("huddle.kafka")

Answer = Callable[[Sequence[Response]], Mapping[str, Any] | Encoded]
# What ``answered`` sends through the connection: the slot was answered by the wire.
RELEASE: Final = ErrorResponse(error_code=ErrorCode.NONE, error_message="answered by the wire")
MAX_WAITING: Final = 1024  # requests of one connection read and not yet answered, at most


class Slot:
    """One request's place in its connection's queue, until its answer leaves."""

    __slots__ = ("answer", "api_key", "correlation_id", "encoded", "parts", "version", "waiting")

    def __init__(
        self, api_key: int, version: int, correlation_id: int, answer: Answer, parts: int
    ) -> None:
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id  # the client's
        self.answer = answer  # the core's answers -> the Kafka response's values
        self.parts: list[Response | None] = [None] * parts
        self.waiting = parts  # core answers still to come
        self.encoded: bytes | None = None


class KafkaCodec:
    """One connection's queue of slots; a ``huddle.coordinator.wire.Codec``."""

    __slots__ = (
        "_calls",
        "_drained",
        "_next_call",
        "_queue",
        "_then",
        "answered_bytes",
        "ending",
        "heartbeats",
        "max_response_bytes",
    )
    # each answer is kept within the limit here: several may leave in one call
    limits_size: Final = True

    def __init__(self, max_response_bytes: int) -> None:
        self.max_response_bytes = max_response_bytes
        self._queue: deque[Slot] = deque()
        self._calls: dict[int, tuple[Slot, int]] = {}  # call id -> its slot, which part
        self._next_call = 1
        self.heartbeats = heartbeat_fast.Reader()  # the connection's, read by hand
        self.ending = False  # the connection closes once its answers have left
        self._then: Callable[[], None] | None = None
        self.answered_bytes = 0  # of the answers made that wait behind one that is not
        self._drained: Callable[[], None] | None = None

    def when_answered(self, then: Callable[[], None]) -> None:
        """Call ``then`` once every slot queued so far has left (now, if none waits); no
        request is to be read after this (``ending``)."""
        self.ending = True
        if self._queue:
            self._then = then
        else:
            then()

    @property
    def full(self) -> bool:
        """Whether no more requests are to be read until answers leave (``when_drained``)."""
        return len(self._queue) >= MAX_WAITING or self.answered_bytes >= self.max_response_bytes

    def when_drained(self, then: Callable[[], None]) -> None:
        """Call ``then`` once it is no longer ``full``."""
        self._drained = then

    @property
    def waiting(self) -> int:
        """Requests read and not yet answered (or answered behind one that is not)."""
        return len(self._queue)

    def open(self, slot: Slot) -> list[int]:
        """Queue ``slot``; return the call ids its parts are asked of the core under
        (none: the wire answers it, with ``release``)."""
        self._queue.append(slot)
        ids = list(range(self._next_call, self._next_call + len(slot.parts)))
        self._next_call += len(ids)
        for index, call_id in enumerate(ids):
            self._calls[call_id] = (slot, index)
        return ids

    def release(self, slot: Slot, *, silent: bool = False) -> Reply:
        """The wire answers ``slot`` (of no core parts) now: its answer is made, and the
        returned frame, sent through the connection, lets it leave in its turn.
        ``silent``: the request has no answer (a Produce with acks=0)."""
        if silent:
            self._encoded(slot, b"")
        else:
            self._finish(slot)
        call_id = self._next_call
        self._next_call += 1
        self._calls[call_id] = (slot, -1)
        return Reply(correlation_id=call_id, response=RELEASE)

    def encode_into(self, frame: ServerFrame, buffer: bytearray) -> None:
        if type(frame) is not Reply:
            return  # huddle's notices (a ProtocolError before a close) have no Kafka form
        found = self._calls.pop(frame.correlation_id, None)
        if found is None:
            return
        slot, index = found
        if index >= 0 and slot.parts[index] is None:
            slot.parts[index] = frame.response
            slot.waiting -= 1
            if slot.waiting == 0:
                if slot.api_key == heartbeat_fast.HEARTBEAT:
                    self._heartbeat(slot, frame.response)
                else:
                    self._finish(slot)
        queue = self._queue
        while queue and (encoded := queue[0].encoded) is not None:
            queue.popleft()
            self.answered_bytes -= len(encoded)
            buffer += encoded
        if not queue and self._then is not None:
            then, self._then = self._then, None
            then()
        if self._drained is not None and not self.full:
            drained, self._drained = self._drained, None
            drained()

    def open_one(self, slot: Slot) -> int:
        """``open`` for a slot of one core part (a Heartbeat's): its call id."""
        self._queue.append(slot)
        call_id = self._next_call
        self._next_call = call_id + 1
        self._calls[call_id] = (slot, 0)
        return call_id

    def _heartbeat(self, slot: Slot, response: Response) -> None:
        """A Heartbeat's answer, its error code alone, written by hand (``heartbeat_fast``)."""
        encoded = heartbeat_fast.response(slot.version, slot.correlation_id, response.error_code)
        if len(encoded) - SIZE_BYTES > self.max_response_bytes:
            self._finish(slot)  # too large for the limit: answered so, as any other
            return
        self._encoded(slot, encoded)

    def _finish(self, slot: Slot) -> None:
        parts = [p for p in slot.parts if p is not None]
        try:
            values = slot.answer(parts)
        except Exception:
            log.exception("kafka_answer_failed", api_key=slot.api_key, version=slot.version)
            failed = ErrorResponse(
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message="the answer failed"
            )
            values = slot.answer([failed] * len(slot.parts))
        self._encode(slot, values)

    def _encode(self, slot: Slot, values: Mapping[str, Any] | Encoded) -> None:
        """``values`` are the response's (``schemas.build``), the response itself, or its
        encoding (``Encoded``)."""
        encoded = self._bytes(slot, values)
        if len(encoded) - SIZE_BYTES > self.max_response_bytes:
            log.warning(
                "response_too_large",
                api_key=slot.api_key,
                size=len(encoded),
                limit=self.max_response_bytes,
            )
            too_large = ErrorResponse(
                error_code=ErrorCode.MESSAGE_TOO_LARGE,
                error_message=f"the answer is over {self.max_response_bytes} bytes",
            )
            encoded = self._bytes(slot, slot.answer([too_large] * max(len(slot.parts), 1)))
        self._encoded(slot, encoded)

    def _encoded(self, slot: Slot, encoded: bytes) -> None:
        slot.encoded = encoded
        self.answered_bytes += len(encoded)

    @staticmethod
    def _bytes(slot: Slot, values: Mapping[str, Any] | Encoded) -> bytes:
        if isinstance(values, Encoded):
            return schemas.framed(slot.api_key, slot.version, slot.correlation_id, values.body)
        cls = schemas.response_class(slot.api_key, slot.version)
        entity = schemas.build(cls, values) if isinstance(values, Mapping) else values
        return schemas.encode(slot.api_key, slot.version, slot.correlation_id, entity)
