"""huddle: a group coordinator and member library for incremental cooperative rebalancing.

The parts are subpackages: ``huddle.client`` (the member library), ``huddle.coordinator``
(the service), ``huddle.protocol`` (the wire), ``huddle.chaos`` and ``huddle.pipeline``
(fault injection and its analysis), ``huddle.testing`` (a coordinator and members for
tests, and the pytest plugin), ``huddle.cli`` (the ``huddle`` command). This module
stays tiny because every import of a part imports it first; ``HuddleError``, the root of
every exception huddle raises, loads on first use.
"""

from __future__ import annotations

from pkgutil import extend_path
from typing import TYPE_CHECKING

# The parts live in separate source folders in a development checkout (one
# ``<part>/huddle/<part>/`` each); an installed wheel has them all in one directory.
__path__ = extend_path(__path__, __name__)

if TYPE_CHECKING:
    from huddle.protocol.errors import HuddleError

__all__ = ["HuddleError", "__version__"]


def __getattr__(name: str) -> object:
    if name == "HuddleError":
        from huddle.protocol.errors import HuddleError

        return HuddleError
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("huddle")
        except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
            return "0+unknown"
    raise AttributeError(f"module 'huddle' has no attribute {name!r}")
