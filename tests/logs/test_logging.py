"""huddle.logs: JSON lines or console output, levels, context, stdlib records."""

from __future__ import annotations

import io
import json
import logging
import os
import threading
from collections.abc import Iterator
from typing import TextIO

import pytest
import structlog

from huddle.coordinator.core import Coordinator
from huddle.coordinator.effects import Peer
from huddle.logs import (
    LogFormat,
    close_logs,
    configure_logging,
    debug_enabled,
    parse_level,
    printable,
)
from huddle.protocol.messages import (
    CreateTopicsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    TopicSpec,
)


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    close_logs()
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_commit_logs_its_debug_event_only_where_debug_goes_somewhere() -> None:
    """The commit path asks ``debug_enabled`` before building its debug event: the event
    is still there at debug level, or under any other configuration (a test's capture)."""
    out = io.StringIO()
    configure_logging("json", "debug", stream=out)
    assert debug_enabled()
    _commit_once()
    assert "offsets_committed" in [e["event"] for e in lines(out)]
    configure_logging("json", "info", stream=out)
    assert not debug_enabled()  # the filtering logger would drop it
    structlog.reset_defaults()
    with structlog.testing.capture_logs() as captured:
        assert debug_enabled()
        _commit_once()
    assert "offsets_committed" in [e["event"] for e in captured]


def _commit_once() -> None:
    core = Coordinator()
    core.handle(
        Peer(conn_id=1), 1, CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]), 0.0
    )
    partition = OffsetCommitPartition(partition=0, offset=5)
    request = OffsetCommitRequest(
        group_id="g", topics=[OffsetCommitTopic(name="t", partitions=[partition])]
    )
    core.handle(Peer(conn_id=1), 2, request, 0.0)


def test_json_lines_with_level_time_logger_and_context() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    log = structlog.get_logger("huddle.test")
    with structlog.contextvars.bound_contextvars(conn_id=7, client_id="c"):
        log.info("connection_opened", peer="127.0.0.1:5")
    log.debug("too_quiet")
    (event,) = lines(out)
    assert event["event"] == "connection_opened"
    assert event["level"] == "info"
    assert event["logger"] == "huddle.test"
    assert event["conn_id"] == 7
    assert event["client_id"] == "c"
    assert event["peer"] == "127.0.0.1:5"
    assert isinstance(event["timestamp"], str)
    assert event["timestamp"].endswith("Z")


def test_auto_is_json_when_not_a_tty() -> None:
    out = io.StringIO()
    configure_logging("auto", stream=out)
    structlog.get_logger("huddle.test").warning("bad_frame", reason="x")
    assert lines(out)[0]["event"] == "bad_frame"


def test_level_filtering() -> None:
    out = io.StringIO()
    configure_logging("json", "warning", stream=out)
    log = structlog.get_logger("huddle.test")
    log.info("hidden")
    log.warning("shown")
    assert [e["event"] for e in lines(out)] == ["shown"]


def test_exceptions_are_structured() -> None:
    out = io.StringIO()
    configure_logging("json", stream=out)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        structlog.get_logger("huddle.test").exception("core_failed")
    (event,) = lines(out)
    assert event["level"] == "error"
    assert "boom" in json.dumps(event["exception"])


def test_stdlib_records_use_the_same_format() -> None:
    out = io.StringIO()
    configure_logging("json", stream=out)
    logging.getLogger("asyncio").error("Task exception was never retrieved")
    (event,) = lines(out)
    assert event["event"] == "Task exception was never retrieved"
    assert event["logger"] == "asyncio"
    assert event["level"] == "error"


def test_configuring_twice_does_not_duplicate_stdlib_output() -> None:
    out = io.StringIO()
    configure_logging("json", stream=out)
    configure_logging("json", stream=out)
    logging.getLogger("x").warning("once")
    assert len(lines(out)) == 1


def test_console_format() -> None:
    out = io.StringIO()
    configure_logging("console", stream=out)
    structlog.get_logger("huddle.test").info("server_listening", port=9292)
    text = out.getvalue()
    assert "server_listening" in text
    assert "port=9292" in text


def test_bad_level_and_format() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        parse_level("loud")
    with pytest.raises(ValueError, match="unknown log format"):
        configure_logging("xml", stream=io.StringIO())  # type: ignore[arg-type]
    assert parse_level("WARNING") == logging.WARNING


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_client_strings_are_escaped_and_cut_in_log_lines(fmt: LogFormat) -> None:
    """Ids and names come from clients: a log line shows them with control characters and
    bidirectional overrides escaped, and cut (a 10 MiB client id once wrote 147 MB of log
    from one join)."""
    out = io.StringIO()
    configure_logging(fmt, stream=out)
    hostile = "evil\x1b[2J\u202egnp.exe\n"
    with structlog.contextvars.bound_contextvars(client_id="c" * 10_000_000):
        structlog.get_logger("huddle.test").info(
            "member_added", group_id=hostile, topics=[hostile, "t"], count=3
        )
    text = out.getvalue()
    assert "\x1b" not in text
    assert "\u202e" not in text
    assert text.count("\n") == 1, "one line"
    assert len(text) < 2_000
    if fmt == "json":
        (event,) = lines(out)
        assert event["group_id"] == "evil\\x1b[2J\\u202egnp.exe\\n"
        assert event["topics"] == ["evil\\x1b[2J\\u202egnp.exe\\n", "t"]
        assert event["client_id"] == "c" * 256 + "…(9999744 more characters)"
        assert event["count"] == 3


def test_printable_leaves_ordinary_text_alone() -> None:
    assert printable("orders-1 ümlaut 日本") == "orders-1 ümlaut 日本"
    assert printable("a\tb") == "a\\tb"
    assert printable("abcdef", 3) == "abc…(3 more characters)"


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_tracebacks_carry_no_local_variables(fmt: LogFormat) -> None:
    """A traceback's local variables would put what a client sent into the log."""
    out = io.StringIO()
    configure_logging(fmt, stream=out)

    def handle(body: bytes) -> None:
        raise ValueError("cannot handle it")

    secret = os.urandom(16).hex()
    try:
        handle(secret.encode())
    except ValueError:
        structlog.get_logger("huddle.test").exception("core_failed")
    text = out.getvalue()
    assert "cannot handle it" in text
    assert "handle" in text  # the frames are there
    assert secret not in text


def pipe() -> tuple[int, TextIO]:
    """A pipe's read end and its write end as a text stream, as a process's stderr."""
    read, write = os.pipe()
    return read, os.fdopen(write, "w", encoding="utf-8")


def test_a_reader_that_has_gone_never_makes_logging_raise() -> None:
    """``huddle serve 2>&1 | head -1``: once ``head`` exits, every write meets EPIPE; the
    code that logs (a signal handler, the event loop) must never see it."""
    read, stream = pipe()
    os.close(read)
    configure_logging("json", stream=stream)
    for n in range(1000):
        structlog.get_logger("huddle.test").info("connection_opened", conn_id=n)
    logging.getLogger("asyncio").error("through the standard library too")
    close_logs()
    stream.close()


def test_a_reader_that_reads_nothing_never_blocks_logging() -> None:
    """A full pipe holds lines back (up to a bound, then they are dropped and counted), but
    never the code that logs; once the reader reads again, every line is accounted for."""
    read, stream = pipe()
    configure_logging("json", stream=stream)
    log = structlog.get_logger("huddle.test")
    logged = threading.Event()

    def log_many() -> None:
        for n in range(30_000):
            log.info("connection_opened", conn_id=n, peer="127.0.0.1:40000")
        logged.set()

    threading.Thread(target=log_many, daemon=True).start()
    assert logged.wait(30), "logging blocked on a pipe nobody reads"
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(read, 65536), b"")))
    reader.start()
    close_logs(timeout=30)
    stream.close()
    reader.join(30)
    os.close(read)
    events = [json.loads(line) for line in b"".join(chunks).decode().splitlines()]
    opened = [e["conn_id"] for e in events if e["event"] == "connection_opened"]
    dropped = [e["count"] for e in events if e["event"] == "log_lines_dropped"]
    assert dropped, "the drop was said"
    assert len(opened) + sum(dropped) == 30_000
    assert opened == sorted(opened)
