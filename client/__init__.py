"""The huddle member library: members that keep their resources across rejoins.

from client import Member, Admin, TopicPartition, RebalanceListener
"""

from client.admin import Admin
from client.assignors import ASSIGNORS, Assignor, RebalanceProtocol
from client.events import CommitFailedError, MemberFailedError
from client.listener import RebalanceListener
from client.member import Member
from client.running import MemberTask
from protocol.embedded import TopicPartition

__all__ = [
    "ASSIGNORS",
    "Admin",
    "Assignor",
    "CommitFailedError",
    "Member",
    "MemberFailedError",
    "MemberTask",
    "RebalanceListener",
    "RebalanceProtocol",
    "TopicPartition",
]
