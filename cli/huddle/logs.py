"""Log set-up for huddle's processes (the coordinator, chaos harness and workers): structlog,
JSON lines or a console renderer.

Code never configures logging; it takes a logger and logs one stable snake_case event name
per thing that happens. The member library (``huddle.client``), which runs inside other
people's programs, takes ``library_logger("huddle.<module>")``: its events go to the
standard library's ``logging`` under that name, so the application decides where they go
and from which level; nothing is ever written to stdout, and an application that sets
nothing up sees warnings and errors on stderr only (Python's last-resort handler), as with
any library. The coordinator's modules take ``structlog.get_logger("huddle.<module>")``.
The entry points (``huddle serve``, ``huddle chaos``, the chaos worker) call
``configure_logging`` once, which renders both kinds the same way; the one-shot commands
(``huddle topics``, ``huddle users``...) run in ``command_logging``: warnings and errors on
stderr, stdout for their output only. This module imports no other part of huddle: every
layer may use it.

Records from the standard library's ``logging`` (asyncio's own complaints, for instance)
are rendered the same way, so stderr carries one format only.

Lines go out through a ``LogSink``: a thread of its own writes them, so a reader that stops
reading never blocks the code that logs (the coordinator's event loop), and one that has
gone (``huddle serve 2>&1 | head -1``) never raises into it: a process logs on, and stops
on SIGTERM, whatever became of its log's reader.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import select
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Literal, TextIO, cast

import structlog
import structlog.tracebacks
from structlog.typing import EventDict, Processor, WrappedLogger

LogFormat = Literal["auto", "json", "console"]
LOG_FORMATS: tuple[LogFormat, ...] = ("auto", "json", "console")
LOG_LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


MAX_QUEUED_LINES = 10_000  # lines waiting for a slow reader; more are dropped and counted
EXIT_FLUSH_S = 2.0  # at exit, how long lines still queued get to be written


class LogSink:
    """A text stream for log lines that never blocks and never raises.

    ``write`` queues the line; a daemon thread writes the queue to (a duplicate of) the
    stream's file descriptor. While the reader is slow, at most ``max_queued`` lines wait
    and later ones are dropped and counted; ``on_dropped(count)`` is called once writing
    goes on (``configure_logging`` logs ``log_lines_dropped``). Once a write fails (the
    reader is gone: EPIPE), every line is dropped. ``flush`` does nothing; ``drain`` waits,
    a bounded time, for what is queued to be written.
    """

    def __init__(self, stream: TextIO, *, max_queued: int = MAX_QUEUED_LINES) -> None:
        self._stream = stream
        self._fd = os.dup(stream.fileno())  # ours: valid whatever becomes of the stream
        self._encoding = getattr(stream, "encoding", None) or "utf-8"
        self._max_queued = max_queued
        self._queue: deque[str] = deque()
        self._changed = threading.Condition()
        self._writing = False
        self._closing = False
        self.broken = False
        self.dropped = 0  # lines dropped since the last report
        self.on_dropped: Callable[[int], None] | None = None
        self._thread = threading.Thread(target=self._run, name="huddle-log-writer", daemon=True)
        self._thread.start()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def write(self, text: str) -> int:
        with self._changed:
            if self.broken or self._closing:
                return len(text)
            if len(self._queue) >= self._max_queued:
                self.dropped += 1
                return len(text)
            self._queue.append(text)
            self._changed.notify_all()
        return len(text)

    def flush(self) -> None:
        """Nothing: the writer thread writes as soon as it can."""

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for every queued line to be written (or dropped)."""
        with self._changed:
            return self._changed.wait_for(
                lambda: self.broken or not (self._queue or self._writing), timeout
            )

    def close(self, timeout: float) -> None:
        """Take no more lines; give those queued ``timeout`` s to be written."""
        self.drain(timeout)
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join(0.1)
        if not self._thread.is_alive():
            os.close(self._fd)

    def _run(self) -> None:
        try:
            while self._write_next():
                pass
        finally:
            with self._changed:
                self.broken = self.broken or not self._closing
                self._queue.clear()
                self._writing = False
                self._changed.notify_all()

    def _write_next(self) -> bool:
        with self._changed:
            self._changed.wait_for(lambda: self._queue or self._closing)
            if not self._queue:
                return False
            text = "".join(self._queue)
            self._queue.clear()
            dropped, self.dropped = self.dropped, 0
            self._writing = True
        written = _write_all(self._fd, text.encode(self._encoding, "backslashreplace"))
        if written and dropped and self.on_dropped is not None:
            self.on_dropped(dropped)  # queued before ``drain`` can see an empty queue
        with self._changed:
            self._writing = False
            self.broken = not written
            self._changed.notify_all()
        return written


def _write_all(fd: int, data: bytes) -> bool:
    """Write all of ``data``; False once the file cannot be written (EPIPE, EBADF, ...)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:  # someone made the file non-blocking: wait until writable
            select.select([], [fd], [], 1.0)
        except OSError:
            return False
    return True


class _QuietStream:
    """A stream without a file descriptor (a StringIO): written at once, errors ignored."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def isatty(self) -> bool:
        return self._stream.isatty()

    def write(self, text: str) -> int:
        with contextlib.suppress(OSError, ValueError):
            self._stream.write(text)
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()


_sink: LogSink | None = None


def _sink_for(stream: TextIO) -> TextIO:
    """The stream log lines go to: a LogSink where ``stream`` has a file descriptor."""
    global _sink
    close_logs()
    try:
        stream.fileno()
    except (OSError, ValueError, AttributeError):
        return cast(TextIO, _QuietStream(stream))
    _sink = LogSink(stream)
    return cast(TextIO, _sink)


def flush_logs(timeout: float = EXIT_FLUSH_S) -> None:
    """Wait up to ``timeout`` s for the log lines queued so far to be written."""
    if _sink is not None:
        _sink.drain(timeout)


@atexit.register
def close_logs(timeout: float = EXIT_FLUSH_S) -> None:
    """Give the queued log lines ``timeout`` s to be written, then write no more (at exit)."""
    global _sink
    if _sink is not None:
        _sink.close(timeout)
        _sink = None


class _NamedWriteLogger(structlog.WriteLogger):
    """A WriteLogger that remembers the name it was asked for (``huddle.server``...)."""

    def __init__(self, file: TextIO, name: str) -> None:
        super().__init__(file)
        self.name = name


class _NamedWriteLoggerFactory:
    def __init__(self, file: TextIO) -> None:
        self._file = file

    def __call__(self, *args: Any) -> _NamedWriteLogger:
        name = args[0] if args and isinstance(args[0], str) else "huddle"
        return _NamedWriteLogger(self._file, name)


def _add_logger_name(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    name = getattr(logger, "name", None)
    if name is not None and "logger" not in event_dict:
        event_dict["logger"] = name
    return event_dict


LOGGED_CHARS = 256  # a string value longer than this is cut in a log line


def printable(text: str, limit: int | None = None) -> str:
    """``text`` safe to show on a terminal or in a log line: characters that are not
    printable (control characters such as ESC, bidirectional overrides such as RLO, line
    separators) escaped as in Python's ``repr``; cut to ``limit`` characters, saying how
    many more there were."""
    cut = ""
    if limit is not None and len(text) > limit:
        cut = f"…({len(text) - limit} more characters)"
        text = text[:limit]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text + cut


def _printable_values(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Every string value (also inside lists and tuples) of an event made ``printable``
    and cut to LOGGED_CHARS: ids and names come from clients."""
    for key, value in event_dict.items():
        if type(value) is str:
            if len(value) > LOGGED_CHARS or not value.isprintable():
                event_dict[key] = printable(value, LOGGED_CHARS)
        elif type(value) in (list, tuple) and not all(
            type(v) is not str or (len(v) <= LOGGED_CHARS and v.isprintable()) for v in value
        ):
            event_dict[key] = [printable(v, LOGGED_CHARS) if type(v) is str else v for v in value]
    return event_dict


class _Event(dict[str, Any]):
    """An event as the library hands it to ``logging``: a dict, which structlog's
    ProcessorFormatter (``configure_logging``) renders like every other event, and which
    reads as one line (``event key=value ...``) where a plain logging handler prints it."""

    def __str__(self) -> str:
        rest = " ".join(
            f"{key}={value!r}"
            for key, value in self.items()
            if key not in ("event", "level", "logger", "timestamp")
        )
        return f"{self.get('event', '')} {rest}".strip()


def _to_logging(
    logger: WrappedLogger, method_name: str, event_dict: EventDict
) -> tuple[tuple[_Event], dict[str, Any]]:
    """The last processor of a library logger: the event to ``logging`` as its message
    (as ``ProcessorFormatter.wrap_for_formatter`` does, readable without it too)."""
    return (_Event(event_dict),), {"extra": {"_logger": logger, "_name": method_name}}


_LIBRARY_PROCESSORS: list[Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    _printable_values,
    _to_logging,
]


_ABOVE_DEBUG = frozenset(
    structlog.make_filtering_bound_logger(level)
    for level in (logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)
)


def debug_enabled() -> bool:
    """Whether a structlog debug event goes anywhere under the configuration now (a
    filtering logger above debug drops it; any other configuration may keep it). A path
    taken per request asks this first: an event built to be dropped costs about 2 µs."""
    return structlog.get_config()["wrapper_class"] not in _ABOVE_DEBUG


def library_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A logger for library code: structlog's API (``bind``, ``info(event, **values)``)
    over the standard library's ``logging.getLogger(name)``, whatever structlog's own
    configuration. Levels are logging's: a disabled level costs one check."""
    logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
        logging.getLogger(name),
        processors=_LIBRARY_PROCESSORS,
        wrapper_class=structlog.stdlib.BoundLogger,
        context_class=dict,
        cache_logger_on_first_use=True,
    )
    return logger


def parse_level(level: str) -> int:
    """The numeric level for a name such as ``info``; ValueError for an unknown name."""
    try:
        return LOG_LEVELS[level.strip().lower()]
    except KeyError:
        choices = ", ".join(LOG_LEVELS)
        raise ValueError(f"unknown log level {level!r} (choose from {choices})") from None


class _StdlibHandler(logging.StreamHandler[TextIO]):
    """The handler ``configure_logging`` puts on the standard library's root logger (one
    at a time: configuring again replaces it)."""


def configure_logging(
    fmt: LogFormat = "auto", level: str = "info", *, stream: TextIO | None = None
) -> None:
    """Send structlog events (and stdlib logging records) to ``stream`` (default stderr).

    ``auto`` renders for humans on a TTY and writes JSON lines otherwise. Timestamps are ISO
    8601 in UTC; values bound with ``structlog.contextvars`` are merged into every event.
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r} (choose from {', '.join(LOG_FORMATS)})")
    levelno = parse_level(level)
    given = stream if stream is not None else sys.stderr
    console = fmt == "console" or (fmt == "auto" and given.isatty())
    out = _sink_for(given)

    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Processor
    # Tracebacks without local variables: they would hold what clients sent.
    if console:
        renderer = structlog.dev.ConsoleRenderer(
            colors=out.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
        tail: list[Processor] = [structlog.dev.set_exc_info, renderer]
    else:
        renderer = structlog.processors.JSONRenderer(default=repr)
        tracebacks = structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        )
        tail = [tracebacks, renderer]

    structlog.configure(
        processors=[
            *shared,
            _add_logger_name,
            _printable_values,
            structlog.processors.StackInfoRenderer(),
            *tail,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(levelno),
        logger_factory=_NamedWriteLoggerFactory(out),
        cache_logger_on_first_use=False,
    )

    # The standard library's records (asyncio, third parties) through the same renderer.
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *tail,
        ],
    )
    handler = _StdlibHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _StdlibHandler):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(levelno, logging.INFO))
    if _sink is not None:
        _sink.on_dropped = _report_dropped


@contextlib.contextmanager
def command_logging(level: str = "warning") -> Iterator[None]:
    """While a one-shot command runs (``huddle users list``, ``huddle topics create``):
    structlog events from ``level`` up on stderr, for humans, as Kafka's command-line tools
    log; stdout carries the command's output only (its JSON with ``--json``). structlog's
    configuration before is restored after; the command's process has one at most."""
    before = structlog.get_config()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _printable_values,
            structlog.dev.set_exc_info,
            structlog.dev.ConsoleRenderer(
                colors=False, exception_formatter=structlog.dev.plain_traceback
            ),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(parse_level(level)),
        logger_factory=structlog.WriteLoggerFactory(cast(TextIO, _QuietStream(sys.stderr))),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        structlog.configure(**before)


def _report_dropped(count: int) -> None:
    structlog.get_logger("huddle.logs").warning(
        "log_lines_dropped", count=count, reason="the log's reader was too slow"
    )
