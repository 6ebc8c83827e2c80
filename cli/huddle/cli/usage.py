"""What every subcommand shares: the environment prefix and the usage error."""

from __future__ import annotations

from huddle.protocol.errors import HuddleError

ENV_PREFIX = "HUDDLE_"


class UsageError(HuddleError):
    """A mistake in the command line or the environment: one line, exit code 2."""
