"""Kafka's ``authorized_operations`` bit fields (KIP-430): which operations a principal may
do on a resource, answered when a describe request asks (``include_authorized_operations``).

Bit ``n`` is set for Kafka's ``AclOperation`` code ``n`` (READ 3, DELETE 6, DESCRIBE 8, ...),
as Kafka's ``Utils.to32BitField``. A group supports READ, DELETE and DESCRIBE here (Kafka's
also name DESCRIBE_CONFIGS and ALTER_CONFIGS, which huddle's groups do not have). Without an
authorizer every supported operation is authorized, as Kafka answers.
"""

from __future__ import annotations

from typing import Final

from huddle.coordinator.effects import Peer
from huddle.coordinator.security.acls import Authorizer, Operation, ResourceType

NOT_ASKED: Final = -(2**31)  # Kafka's: the operations were not asked for
_CODES: Final = {Operation.READ: 3, Operation.DELETE: 6, Operation.DESCRIBE: 8}
_GROUP_OPERATIONS: Final = (Operation.READ, Operation.DELETE, Operation.DESCRIBE)


def group_operations(auth: Authorizer | None, peer: Peer, group_id: str) -> int:
    """The operations ``peer`` may do on the group ``group_id``, as a bit field."""
    bits = 0
    for operation in _GROUP_OPERATIONS:
        if auth is None or auth.allowed(
            peer.principal, peer.host, operation, ResourceType.GROUP, group_id
        ):
            bits |= 1 << _CODES[operation]
    return bits
