"""The ``huddle`` command's argument parser: a usage mistake is one line and a hint (exit
2), and ``--help`` shows every flag's default.

Every subcommand's parser is a ``HuddleParser`` (argparse makes subparsers of the parent's
class), so the chaos and simulation commands behave the same.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from typing import Any, NoReturn

__all__ = ["HuddleParser", "positive_seconds"]

_REQUIRED = "(required)"


class _DefaultsFormatter(argparse.HelpFormatter):
    """Help that ends with the flag's default where the text does not say it already: also
    for a flag given no help text (argparse shows nothing for one), a switch ("off") and a
    required flag ("required")."""

    def _format_action(self, action: argparse.Action) -> str:
        if action.help is None and action.option_strings:
            action = copy.copy(action)  # argparse leaves a flag without a text bare
            action.help = self._get_help_string(action)
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            not action.option_strings
            or text == argparse.SUPPRESS
            or "default" in text
            or text.endswith(_REQUIRED)
            or isinstance(action, argparse._HelpAction | argparse._VersionAction)
        ):
            return action.help
        if action.required:
            said = _REQUIRED
        elif action.nargs == 0 and action.default in (None, False):  # a switch
            said = "(default: off)"
        elif action.default is None or action.default == ():
            said = "(default: none)"
        else:
            said = "(default: %(default)s)"
        text, env, variable = text.partition(" [env ")
        return f"{text} {said}".lstrip() + env + variable


class HuddleParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and a hint, exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: {message}\n(see {self.prog} --help)\n")
        sys.exit(2)


def positive_seconds(text: str) -> float:
    """A ``--timeout``: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: the timeout must be above 0 seconds")
    return value
