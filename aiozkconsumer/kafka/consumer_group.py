# mypy: allow-subclassing-any
# (aiokafka ships no type information: its protocol base classes are Any to mypy.)
"""The consumer group protocol of KIP-848 (``group.protocol=consumer``), through aiokafka's
protocol classes.

aiokafka (0.14) does not speak it, so the requests are declared here with its ``Struct`` /
``RequestStruct`` / ``Request`` machinery, from the message schemas Kafka 4.3 ships
(``common/message/*.json`` in kafka-clients):

- ``ConsumerGroupHeartbeat`` (key 68, v0-v1, flexible only): join (member epoch 0), heartbeat,
  acknowledge an assignment (the owned partitions), leave (epoch -1; a static member, with
  ``InstanceId``, epoch -2: it keeps its assignment for its return within the session
  timeout). Version 1 adds ``SubscribedTopicRegex`` and requires the member to generate its
  own member id (KIP-1082).
- ``OffsetCommit`` v9: the first version a member of a ``consumer`` group may commit with (the
  broker answers ``UNSUPPORTED_VERSION`` below it); the same fields as v8, the generation
  field carrying the member epoch.
- ``Metadata`` v12: for the topic ids the assignment is given in.

Partitions of an assignment come as topic ids (UUIDs, 16 raw bytes here); the client resolves
them to names with Metadata. Every failure is a
:class:`~aiozkconsumer.kafka.group.GroupRequestError` (translated in
:class:`ConsumerGroupClient`); the member's driver is ``aiozkconsumer.group.consumer_protocol``.

OffsetFetch needs no new version: the broker accepts an OffsetFetch without member id and
epoch (v1-v8) from anyone, as from the admin client (``ConsumerGroup.validateOffsetFetch``).
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from io import BytesIO
from typing import Any, TypeAlias

from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol.admin import DescribeConfigsRequest
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int8,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from ..records import TopicPartition
from .channel import KafkaGetter, OffsetsChannel
from .client import KafkaClient
from .errors import NONE, error_name
from .group import GroupClient, GroupRequestError

__all__ = [
    "BROKER_REQUIREMENT",
    "CONSUMER_GROUP_HEARTBEAT_KEY",
    "FENCED_MEMBER_EPOCH",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "STALE_MEMBER_EPOCH",
    "ConsumerGroupClient",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatRequest_v0",
    "ConsumerGroupHeartbeatRequest_v1",
    "ConsumerGroupHeartbeatResponse_v0",
    "ConsumerGroupHeartbeatResponse_v1",
    "HeartbeatResult",
    "MemberEpochOffsetsChannel",
    "MetadataRequest_v12",
    "MetadataResponse_v12",
    "NullableStruct",
    "OffsetCommitRequest_v9",
    "OffsetCommitResponse_v9",
    "OffsetCommitV9Request",
    "TopicIdsRequest",
    "UnsupportedProtocolError",
    "Uuid",
    "consumer_error_name",
    "decode_heartbeat_response",
    "new_member_id",
]

log = logging.getLogger(__name__)

CONSUMER_GROUP_HEARTBEAT_KEY = 68
LEAVE_GROUP_MEMBER_EPOCH = -1
"""The member epoch a member leaves the group with."""
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
"""The member epoch a static member (``group.instance.id``) leaves with: the coordinator keeps
its assignment until its session times out, for a member with the same instance id to take
over without a rebalance (``ConsumerGroupHeartbeatRequest.LEAVE_GROUP_STATIC_MEMBER_EPOCH``)."""

# Error codes (org.apache.kafka.common.protocol.Errors) of the consumer protocol.
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
UNKNOWN_MEMBER_ID = 25
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
GROUP_ID_NOT_FOUND = 69
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_REGULAR_EXPRESSION = 128

_NAMES = {
    GROUP_MAX_SIZE_REACHED: "GROUP_MAX_SIZE_REACHED",
    FENCED_INSTANCE_ID: "FENCED_INSTANCE_ID",
    FENCED_MEMBER_EPOCH: "FENCED_MEMBER_EPOCH",
    UNRELEASED_INSTANCE_ID: "UNRELEASED_INSTANCE_ID",
    UNSUPPORTED_ASSIGNOR: "UNSUPPORTED_ASSIGNOR",
    STALE_MEMBER_EPOCH: "STALE_MEMBER_EPOCH",
    INVALID_REGULAR_EXPRESSION: "INVALID_REGULAR_EXPRESSION",
}
_FATAL = frozenset(
    {
        TOPIC_AUTHORIZATION_FAILED,
        GROUP_AUTHORIZATION_FAILED,
        UNSUPPORTED_VERSION,
        INVALID_REQUEST,
        GROUP_MAX_SIZE_REACHED,
        UNSUPPORTED_ASSIGNOR,
        FENCED_INSTANCE_ID,
        UNRELEASED_INSTANCE_ID,
        INVALID_REGULAR_EXPRESSION,
        GROUP_ID_NOT_FOUND,
    }
)
"""Heartbeat answers no retry can fix (a ``GROUP_ID_NOT_FOUND``: the group is a classic group
with members the broker does not convert, which a ``consumer`` member cannot join;
``FENCED_INSTANCE_ID`` / ``UNRELEASED_INSTANCE_ID``: fatal as in the Java client's
``ConsumerHeartbeatRequestManager.handleSpecificError``)."""

BROKER_REQUIREMENT = (
    "group.protocol=consumer needs a Kafka 4.0+ broker in KRaft mode (the ConsumerGroupHeartbeat "
    "API of KIP-848, key 68); use group.protocol=classic with this cluster"
)


def consumer_error_name(code: int) -> str:
    """Kafka's name of an error code, including the codes of KIP-848 aiokafka does not know."""
    name = _NAMES.get(code)
    return f"{name} ({code})" if name is not None else error_name(code)


def new_member_id() -> str:
    """A member id generated by the member (KIP-1082), as the Java client's ``Uuid``: 22
    url-safe base64 characters of a random UUID."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


# -- types aiokafka lacks ------------------------------------------------------------------


class Uuid:
    """The protocol's ``uuid``: 16 raw bytes (a topic id)."""

    @classmethod
    def encode(cls, value: bytes) -> bytes:
        if len(value) != 16:
            raise ValueError(f"a uuid is 16 bytes, got {len(value)}")
        return bytes(value)

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        value: bytes = data.read(16)
        if len(value) != 16:
            raise ValueError("Buffer underrun decoding uuid")
        return value

    @classmethod
    def repr(cls, value: bytes) -> str:
        return str(uuid.UUID(bytes=bytes(value)))


class NullableStruct:
    """A nullable struct field of a flexible version: ``-1`` (int8) for null, else ``1`` and
    the struct (as Kafka's generated ``write``/``read``)."""

    def __init__(self, *fields: tuple[str, Any]) -> None:
        self.schema = Schema(*fields)

    def encode(self, value: Sequence[Any] | None) -> bytes:
        if value is None:
            return bytes(Int8.encode(-1))
        return bytes(Int8.encode(1)) + bytes(self.schema.encode(value))

    def decode(self, data: BytesIO) -> tuple[Any, ...] | None:
        if Int8.decode(data) < 0:
            return None
        return tuple(self.schema.decode(data))

    def repr(self, value: Sequence[Any] | None) -> str:
        return "NULL" if value is None else str(self.schema.repr(value))


# -- ConsumerGroupHeartbeat (key 68) -------------------------------------------------------

_TOPIC_PARTITIONS = CompactArray(
    ("topic_id", Uuid),
    ("partitions", CompactArray(Int32)),
    ("tags", TaggedFields),
)


class ConsumerGroupHeartbeatResponse_v0(Response):
    API_KEY = 68
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("error_message", CompactString("utf-8")),
        ("member_id", CompactString("utf-8")),
        ("member_epoch", Int32),
        ("heartbeat_interval_ms", Int32),
        (
            "assignment",
            NullableStruct(("topic_partitions", _TOPIC_PARTITIONS), ("tags", TaggedFields)),
        ),
        ("tags", TaggedFields),
    )


class ConsumerGroupHeartbeatResponse_v1(Response):
    API_KEY = 68
    API_VERSION = 1
    SCHEMA = ConsumerGroupHeartbeatResponse_v0.SCHEMA


class ConsumerGroupHeartbeatRequest_v0(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 68
    API_VERSION = 0
    RESPONSE_TYPE = ConsumerGroupHeartbeatResponse_v0
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        ("member_id", CompactString("utf-8")),
        ("member_epoch", Int32),
        ("instance_id", CompactString("utf-8")),
        ("rack_id", CompactString("utf-8")),
        ("rebalance_timeout_ms", Int32),
        ("subscribed_topic_names", CompactArray(CompactString("utf-8"))),
        ("server_assignor", CompactString("utf-8")),
        ("topic_partitions", _TOPIC_PARTITIONS),
        ("tags", TaggedFields),
    )


class ConsumerGroupHeartbeatRequest_v1(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 68
    API_VERSION = 1
    RESPONSE_TYPE = ConsumerGroupHeartbeatResponse_v1
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        ("member_id", CompactString("utf-8")),
        ("member_epoch", Int32),
        ("instance_id", CompactString("utf-8")),
        ("rack_id", CompactString("utf-8")),
        ("rebalance_timeout_ms", Int32),
        ("subscribed_topic_names", CompactArray(CompactString("utf-8"))),
        ("subscribed_topic_regex", CompactString("utf-8")),
        ("server_assignor", CompactString("utf-8")),
        ("topic_partitions", _TOPIC_PARTITIONS),
        ("tags", TaggedFields),
    )


ConsumerGroupHeartbeatRequestStruct: TypeAlias = (
    ConsumerGroupHeartbeatRequest_v0 | ConsumerGroupHeartbeatRequest_v1
)


class ConsumerGroupHeartbeatRequest(Request[ConsumerGroupHeartbeatRequestStruct]):
    """ConsumerGroupHeartbeat; the version is the highest both sides speak (v1, else v0).

    Args:
        group_id: ``group.id``.
        member_id: the member id (generated by the member, :func:`new_member_id`).
        member_epoch: 0 to join, -1 to leave (-2: a static member's leave), else the epoch
            the coordinator gave.
        rebalance_timeout_ms: -1 (unchanged), else how long the coordinator waits for this
            member to revoke partitions.
        subscribed_topic_names: ``None`` (unchanged) or the topics.
        subscribed_topic_regex: ``None`` (unchanged) or a RE2/J regex (v1 only).
        server_assignor: ``None`` (the group's, or the broker's default) or its name.
        topic_partitions: ``None`` (unchanged) or the owned ``[(topic id, [partitions])]``.
        instance_id: ``group.instance.id`` (``None``: a dynamic member); a static member
            sends it with every heartbeat, its leave included, as the Java client.
        rack_id: ``client.rack`` when joining; ``None``: unchanged.

    Raises:
        IncompatibleBrokerVersion: (at ``prepare``) a regex for a broker without v1.
    """

    API_KEY = 68

    def __init__(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        *,
        rebalance_timeout_ms: int = -1,
        subscribed_topic_names: Sequence[str] | None = None,
        subscribed_topic_regex: str | None = None,
        server_assignor: str | None = None,
        topic_partitions: Sequence[tuple[bytes, Sequence[int]]] | None = None,
        instance_id: str | None = None,
        rack_id: str | None = None,
    ) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.member_epoch = member_epoch
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.subscribed_topic_names = (
            None if subscribed_topic_names is None else list(subscribed_topic_names)
        )
        self.subscribed_topic_regex = subscribed_topic_regex
        self.server_assignor = server_assignor
        self.topic_partitions: list[tuple[bytes, list[int], dict[int, bytes]]] | None = (
            None
            if topic_partitions is None
            else [(tid, list(parts), {}) for tid, parts in topic_partitions]
        )
        self.instance_id = instance_id
        self.rack_id = rack_id

    def build(
        self, request_struct_class: type[ConsumerGroupHeartbeatRequestStruct]
    ) -> ConsumerGroupHeartbeatRequestStruct:
        head: tuple[Any, ...] = (
            self.group_id,
            self.member_id,
            self.member_epoch,
            self.instance_id,
            self.rack_id,
            self.rebalance_timeout_ms,
            self.subscribed_topic_names,
        )
        tail: tuple[Any, ...] = (self.server_assignor, self.topic_partitions, {})
        if request_struct_class.API_VERSION >= 1:
            return request_struct_class(*head, self.subscribed_topic_regex, *tail)
        if self.subscribed_topic_regex is not None:
            raise IncompatibleBrokerVersion(
                "ConsumerGroupHeartbeat v0 has no SubscribedTopicRegex (the broker needs v1)"
            )
        return request_struct_class(*head, *tail)


# -- OffsetCommit v9 (key 8) ---------------------------------------------------------------


class OffsetCommitResponse_v9(Response):
    API_KEY = 8
    API_VERSION = 9
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class OffsetCommitRequest_v9(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 8
    API_VERSION = 9
    RESPONSE_TYPE = OffsetCommitResponse_v9
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        ("generation_id_or_member_epoch", Int32),
        ("member_id", CompactString("utf-8")),
        ("group_instance_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("committed_metadata", CompactString("utf-8")),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class OffsetCommitV9Request(Request[OffsetCommitRequest_v9]):
    """OffsetCommit v9 with the member epoch (a member of a ``consumer`` group).

    Args:
        group_id: ``group.id``.
        member_epoch: the member's current epoch.
        member_id: the member id.
        offsets: ``{partition: next offset to read}``.
        metadata: ``{partition: metadata string}``; others get ``""``.
        leader_epochs: ``{partition: leader epoch of the record before the offset}``
            (``CommittedLeaderEpoch``, KIP-320); others get -1 (unknown).
        group_instance_id: ``group.instance.id`` (``GroupInstanceId``), default ``None``.

    Raises:
        NotImplementedError: (at ``prepare``) the broker has no OffsetCommit v9.
    """

    API_KEY = 8

    def __init__(
        self,
        group_id: str,
        member_epoch: int,
        member_id: str,
        offsets: Mapping[TopicPartition, int],
        metadata: Mapping[TopicPartition, str] | None = None,
        leader_epochs: Mapping[TopicPartition, int] | None = None,
        group_instance_id: str | None = None,
    ) -> None:
        texts = metadata or {}
        epochs = leader_epochs or {}
        by_topic: dict[str, list[tuple[int, int, int, str, dict[int, bytes]]]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(
                (tp.partition, offset, epochs.get(tp, -1), texts.get(tp, ""), {})
            )
        self.group_id = group_id
        self.member_epoch = member_epoch
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.topics: list[tuple[str, list[Any], dict[int, bytes]]] = [
            (topic, parts, {}) for topic, parts in sorted(by_topic.items())
        ]

    def build(self, request_struct_class: type[OffsetCommitRequest_v9]) -> OffsetCommitRequest_v9:
        return request_struct_class(
            self.group_id,
            self.member_epoch,
            self.member_id,
            self.group_instance_id,
            self.topics,
            {},
        )


# -- Metadata v12 (key 3): topic ids -------------------------------------------------------


class MetadataResponse_v12(Response):
    API_KEY = 3
    API_VERSION = 12
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "brokers",
            CompactArray(
                ("node_id", Int32),
                ("host", CompactString("utf-8")),
                ("port", Int32),
                ("rack", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("cluster_id", CompactString("utf-8")),
        ("controller_id", Int32),
        (
            "topics",
            CompactArray(
                ("error_code", Int16),
                ("name", CompactString("utf-8")),
                ("topic_id", Uuid),
                ("is_internal", Boolean),
                (
                    "partitions",
                    CompactArray(
                        ("error_code", Int16),
                        ("partition_index", Int32),
                        ("leader_id", Int32),
                        ("leader_epoch", Int32),
                        ("replica_nodes", CompactArray(Int32)),
                        ("isr_nodes", CompactArray(Int32)),
                        ("offline_replicas", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("topic_authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class MetadataRequest_v12(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 3
    API_VERSION = 12
    RESPONSE_TYPE = MetadataResponse_v12
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("topic_id", Uuid),
                ("name", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("allow_auto_topic_creation", Boolean),
        ("include_topic_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


_ZERO_UUID = bytes(16)


class TopicIdsRequest(Request[MetadataRequest_v12]):
    """Metadata v12 of some topics (``None``: all), for their topic ids; no auto-creation."""

    API_KEY = 3

    def __init__(self, topics: Iterable[str] | None) -> None:
        self.topics: list[tuple[bytes, str, dict[int, bytes]]] | None = (
            None if topics is None else [(_ZERO_UUID, t, {}) for t in sorted(topics)]
        )

    def build(self, request_struct_class: type[MetadataRequest_v12]) -> MetadataRequest_v12:
        return request_struct_class(self.topics, False, False, {})


# -- the client ----------------------------------------------------------------------------


class UnsupportedProtocolError(GroupRequestError):
    """The broker does not speak the consumer group protocol (no ConsumerGroupHeartbeat)."""


@dataclass(frozen=True)
class HeartbeatResult:
    """A ConsumerGroupHeartbeat answer without error.

    Attributes:
        member_id: this member's id (as answered; the one sent when ``None`` came back).
        member_epoch: the member's epoch now.
        heartbeat_interval_ms: the pace the coordinator asks for.
        assignment: ``None`` (unchanged) or the whole assignment ``{topic id: partitions}``
            the member may use now.
    """

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Mapping[bytes, tuple[int, ...]] | None


def decode_heartbeat_response(resp: Any, member_id: str) -> tuple[int, str, HeartbeatResult]:
    """``(error code, error message, result)`` of a decoded heartbeat response."""
    assignment: dict[bytes, tuple[int, ...]] | None = None
    if resp.assignment is not None:
        topic_partitions = resp.assignment[0] or []
        assignment = {}
        for topic_id, partitions, _tags in topic_partitions:
            assignment[bytes(topic_id)] = tuple(sorted(int(p) for p in partitions or ()))
    result = HeartbeatResult(
        member_id=str(resp.member_id) if resp.member_id else member_id,
        member_epoch=int(resp.member_epoch),
        heartbeat_interval_ms=int(resp.heartbeat_interval_ms),
        assignment=assignment,
    )
    return int(resp.error_code), str(resp.error_message or ""), result


class ConsumerGroupClient(GroupClient):
    """Requests of the consumer group protocol to one group's coordinator.

    Args: as :class:`~aiozkconsumer.kafka.group.GroupClient`.
    """

    async def consumer_heartbeat(self, request: ConsumerGroupHeartbeatRequest) -> HeartbeatResult:
        """Send one ConsumerGroupHeartbeat.

        Raises:
            UnsupportedProtocolError: the broker has no ConsumerGroupHeartbeat (Kafka before
                4.0, or ZooKeeper mode): fatal.
            GroupRequestError: an error code or no answer; ``fatal`` for authorization,
                an unknown assignor, an invalid request, a full group, and for the static
                membership codes ``FENCED_INSTANCE_ID`` / ``UNRELEASED_INSTANCE_ID``;
                ``FENCED_MEMBER_EPOCH`` / ``UNKNOWN_MEMBER_ID``: rejoin with epoch 0.
        """
        resp = await self._to_coordinator(
            request, "ConsumerGroupHeartbeat", self.request_timeout_ms / 1000
        )
        code, message, result = decode_heartbeat_response(resp, request.member_id)
        if code != NONE:
            detail = f"group {self.group!r}" + (f": {message}" if message else "")
            if code == UNSUPPORTED_VERSION:
                raise UnsupportedProtocolError(
                    "ConsumerGroupHeartbeat", code, f"{detail}; {BROKER_REQUIREMENT}", fatal=True
                )
            if code == GROUP_ID_NOT_FOUND:
                detail += (
                    " (a classic group with members the broker does not convert, see its "
                    "group.consumer.migration.policy: a group.protocol=consumer member cannot "
                    "join it)"
                )
            raise _HeartbeatError("ConsumerGroupHeartbeat", code, detail, fatal=code in _FATAL)
        return result

    async def topic_ids(self, topics: Iterable[str] | None = None) -> dict[bytes, str]:
        """``{topic id: name}`` of ``topics`` (``None``: every topic), from Metadata v12.

        Raises:
            GroupRequestError: no broker answered, or the broker lacks Metadata v12.
        """
        kafka = await self._kafka_getter()
        node = kafka.raw.get_random_node()
        if node is None:
            raise GroupRequestError("Metadata", None, "no broker known")
        resp = await self._send(kafka, node, TopicIdsRequest(topics), None, "Metadata")
        return {
            bytes(topic_id): str(name)
            for code, name, topic_id, *_ in resp.topics
            if int(code) == NONE and name is not None and bytes(topic_id) != _ZERO_UUID
        }

    async def session_timeout_ms(self) -> int | None:
        """The group's session timeout on the broker (``consumer.session.timeout.ms`` of the
        group, KIP-848's group config: the group's own value, else the broker's
        ``group.consumer.session.timeout.ms``), from DescribeConfigs of the ``GROUP``
        resource (type 32, Kafka 4.0+), asked of the group's coordinator (the broker the
        member's join needs anyway). The member cannot send its own (the broker decides
        it), so it asks, to bound how long it may hand records out without an answered
        heartbeat.

        Returns:
            The timeout in ms, or ``None`` when the broker answers without saying (an error
            such as ``GROUP_AUTHORIZATION_FAILED`` without DescribeConfigs on the group, a
            broker without the request or the resource type, or a value that is not a
            number).

        Raises:
            GroupRequestError: (not ``fatal``) no answer: no coordinator found (or it is
                moving or loading), or it did not answer. The caller must not take that for
                "the default applies": a member that assumed the 45 s default on a broker
                set lower went on handing records out after the broker had given its
                partitions away.
        """
        request = DescribeConfigsRequest([(_GROUP_RESOURCE, self.group, [_SESSION_KEY])])
        try:
            resp = await self._to_coordinator(
                request, "DescribeConfigs", self.request_timeout_ms / 1000
            )
        except IncompatibleBrokerVersion:
            return None
        except GroupRequestError as e:
            if e.fatal:
                return None  # the broker cannot be asked (too old, no version in common)
            raise
        return decode_session_timeout(resp.resources)

    async def _send(
        self,
        kafka: KafkaClient,
        node: int,
        request: Any,
        timeout_s: float | None,
        what: str = "FindCoordinator",
    ) -> Any:
        try:
            return await super()._send(kafka, node, request, timeout_s, what)
        except GroupRequestError as e:
            if e.fatal and isinstance(request, ConsumerGroupHeartbeatRequest):
                raise UnsupportedProtocolError(
                    what,
                    None,
                    f"{kafka.broker_address(node)} does not support it: {BROKER_REQUIREMENT}",
                    fatal=True,
                ) from e
            raise


def decode_session_timeout(resources: Any) -> int | None:
    """``consumer.session.timeout.ms`` from a DescribeConfigs answer's resources (``None``:
    an error code, no such entry, or a value that is not a number).

    Args:
        resources: ``[(error code, message, type, name, [(name, value, ...)], ...)]``.

    Returns:
        The timeout in ms, or ``None``.
    """
    for code, _msg, _type, _name, entries, *_ in resources:
        if int(code) != NONE:
            return None
        for name, value, *_ in entries:
            if name == _SESSION_KEY and value is not None and str(value).isdigit():
                return int(value)
    return None


_GROUP_RESOURCE = 32
"""DescribeConfigs' resource type of a group (``ConfigResource.Type.GROUP``, KIP-848)."""
_SESSION_KEY = "consumer.session.timeout.ms"


class _HeartbeatError(GroupRequestError):
    """A heartbeat error code, named with the KIP-848 codes aiokafka does not know."""

    def __init__(self, what: str, code: int, detail: str, *, fatal: bool = False) -> None:
        super().__init__(what, code, detail, fatal=fatal)
        self.args = (f"{what}: {consumer_error_name(code)}: {detail}",)

    @property
    def fenced(self) -> bool:
        """The member's epoch is over (``FENCED_MEMBER_EPOCH``, ``UNKNOWN_MEMBER_ID``)."""
        return self.code in (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID)


class MemberEpochOffsetsChannel(OffsetsChannel):
    """The offsets channel of a ``consumer`` group's member: OffsetCommit v9, whose
    generation field carries the member epoch (the broker refuses a member's commit below
    v9). OffsetFetch and coordinator discovery are the base channel's.

    Args:
        kafka_getter, group, socket_timeout_ms: as :class:`OffsetsChannel`.
        group_instance_id: ``group.instance.id`` sent with each commit, default ``None``.
    """

    def __init__(
        self,
        kafka_getter: KafkaGetter,
        group: str,
        *,
        socket_timeout_ms: int,
        group_instance_id: str | None = None,
    ) -> None:
        super().__init__(kafka_getter, group, socket_timeout_ms=socket_timeout_ms)
        self.group_instance_id = group_instance_id

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        generation: int = -1,
        member_id: str = "",
        metadata: Mapping[TopicPartition, str] | None = None,
        leader_epochs: Mapping[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, int]:
        """As :meth:`OffsetsChannel.commit`, with ``generation`` the member epoch.

        Raises:
            ChannelError: no usable answer (``fatal``: the broker has no OffsetCommit v9).
        """
        request = OffsetCommitV9Request(
            self.group,
            generation,
            member_id,
            offsets,
            metadata,
            leader_epochs,
            group_instance_id=self.group_instance_id,
        )
        async with self._lock:
            response = await self._to_coordinator(request, "OffsetCommit")
        codes = dict.fromkeys(offsets, -1)
        for topic, parts, *_ in response.topics:
            for partition, code, *_ in parts:
                tp = TopicPartition(topic, partition)
                if tp in codes:
                    codes[tp] = int(code)
        return codes
