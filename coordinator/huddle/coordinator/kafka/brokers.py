"""What a Kafka client asks of the cluster before anything else: ApiVersions, Metadata
and FindCoordinator.

- ApiVersions is answered by the listener itself, from ``apis.SERVED``; a version it does
  not serve gets a v0 answer with UNSUPPORTED_VERSION and ApiVersions' own range (clients
  retry with a version in it), as Kafka answers. From v3 the client names its software and version
  (KIP-511): a name or version Kafka's ``ApiVersionsRequest.isValid`` refuses is answered
  INVALID_REQUEST with no ranges, as Kafka answers it.
- Metadata names the brokers: this listener's advertised address as node 0 without a
  cluster; in a cluster, every live node's Kafka address with its broker id, and this node
  as the controller (any node serves the admin APIs). Each partition has one leader, its
  only replica (``leaders``: the same on every node). Its topics are huddle's topic
  registry, read through the core (a ListTopics: screened by the ACLs like any other
  request); a topic it does not hold is UNKNOWN_TOPIC_OR_PARTITION: nothing is created by
  asking for it. From v10 each topic comes with its id (the one huddle gave it at its
  creation); from v12 a topic may be asked for by id (a non-zero id: its name is not
  read), and an id not known is UNKNOWN_TOPIC_ID, with a null name, as Kafka answers it; a
  topic asked for by id that the ACLs refuse is TOPIC_AUTHORIZATION_FAILED with its id and
  a null name (ids are not secret, names are).
- FindCoordinator asks the core where each group is (the ACLs and a loading data dir
  answer as for huddle's wire), and names the Kafka listener of the node the core names:
  this one without a cluster; in a cluster, the node that owns the group's shard
  (COORDINATOR_NOT_AVAILABLE, which clients retry, while no node does or while that node
  has no Kafka listener this node knows of). v4+ batches keys. Only group keys are
  served: a transaction or share coordinator is INVALID_REQUEST.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final
from uuid import UUID

import structlog

from huddle.coordinator.kafka import apis, metadata_encoding
from huddle.coordinator.kafka.schemas import ZERO_UUID
from huddle.coordinator.kafka.translate import (
    UNKNOWN_TOPIC_ID,
    Context,
    Encoded,
    Plan,
    Values,
    get,
    message,
)
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    Request,
    Response,
)

log = structlog.get_logger("huddle.kafka")

CLUSTER_ID: Final = "huddle"
_GROUP_KEY: Final = 0
_NOT_ASKED: Final = -(2**31)
_BY_ID_FROM: Final = 12  # Metadata's version from which a topic may be asked for by id
_NAMES_SOFTWARE_FROM: Final = 3  # ApiVersions' version from which the client names itself
# Kafka's ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN
_SOFTWARE: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def api_version_ranges() -> list[Values]:
    return [
        {"api_key": int(api), "min_version": low, "max_version": high}
        for api, (low, high) in sorted(apis.SERVED.items())
    ]


def api_versions(req: Any, version: int, ctx: Context) -> Plan:
    if version >= _NAMES_SOFTWARE_FROM and not (
        _SOFTWARE.fullmatch(req.client_software_name)
        and _SOFTWARE.fullmatch(req.client_software_version)
    ):
        refused = {"error_code": int(ErrorCode.INVALID_REQUEST), "api_keys": []}
        return Plan([], lambda parts: refused)
    return Plan([], lambda parts: {"error_code": 0, "api_keys": api_version_ranges()})


def unsupported_api_versions() -> Values:
    """The v0 answer to an ApiVersions of a version not served: ApiVersions' own range
    alone, as Kafka's ``ApiVersionsRequest.getErrorResponse`` (the client retries with a
    version in it and is then told every range)."""
    low, high = apis.SERVED[apis.Api.API_VERSIONS]
    only = {"api_key": int(apis.Api.API_VERSIONS), "min_version": low, "max_version": high}
    return {"error_code": int(ErrorCode.UNSUPPORTED_VERSION), "api_keys": [only]}


def metadata(req: Any, version: int, ctx: Context) -> Plan:
    asked = req.topics
    every = asked is None or (version == 0 and not asked)  # v0: an empty list is every topic
    by_id: dict[str, UUID] = {}  # the topics asked for by id (v12+), by name
    unknown: list[UUID] = []  # ids asked for that no topic has
    names: list[str] | None = None
    if not every:
        names = []
        for t in asked:
            topic_id = get(t, "topic_id")
            if version < _BY_ID_FROM or topic_id is None or topic_id == ZERO_UUID:
                names.append(t.name or "")
            elif (name := ctx.topic_names.get(topic_id)) is None:
                unknown.append(topic_id)
            else:
                by_id[name] = topic_id
                names.append(name)
    node = ctx.broker[0]

    def answer(parts: Sequence[Response]) -> Encoded:
        (r,) = parts
        ids: dict[str, UUID | None] = {}
        if type(r) is ListTopicsResponse and not r.error_code:
            found = [(t.name, t.error_code, 0 if t.error_code else t.partitions) for t in r.topics]
            ids = {t.name: t.topic_id for t in r.topics}
            size = metadata_encoding.partitions_bytes(version, sum(c for _, _, c in found))
            if size > ctx.max_response_bytes:
                # answered as an answer over the limit is (``answers``), without first
                # making it: a million partitions took 2 s of the event loop to encode
                log.warning(
                    "response_too_large",
                    api_key=metadata_encoding.METADATA,
                    size=size,
                    at_least=True,
                )
                found = [(n, ErrorCode.MESSAGE_TOO_LARGE, 0) for n in names or ()]
        else:
            found = [(n, r.error_code, 0) for n in names or ()]
        listed = list(ctx.brokers())
        if all(b[0] != node for b in listed):
            # this node answers, so it is alive, though its view of the cluster has not read
            # its own registration yet: named, since it is named the controller (a client
            # asked for an unknown controller id fails: kafka-python's UnknownBrokerIdError)
            listed = sorted([*listed, ctx.broker])
        values = {
            "brokers": [{"node_id": n, "host": h, "port": p} for n, h, p in listed],
            "cluster_id": CLUSTER_ID,
            "controller_id": node,
            "topics": [
                *(_topic(name, code, ids.get(name), by_id.get(name)) for name, code, _ in found),
                *(_topic(None, UNKNOWN_TOPIC_ID, i, i) for i in unknown),
            ],
            "cluster_authorized_operations": _NOT_ASKED,
        }
        leaders = [ctx.leaders(name, count) for name, _, count in found] + [[] for _ in unknown]
        return Encoded(metadata_encoding.encode(version, values, leaders))

    return Plan([ListTopicsRequest(topics=names)], answer)


def _topic(name: str | None, code: int, topic_id: UUID | None, asked: UUID | None) -> Values:
    """A topic of a Metadata answer; its partitions are ``metadata_encoding``'s. One asked
    for by id (``asked``) that is not answered is named by that id alone."""
    if asked is not None and code:
        name, topic_id = None, asked
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,  # None: the zero id
        "is_internal": False,
        "topic_authorized_operations": _NOT_ASKED,
    }


def find_coordinator(req: Any, version: int, ctx: Context) -> Plan:
    batch = get(req, "coordinator_keys")
    keys: list[str] = list(batch) if batch is not None else [get(req, "key", "")]
    served = get(req, "key_type", _GROUP_KEY) == _GROUP_KEY
    calls: list[Request] = [FindCoordinatorRequest(group_id=k) for k in keys] if served else []

    def located(part: Response | None) -> Values:
        if part is None:
            return {
                "error_code": int(ErrorCode.INVALID_REQUEST),
                "error_message": "huddle coordinates groups only (key type 0)",
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        owner = part.node_id if type(part) is FindCoordinatorResponse else ""
        found = None if part.error_code else ctx.coordinator(owner)
        if found is None:
            code, text = part.error_code, message(part)
            if not code:
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                text = f"node {owner} has no Kafka listener known here yet"
            return {
                "error_code": int(code),
                "error_message": text,
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        node, host, port = found
        return {"error_code": 0, "node_id": node, "host": host, "port": port}

    def answer(parts: Sequence[Response]) -> Values:
        found = list(parts) if served else [None] * len(keys)
        if batch is None:
            return located(found[0])
        return {
            "coordinators": [
                {"key": k, "host": "", "port": -1, **located(p)}
                for k, p in zip(keys, found, strict=True)
            ]
        }

    return Plan(calls, answer)
