"""``KafkaWire``: Kafka's wire on a listener of the server, a ``Wire[Connection]``.

Each request is read here (``framing``, ``header``, ``schemas``), takes its slot in the
connection's queue of answers (``answers``), and is translated (``brokers``, ``groups``,
``offsets``, ``admin``) into none, one or several of the core's requests: the first is
returned to the server's request path, the others (a batch of groups or keys) go to it
directly. Produce, Fetch and ListOffsets go to the log instead (``log_apis``). A Heartbeat
on a logged-in connection is read and answered by hand (``heartbeat_fast``), unless it is
not plain (then it goes the usual way: the same answer, bad input included). From there
everything is what huddle's own wire gets: the screening, the core, the held answers, the
keeper.

Kafka connections have no handshake: without SASL a connection is logged in with its
first request; with SASL once its exchange is complete (``sasl``: SaslHandshake, then
SaslAuthenticate, over huddle's login). Its client id is the one its request headers
name. Bad input closes the connection that sent it, after a log line (Kafka closes it
too; a Kafka client cannot be told why): a request shorter than its header or that cannot
be read, an API or version not served (but ApiVersions: answered in v0 with
UNSUPPORTED_VERSION and ApiVersions' own range, as Kafka).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, Final, Protocol, cast
from uuid import UUID

import msgspec

from huddle.coordinator.connection import Connection
from huddle.coordinator.consumer_service import ConsumerService
from huddle.coordinator.handshake import FAILED
from huddle.coordinator.kafka import (
    admin,
    apis,
    brokers,
    by_id,
    consumer_describe,
    consumer_groups,
    groups,
    header,
    heartbeat_fast,
    leaders,
    leadership,
    log_access,
    offsets,
    sasl,
    schemas,
)
from huddle.coordinator.kafka.answers import KafkaCodec, Slot
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.log_apis import KafkaLog, NoResponse, Wait, finished
from huddle.coordinator.kafka.nodes import Broker, KafkaNodes
from huddle.coordinator.kafka.sasl import KafkaSasl
from huddle.coordinator.kafka.translate import Context, Plan
from huddle.logs import printable
from huddle.protocol.errors import ErrorCode
from huddle.protocol.framing import FrameReader
from huddle.protocol.messages import Call, ErrorResponse, Reply, Request

Translation = Callable[[Any, int, Context], Plan]

TRANSLATIONS: Final[dict[int, Translation]] = {
    Api.API_VERSIONS: brokers.api_versions,
    Api.METADATA: brokers.metadata,
    Api.FIND_COORDINATOR: brokers.find_coordinator,
    Api.JOIN_GROUP: groups.join_group,
    Api.SYNC_GROUP: groups.sync_group,
    Api.HEARTBEAT: groups.heartbeat,
    Api.LEAVE_GROUP: groups.leave_group,
    Api.OFFSET_COMMIT: offsets.offset_commit,
    Api.OFFSET_FETCH: offsets.offset_fetch,
    Api.DESCRIBE_GROUPS: admin.describe_groups,
    Api.LIST_GROUPS: admin.list_groups,
    Api.DELETE_GROUPS: admin.delete_groups,
    Api.CREATE_TOPICS: admin.create_topics,
    Api.DELETE_TOPICS: admin.delete_topics,
    Api.CREATE_PARTITIONS: admin.create_partitions,
    Api.SASL_HANDSHAKE: sasl.handshake_refused,  # once authenticated, or without SASL
    Api.SASL_AUTHENTICATE: sasl.authenticate_refused,
}
_LOG_APIS: Final = frozenset({Api.PRODUCE, Api.FETCH, Api.LIST_OFFSETS})
_REASON_CHARS: Final = 300
_FETCH_OVERHEAD: Final = 64 * 1024  # a Fetch answer's bytes besides its records, at most
# Fetches waiting (and Produces waiting for the disk) of one connection, at most: Kafka's
# clients keep one Fetch in flight per broker; a connection that leaves its answers unread
# is read no further, so even a dead one holds no more than this until the idle timeout
MAX_WAITS: Final = 16


def _by_the_log(parts: Any) -> Any:
    raise AssertionError("answered by the log")


def _answered(response: Any) -> Callable[[Any], Any]:
    return lambda parts: response


class KafkaHost(consumer_groups.ConsumerHost, Protocol):
    """What the Kafka wire needs of the server (``CoordinatorServer`` is one): the consumer
    groups' needs (the loop, the topic registry, the ACLs ...), and these."""

    def greeted(self, conn: Connection) -> None:
        """``conn`` is logged in: no longer watched for a stalled handshake."""

    def backlogged(self, conn: Connection) -> None:
        """Frames may wait in ``conn.inbox`` that were not handled yet (after a SASL step
        answered outside the server's pass)."""

    def call(self, conn: Connection, call: Call) -> None:
        """One more request of ``conn`` through the request path (a batch's others)."""

    def flush(self) -> None:
        """Write what the connections queued (after an answer made by a timer)."""


class KafkaWire:
    """Kafka's wire on one listener, advertised as ``host:port`` (broker ``node_id``)."""

    # Kafka's clients need answers in request order; this wire's codec keeps that order
    # itself (a slot per request, ``answers.KafkaCodec``), including answers the wire
    # makes later (a Fetch that waits), so the server need not take requests one at a time.
    in_order = False
    listener = "kafka"  # the metrics' label

    def __init__(
        self,
        server: KafkaHost,
        advertised: tuple[str, int],
        *,
        consumer: ConsumerService,
        max_response_bytes: int,
        sasl: KafkaSasl | None = None,
        evict_on_close_ms: int = -1,
        log: KafkaLog | None = None,
    ) -> None:
        self.server = server
        self.sasl = sasl  # the login, when the listener requires SASL
        # Kafka's rule by default: a member whose connection closed stays until its
        # session timeout (Kafka clients reconnect for ordinary reasons); with
        # --kafka-evict-on-close-ms, a dynamic one not back within that grace is removed.
        self.disconnect_grace_ms = evict_on_close_ms
        self.node_id = 0
        self.advertised = advertised
        # a cluster's brokers (set by the server once the node joined); None: this one alone
        self.nodes: KafkaNodes | None = None
        self._led_by: tuple[int, ...] = ()  # the brokers the log's partitions were led among
        self.port = advertised[1]  # the port listened on
        self.max_response_bytes = max_response_bytes
        # what a Fetch may ask for: its answer stays within the response limit
        self._fetch_limit = max(max_response_bytes - _FETCH_OVERHEAD, 1)
        if log is None:
            log = KafkaLog(server.topic_partitions.get, topic_ids=server.topic_ids.get)
        self.log = log
        # the KIP-848 groups: the server's (shared with huddle's wire)
        self.consumer = consumer_groups.ConsumerGroups(consumer)
        self._waits: dict[int, set[asyncio.Future[Any]]] = {}  # Fetches waiting, by conn
        # a request of the core is checked as huddle's wire checks it (its bounds)
        self._encode = msgspec.msgpack.Encoder().encode
        self._check = msgspec.msgpack.Decoder(Request).decode

    # --- Context: what the translations read -------------------------------------------

    @property
    def broker(self) -> Broker:
        return self.nodes.me if self.nodes is not None else (self.node_id, *self.advertised)

    def brokers(self) -> Sequence[Broker]:
        return self.nodes.live() if self.nodes is not None else (self.broker,)

    def coordinator(self, node_id: str) -> Broker | None:
        return self.nodes.of(node_id) if self.nodes is not None else self.broker

    def leaders(self, topic: str, count: int) -> Sequence[int]:
        return leaders.table(topic, count, tuple(b[0] for b in self.brokers()))

    def _leads(self, topic: str, partition: int) -> bool:
        count = self.server.topic_partitions.get(topic)
        if count is None or not 0 <= partition < count:
            return True  # the log answers UNKNOWN_TOPIC_OR_PARTITION
        return self.leaders(topic, count)[partition] == self.broker[0]

    def _follow_leaders(self) -> None:
        """Forget the log of the partitions another node leads now (the brokers changed):
        if this node leads one again later, it starts empty rather than with records
        older than the ones its clients were given meanwhile (see docs/kafka.md)."""
        led_by = tuple(b[0] for b in self.brokers())
        if led_by == self._led_by:
            return
        self._led_by = led_by
        self.log.forget([key for key in self.log.partitions() if not self._leads(*key)])

    @property
    def topics(self) -> Mapping[str, int]:
        return self.server.topic_partitions

    @property
    def topic_names(self) -> Mapping[UUID, str]:
        return self.server.topic_names

    @property
    def topic_ids(self) -> Mapping[str, UUID]:
        return self.server.topic_ids

    def topic_changed(self, topic: str) -> None:
        self.log.topic_changed(topic)

    def consumer_offsets(
        self, group_id: str, member_id: str | None, epoch: int, version: int, *, commit: bool
    ) -> int | None:
        return self.consumer.check_offsets(group_id, member_id, epoch, version, commit=commit)

    # --- Wire ---------------------------------------------------------------------------

    def framing(self, max_frame_bytes: int) -> FrameReader:
        return FrameReader(max_frame_bytes)

    def codec(self) -> KafkaCodec:
        return KafkaCodec(self.max_response_bytes)

    def take(self, conn: Connection, body: bytes) -> Call | None:
        codec = cast(KafkaCodec, conn.codec)
        if codec.ending:  # it closes once its answers have left: nothing more is read
            conn.inbox.clear()
            return None
        if codec.full or len(self._waits.get(conn.conn_id, ())) >= MAX_WAITS:
            # read on once answers left (a client that pipelines is held back)
            conn.inbox.appendleft(body)
            conn.muted = True
            conn.hold_input()
            codec.when_drained(conn.unmute)
            return None
        if conn.handshaken:
            beat = codec.heartbeats.read(body)
            if beat is not None:
                return self._heartbeat(conn, codec, beat)
        elif self.sasl is None:
            conn.handshaken = True  # no handshake: its first request logs it in
            self.server.greeted(conn)
        elif conn.sasl is FAILED:
            conn.inbox.clear()  # its failure is answered after a delay: nothing else
            return None
        try:
            start = header.start(body)
        except header.RequestReadError as exc:
            self._unreadable(conn, str(exc))
            return None
        api_key, version = start.api_key, start.version
        if not apis.served(api_key, version):
            self._not_served(conn, codec, start)
            return None
        try:
            client_id, offset = header.client_id_and_end(body, schemas.flexible(api_key, version))
            request = schemas.decode(api_key, version, body, offset)
        except Exception as exc:  # kio's readers raise several kinds on hostile input
            self._unreadable(conn, f"{apis.name(api_key)} v{version}: {exc!r}", start)
            return None
        if client_id != conn.client_id:
            conn.client_id = client_id
            conn.peer = replace(conn.peer, client_id=client_id)
        if not conn.handshaken and self.sasl is not None and not self.sasl.admits(conn, api_key):
            login = Slot(api_key, version, start.correlation_id, _by_the_log, 0)
            self.sasl.login(conn, codec, login, request)
            return None
        if api_key in _LOG_APIS:
            slot = Slot(api_key, version, start.correlation_id, _by_the_log, 0)
            try:
                self._log_api(conn, codec, slot, request)
            except Exception as exc:  # as a translation that fails, below; its slot is open
                reason = f"{apis.name(api_key)} v{version}: {exc!r}"
                self._unreadable(conn, reason, start, at_once=True)
            return None
        try:
            if api_key in consumer_describe.APIS:  # KIP-848's (the heartbeat: huddle's)
                plan = consumer_describe.plan(self.consumer, api_key, request, version, conn.peer)
            else:
                plan = TRANSLATIONS[api_key](request, version, self)
            if api_key == Api.LIST_GROUPS:
                plan = consumer_describe.with_consumer_groups(
                    self.consumer, plan, request, conn.peer
                )
        except Exception as exc:
            self._unreadable(conn, f"{apis.name(api_key)} v{version}: {exc!r}", start)
            return None
        slot = Slot(api_key, version, start.correlation_id, plan.answer, len(plan.calls))
        ids = codec.open(slot)
        if not ids:
            conn.send(codec.release(slot))
            return None
        calls = [self._checked(conn, i, r) for i, r in zip(ids, plan.calls, strict=True)]
        for extra in calls[1:]:
            if extra is not None:
                self.server.call(conn, extra)
        return calls[0]

    def overdue(self, conn: Connection, timeout_ms: int) -> tuple[ErrorCode, str] | None:
        if self.sasl is not None:
            return self.sasl.overdue(conn, timeout_ms)
        return ErrorCode.INVALID_REQUEST, f"no request within {timeout_ms} ms"

    def gone(self, conn: Connection) -> None:
        if self.sasl is not None:
            self.sasl.gone(conn)
        for fetch in self._waits.pop(conn.conn_id, ()):
            fetch.cancel()

    # --- the rest -----------------------------------------------------------------------

    def _heartbeat(self, conn: Connection, codec: KafkaCodec, beat: heartbeat_fast.Read) -> Call:
        """A Heartbeat read by hand (``heartbeat_fast``): as ``groups.heartbeat`` makes it,
        within the bounds ``_checked`` holds requests to already."""
        version, correlation_id, client_id, request = beat
        if client_id != conn.client_id:
            conn.client_id = client_id
            conn.peer = replace(conn.peer, client_id=client_id)
        slot = Slot(Api.HEARTBEAT, version, correlation_id, groups.error_only, 1)
        call_id = codec.open_one(slot)
        return Call(correlation_id=call_id, request=request)

    def _checked(self, conn: Connection, call_id: int, request: Request) -> Call | None:
        """The core's request, within the bounds huddle's wire holds every request to; one
        out of them is answered INVALID_REQUEST here (its slot is answered so)."""
        try:
            self._check(self._encode(request))
        except msgspec.ValidationError as exc:
            text = f"invalid request: {printable(str(exc), _REASON_CHARS)}"
            conn.log.warning("bad_request", error_message=text, client_id=conn.client_id)
            refusal = ErrorResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=text)
            conn.send(Reply(correlation_id=call_id, response=refusal))
            return None
        return Call(correlation_id=call_id, request=request)

    def _log_api(self, conn: Connection, codec: KafkaCodec, slot: Slot, request: Any) -> None:
        """Produce, Fetch or ListOffsets: the log answers, now or (a Fetch) later."""
        codec.open(slot)
        log, version, named = self.log, slot.version, None
        if slot.api_key == Api.FETCH and version >= by_id.FETCH_BY_ID_FROM:
            request, named = by_id.by_name(request, version, self.server.topic_names)
            version = by_id.BY_NAME  # the log reads it, and answers, by name
        auth, refused = self.server.authorizer, log_access.Refused()
        if auth is not None:
            request, refused = log_access.screen(auth, conn.peer, slot.api_key, request)
        not_led: log_access.Refused = []
        if self.nodes is not None:
            self._follow_leaders()
            request, not_led = leadership.screen(slot.api_key, request, self._leads)
        if slot.api_key == Api.LIST_OFFSETS:
            answer = log.list_offsets(request, version)
        elif slot.api_key == Api.PRODUCE:
            answer = log.produce(request, version)
            if isinstance(answer, NoResponse):  # acks=0: the client reads no answer
                conn.send(codec.release(slot, silent=True))
                if answer.close or refused or not_led:
                    reason = "a Produce with acks=0 was refused"
                    self._close_when_answered(conn, codec, partial(conn.close, reason))
                return
            kept = log.produce_kept(answer)
            if kept is not None:  # --fsync: answered once its batches are on the disk
                self._answer_later(conn, codec, slot, kept, refused, not_led, version)
                return
        else:
            if request.max_bytes > self._fetch_limit:  # as Kafka's fetch.max.bytes clamps it
                request = dataclasses.replace(request, max_bytes=self._fetch_limit)
            answer = log.fetch_now(request, version)
            if isinstance(answer, Wait):
                later = log.fetch_later(request, version)
                self._answer_later(conn, codec, slot, later, refused, not_led, version, named)
                return
        answer = finished(slot.api_key, version, answer, refused, not_led, named)
        slot.answer = _answered(answer)
        conn.send(codec.release(slot))

    def _close_when_answered(
        self, conn: Connection, codec: KafkaCodec, close: Callable[[], None]
    ) -> None:
        """Close ``conn`` (``close``) as Kafka does after a request it cannot answer (a
        refused Produce with acks=0, bad input), but only once the answers owed for its
        earlier requests have left (a held JoinGroup, a Fetch that waits): Kafka reads a
        connection's requests one at a time, so those have left before it reads the one
        that closes. Nothing more is read."""
        conn.inbox.clear()
        conn.hold_input()
        loop = self.server.loop

        def then() -> None:
            loop.call_soon(close)  # after the server writes the last answers

        codec.when_answered(then)

    def _fail(
        self, conn: Connection, code: ErrorCode, text: str, *, at_once: bool, **details: Any
    ) -> None:
        """``conn.fail`` (a log line, then the close) for bad input, after the answers owed
        for its earlier requests (``after_answers``), or ``at_once`` (the bad request's
        own slot is open: it will never be answered)."""
        if at_once:
            conn.fail(code, text, **details)
            return
        self.after_answers(conn, partial(conn.fail, code, text, **details))

    def after_answers(self, conn: Connection, then: Callable[[], None]) -> None:
        """``then`` (bad input's close) now, or once the answers owed have left
        (``_close_when_answered``): a bad request, or a bad frame header."""
        codec = cast(KafkaCodec, conn.codec)
        if not codec.waiting:
            then()
            return
        self._close_when_answered(conn, codec, then)

    def _answer_later(
        self,
        conn: Connection,
        codec: KafkaCodec,
        slot: Slot,
        pending: asyncio.Future[Any],
        refused: log_access.Refused,
        not_led: log_access.Refused,
        version: int,
        named: by_id.FetchById | None = None,
    ) -> None:
        """The slot is answered when ``pending`` (of ``version``) is done (a Fetch that
        waited, a Produce kept), with the topics the ACLs refused and the partitions another
        node leads put back; dropped if the connection closes first."""
        waits = self._waits.setdefault(conn.conn_id, set())
        waits.add(pending)

        def done(task: asyncio.Future[Any]) -> None:
            waits.discard(task)
            if task.cancelled() or conn.closing:
                return
            error = task.exception()
            if error is not None:
                api = apis.name(slot.api_key)
                conn.log.error("kafka_log_failed", api=api, error=repr(error))
                conn.abort(f"the {api} failed")
                return
            answer = finished(slot.api_key, version, task.result(), refused, not_led, named)
            slot.answer = _answered(answer)
            conn.send(codec.release(slot))
            self.server.flush()

        pending.add_done_callback(done)

    def _not_served(self, conn: Connection, codec: KafkaCodec, start: header.Start) -> None:
        api = apis.name(start.api_key)
        conn.log.warning(
            "kafka_not_served",
            api_key=start.api_key,
            api=api,
            version=start.version,
            correlation_id=start.correlation_id,
            client_id=conn.client_id,
        )
        if start.api_key == Api.API_VERSIONS:  # answered in v0, with the versions served
            values = brokers.unsupported_api_versions()
            slot = Slot(Api.API_VERSIONS, 0, start.correlation_id, lambda _: values, 0)
            codec.open(slot)
            conn.send(codec.release(slot))
            return
        self._fail(
            conn,
            ErrorCode.UNSUPPORTED_VERSION,
            f"{api} v{start.version} is not served (ApiVersions lists what is)",
            at_once=False,
            event="kafka_closed",
        )

    def _unreadable(
        self,
        conn: Connection,
        reason: str,
        start: header.Start | None = None,
        *,
        at_once: bool = False,
    ) -> None:
        text = f"unreadable request: {printable(reason, _REASON_CHARS)}"
        if start is None:
            self._fail(
                conn, ErrorCode.CORRUPT_MESSAGE, text, at_once=at_once, event="kafka_bad_request"
            )
            return
        self._fail(
            conn,
            ErrorCode.CORRUPT_MESSAGE,
            text,
            at_once=at_once,
            event="kafka_bad_request",
            api_key=start.api_key,
            version=start.version,
            correlation_id=start.correlation_id,
        )
