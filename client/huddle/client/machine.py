"""The member core's former module name, kept so imports of it go on working: the core is
``huddle.client.member_core`` (and its vocabulary ``huddle.client.steps``)."""

from huddle.client.member_core import *  # noqa: F403
from huddle.client.member_core import __all__ as __all__
