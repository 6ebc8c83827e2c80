"""Testing with huddle: a coordinator and members for your own tests.

``pip install huddle`` registers a pytest plugin (``huddle.testing.plugin``) with the
fixtures ``huddle_coordinator`` and ``huddle_members``; the pieces are usable without
pytest too:

* ``CoordinatorProcess``: ``huddle serve`` as a child process on a free loopback port, with
  its ``bootstrap``, its ``log`` (every event, parsed), ``kill()`` and ``restart()``;
* ``MemberSet``: members of groups, each running in its own task, to ``start``, ``stop``
  (it leaves its group) or ``kill`` (its connection just drops) in any order;
* ``wait_settled``: the assertion that a group settles with every partition owned once.
"""

from huddle.testing.coordinator import CoordinatorProcess
from huddle.testing.members import MemberSet
from huddle.testing.settle import NotSettledError, wait_settled

__all__ = ["CoordinatorProcess", "MemberSet", "NotSettledError", "wait_settled"]
