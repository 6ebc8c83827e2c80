"""The huddle member library: members that keep their resources across rejoins.

from huddle.client import Member, Admin, TopicPartition, RebalanceListener
"""

from huddle.client.admin import Admin
from huddle.client.assignors import ASSIGNORS, Assignor, RebalanceProtocol
from huddle.client.connection import ConnectionClosedError, RequestTimeoutError
from huddle.client.events import (
    CommitFailedError,
    MemberFailedError,
    NotConnectedError,
    StableTimeoutError,
)
from huddle.client.listener import RebalanceListener
from huddle.client.member import Member
from huddle.client.running import MemberTask
from huddle.client.unreachable import ConnectTimeoutError, CoordinatorUnreachableError
from huddle.protocol.embedded import TopicPartition
from huddle.protocol.errors import ClientError, HuddleError, ServerError

__all__ = [
    "ASSIGNORS",
    "Admin",
    "Assignor",
    "ClientError",
    "CommitFailedError",
    "ConnectTimeoutError",
    "ConnectionClosedError",
    "CoordinatorUnreachableError",
    "HuddleError",
    "Member",
    "MemberFailedError",
    "MemberTask",
    "NotConnectedError",
    "RebalanceListener",
    "RebalanceProtocol",
    "RequestTimeoutError",
    "ServerError",
    "StableTimeoutError",
    "TopicPartition",
]
