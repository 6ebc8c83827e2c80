"""``cooperative-deferred`` (Designs II and III): the assignor and its parts.

``assignor`` holds ``DeferredAssignor`` (registered on import); ``lost`` finds the partitions
a departed member had and routes them, ``plan`` makes the sticky plan around the held ones,
``pace`` paces load-balancing moves and backs off revoking rounds, and ``wire`` is the
assignment user data a follower needs to lead.
"""

from huddle.client.assignors.deferred.assignor import DeferredAssignor

__all__ = ["DeferredAssignor"]
