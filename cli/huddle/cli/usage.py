"""What every subcommand shares: the environment prefix and the usage error."""

from __future__ import annotations

ENV_PREFIX = "HUDDLE_"


class UsageError(Exception):
    """A mistake in the command line or the environment: one line, exit code 2."""
