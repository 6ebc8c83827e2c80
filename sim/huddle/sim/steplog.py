"""The simulated members' own log events, in the step log instead of on the console.

The member library logs through the standard library's ``logging`` (``huddle.member``,
``huddle.leader``), so a script that sets nothing up sees its warnings on stderr. In a run
full of faults the simulated members warn all the time, as they should
(``session_expired_locally``, ``listener_too_slow``): a hundred seeds printed about 900 such
lines over the summary. While a run lasts, those loggers write into its step log (detail
lines: ``huddle sim replay`` shows them, the run's digest does not change), and nowhere else.
Anything else still reaches the console: the simulator's own errors, the coordinator's
errors, warnings from other code. ``short`` writes a message in one line for the trace.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from huddle.protocol.messages import Reply

MEMBER_LOGGERS = ("huddle.member", "huddle.leader")  # what the simulated members run logs
HIDDEN = ("event", "level", "logger", "timestamp", "group_id")  # said by the line already


class StepLogger(Protocol):
    def member_logged(self, line: str) -> None:
        """A line for the step log, from the member whose code runs now."""


class StepLog(logging.Handler):
    def __init__(self, world: StepLogger) -> None:
        super().__init__(logging.INFO)
        self.world = world

    def emit(self, record: logging.LogRecord) -> None:
        event = record.msg
        if isinstance(event, dict):  # huddle.logs.library_logger's records: the event itself
            name = str(event.get("event", ""))
            rest = " ".join(f"{k}={v}" for k, v in event.items() if k not in HIDDEN)
        else:
            name, rest = record.getMessage(), ""
        self.world.member_logged(f"logs {record.levelname.lower()} {name} {rest}".rstrip())


@contextmanager
def member_logs(world: StepLogger, *, traced: bool) -> Iterator[None]:
    """Within: the members' events go to ``world``'s step log if it is ``traced`` (read by
    someone), else nowhere; each logger is set back as it was after."""
    handler = StepLog(world)
    kept = []
    for name in MEMBER_LOGGERS:
        logger = logging.getLogger(name)
        kept.append((logger, logger.handlers, logger.propagate, logger.level))
        logger.handlers = [handler]
        logger.propagate = False
        logger.setLevel(logging.INFO if traced else logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, handlers, propagate, level in kept:
            logger.handlers = handlers
            logger.propagate = propagate
            logger.setLevel(level)


def short(message: object) -> str:
    """A message in one line for the trace: its type and the fields that tell it apart."""
    name = type(message).__name__
    if isinstance(message, Reply):
        return f"#{message.correlation_id} {short(message.response)}"
    fields = []
    for key in (
        "error_code",
        "generation_id",
        "member_epoch",
        "member_id",
        "leader",
        "group_instance_id",
    ):
        value = getattr(message, key, None)
        if value not in (None, "", 0):
            fields.append(f"{key}={value}")
    return f"{name}({', '.join(fields)})"
