"""The group's subscriptions resolved against the topics, and its target assignment worked out
when the group epoch has moved past it (Kafka's TargetAssignmentBuilder).

Subscriptions are topic names and, or instead, a regular expression. A regex is matched
against every topic name in the view, whole, with RE2 (Kafka uses RE2/J with ``matches()``:
the same syntax, no backreferences or lookarounds, and time linear in the name whatever the
pattern, so no client's regex can hold the coordinator up). Regexes are matched again only
when the topic view's ``version`` changes or a member brings a new one.

The group epoch moves when the topics the group subscribes to, their partition counts or
their ids change: a topic created that a regex matches, a topic given partitions, a topic
deleted and created again under its name (as Kafka 4.0's subscription metadata, which holds
each topic's id, differs then). The members then revoke the old topic's partitions before
they are given the new one's (``reconcile``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import re2

from huddle.coordinator.consumer.assignors import MemberSpec, ServerAssignor, spec_of
from huddle.coordinator.consumer.group import ConsumerGroup
from huddle.coordinator.consumer.messages import RefusedError, TopicView
from huddle.protocol.consumer_messages import MAX_REGEX_LENGTH
from huddle.protocol.errors import ErrorCode

_COMPILED: dict[str, Any] = {}  # an RE2 pattern by its text
_CACHED = 1_000  # patterns kept compiled (each up to ``_MEMORY`` bytes)
# RE2 compiles in time that grows faster than the pattern's length (``(.{1,100})`` 200
# times takes seconds, on the event loop): a longer pattern, or one whose program would
# take more memory, is refused rather than holding every group of the coordinator up.
_MEMORY = 1 << 20


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # refused patterns are answered, not written to stderr
    options.never_capture = True
    options.max_mem = _MEMORY
    return options


_OPTIONS = _options()


def compiled(regex: str) -> Any:
    """The compiled regex (RE2; its ``fullmatch``); INVALID_REGULAR_EXPRESSION when it does
    not compile (bad syntax, a construct RE2 has not, longer than ``MAX_REGEX_LENGTH``, or
    its program over 1 MiB)."""
    pattern = _COMPILED.get(regex)
    if pattern is None:
        if len(regex) > MAX_REGEX_LENGTH:
            raise RefusedError(
                ErrorCode.INVALID_REGULAR_EXPRESSION,
                f"SubscribedTopicRegex is {len(regex)} characters long: at most "
                f"{MAX_REGEX_LENGTH} are taken",
            )
        try:
            pattern = re2.compile(regex, _OPTIONS)
        except re2.error as error:
            why = error.args[0] if error.args else error
            if isinstance(why, bytes):
                why = why.decode(errors="replace")
            raise RefusedError(
                ErrorCode.INVALID_REGULAR_EXPRESSION,
                f"SubscribedTopicRegex {regex!r} is not a valid regular expression: {why}",
            ) from None
        if len(_COMPILED) >= _CACHED:
            _COMPILED.clear()
        _COMPILED[regex] = pattern
    return pattern


def refresh_subscriptions(group: ConsumerGroup, view: TopicView) -> bool:
    """Match the group's regexes again if the view changed, and work out which topics the
    group subscribes to with their partition counts. True when that changed (the group
    epoch must move)."""
    regexes = {m.subscribed_topic_regex for m in group.members.values()}
    regexes.discard(None)
    regexes.discard("")
    fresh_view = view.version != group.topics_version
    resolved: dict[str, frozenset[str]] = {}
    for regex in regexes:
        assert regex is not None
        known = group.resolved.get(regex)
        if known is None or fresh_view:
            pattern = compiled(regex)
            allowed = view.describable
            known = frozenset(
                t
                for t in view.partitions
                if pattern.fullmatch(t) and (allowed is None or allowed(t))
            )
        resolved[regex] = known
    group.resolved = resolved
    group.topics_version = view.version

    subscribed: set[str] = set()
    for member in group.members.values():
        subscribed |= group.subscribed_topics(member)
    partitions = {t: view.partitions[t] for t in sorted(subscribed) if t in view.partitions}
    ids = {t: view.ids[t] for t in partitions if t in view.ids}
    held = group.subscribed_ids
    # an id seen for the first time (a group kept before ids were) is no change
    recreated = any(held.get(t, topic_id) != topic_id for t, topic_id in ids.items())
    group.subscribed_ids = ids
    if partitions == group.subscribed_partitions and not recreated:
        return False
    group.subscribed_partitions = partitions
    return True


def compute_target(
    group: ConsumerGroup,
    assignors: Mapping[str, ServerAssignor],
    default_assignor: str,
    now: float,
    memory_ms: float,
) -> None:
    """The target assignment at the group epoch, from the previous target (what each
    member's target gave it), with the group's preferred assignor. Members that left more
    than ``memory_ms`` ago are forgotten (assignors see the others as ``departed``)."""
    partitions = group.subscribed_partitions
    members = {
        member_id: MemberSpec(
            member_id,
            frozenset(t for t in group.subscribed_topics(member) if t in partitions),
            group.target.get(member_id, {}),
            member.instance_id,
            member.rack_id,
        )
        for member_id, member in group.members.items()
    }
    for member_id, departure in list(group.departed.items()):
        if departure.at < now - memory_ms or member_id in members:
            del group.departed[member_id]
    assignor = assignors[group.preferred_assignor(default_assignor)]
    result = assignor.assign(spec_of(members, partitions, now, group.departed))
    group.target = dict(result.assignments)
    group.target_epoch = group.group_epoch
    group.recheck_at = result.recheck_at
