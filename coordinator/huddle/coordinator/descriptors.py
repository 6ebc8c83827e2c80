"""The process's open-file limit, and how many connections it allows.

A coordinator holds one descriptor per connection; the common soft limit of 1,024 is below
the default ``--max-connections``. ``huddle serve`` raises the soft limit to the hard one
(``raise_fd_limit``), and a server accepts no more connections than the limit can hold
with ``FD_RESERVE`` to spare (``connections_allowed``): past it, a connection cannot even
be refused with a reason.
"""

from __future__ import annotations

import resource
from typing import Final

import structlog

log = structlog.get_logger("huddle.server")

FD_RESERVE: Final = 32  # descriptors kept for all but connections (journal, stdio, refusing)


def raise_fd_limit() -> None:
    """Raise this process's soft limit on open files to its hard limit (a coordinator holds
    one per connection; the common soft limit of 1,024 is below the default
    --max-connections)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError) as exc:  # pragma: no cover - the hard limit is allowed
        log.warning("fd_limit_not_raised", soft=soft, hard=hard, error=str(exc))
        return
    log.info("fd_limit_raised", soft=hard, was=soft)


def connections_allowed(wanted: int) -> int:
    """``wanted``, or fewer if the open-file limit could not hold that many connections (a
    warning says so): past the limit a connection cannot even be refused with a reason."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or wanted + FD_RESERVE <= soft:
        return wanted
    allowed = max(soft - FD_RESERVE, 1)
    log.warning(
        "max_connections_over_fd_limit",
        max_connections=wanted,
        fd_limit=soft,
        allowed=allowed,
        hint="raise the open-file limit (ulimit -n, or the container's nofile ulimit)",
    )
    return allowed
