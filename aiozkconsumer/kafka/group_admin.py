# mypy: allow-subclassing-any
# (aiokafka ships no type information: its protocol base classes are Any to mypy.)
"""The group administration requests of ``kafka-consumer-groups.sh`` aiokafka does not speak.

Declared with aiokafka's ``Struct`` / ``RequestStruct`` / ``Request`` machinery from the message
schemas Kafka 4.3 ships (``common/message/*.json`` in kafka-clients), as
:mod:`aiozkconsumer.kafka.consumer_group` does for the member's requests:

- ``ListGroups`` v4-v5 (key 16): every group a broker coordinates, with its state (v4) and
  its type, ``classic`` or ``consumer`` (v5, KIP-848).
- ``DescribeGroups`` v5 (key 15): a classic group's state and members, each with its
  ``group.instance.id`` (aiokafka decodes only up to v2, which has none).
- ``ConsumerGroupDescribe`` v0 (key 69): a ``consumer`` group's (KIP-848) state, assignor and
  members; DescribeGroups calls such a group ``Dead``.
- ``DeleteGroups`` v2 (key 42) and ``OffsetDelete`` v0 (key 47): ``--delete`` and
  ``--delete-offsets``.

Only the wire shapes and their decoding live here; the tools that send them are
:class:`~aiozkconsumer.tools.KafkaGroupAdmin`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Array,
    Boolean,
    CompactArray,
    CompactBytes,
    CompactString,
    Int16,
    Int32,
    Schema,
    String,
    TaggedFields,
)

from ..records import TopicPartition
from .consumer_group import Uuid

__all__ = [
    "ConsumerGroupDescribeRequest",
    "DeleteGroupsRequest",
    "DescribeGroupsRequest",
    "DescribedGroup",
    "DescribedMember",
    "ListGroupsRequest",
    "ListedGroup",
    "OffsetDeleteRequest",
    "decode_consumer_group_describe",
    "decode_describe_groups",
    "decode_list_groups",
    "offset_delete_errors",
]

CONSUMER_GROUP_DESCRIBE_KEY = 69


@dataclass(frozen=True)
class ListedGroup:
    """A group of a ListGroups answer.

    Attributes:
        group: the group id.
        protocol_type: ``"consumer"``, ``""`` (offsets only) or another client's (``connect``).
        state: the coordinator's state name (``Stable``, ``Empty``...; ``""`` below v4).
        group_type: ``"classic"`` or ``"consumer"`` (KIP-848); ``"classic"`` below v5.
    """

    group: str
    protocol_type: str
    state: str
    group_type: str


@dataclass(frozen=True)
class DescribedMember:
    """A member of a described group.

    Attributes:
        member_id: the id the coordinator knows it by.
        instance_id: its ``group.instance.id`` (static membership), ``None`` when dynamic.
        client_id: its ``client.id``.
        host: the address the coordinator saw, e.g. ``/127.0.0.1``.
        assignment: a classic member's raw ``ConsumerProtocol`` assignment bytes, ``None``
            for a ``consumer`` group's member (see ``partitions``).
        partitions: a ``consumer`` group member's assigned partitions, sorted; empty for a
            classic member (decode ``assignment``).
        subscribed_topic_names: a ``consumer`` group member's subscription by name, as the
            coordinator holds it; empty for a classic member.
        subscribed_topic_regex: a ``consumer`` group member's regex subscription (KIP-848),
            ``None`` when it subscribed by name, and for a classic member.
    """

    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: bytes | None = None
    partitions: tuple[TopicPartition, ...] = ()
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None


@dataclass(frozen=True)
class DescribedGroup:
    """A group as DescribeGroups or ConsumerGroupDescribe described it.

    Attributes:
        error_code: the group's error code (0: none).
        group: the group id.
        state: the state name; ``Dead`` when the coordinator has no such group of the kind
            asked.
        protocol_type: ``"consumer"``, ``""`` or another client's; ``"consumer"`` for a
            KIP-848 group.
        assignor: the chosen assignor (classic: the protocol name), ``""`` when none.
        group_type: ``"classic"`` or ``"consumer"``.
        members: the members.
        error_message: the coordinator's message, when it gave one.
    """

    error_code: int
    group: str
    state: str
    protocol_type: str
    assignor: str
    group_type: str
    members: tuple[DescribedMember, ...]
    error_message: str | None = None


# -- ListGroups (key 16) v4-v5 -------------------------------------------------------------


class ListGroupsResponse_v4(Response):
    API_KEY = 16
    API_VERSION = 4
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "groups",
            CompactArray(
                ("group_id", CompactString("utf-8")),
                ("protocol_type", CompactString("utf-8")),
                ("group_state", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class ListGroupsResponse_v5(Response):
    API_KEY = 16
    API_VERSION = 5
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "groups",
            CompactArray(
                ("group_id", CompactString("utf-8")),
                ("protocol_type", CompactString("utf-8")),
                ("group_state", CompactString("utf-8")),
                ("group_type", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class ListGroupsRequest_v4(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 16
    API_VERSION = 4
    RESPONSE_TYPE = ListGroupsResponse_v4
    SCHEMA = Schema(
        ("states_filter", CompactArray(CompactString("utf-8"))),
        ("tags", TaggedFields),
    )


class ListGroupsRequest_v5(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 16
    API_VERSION = 5
    RESPONSE_TYPE = ListGroupsResponse_v5
    SCHEMA = Schema(
        ("states_filter", CompactArray(CompactString("utf-8"))),
        ("types_filter", CompactArray(CompactString("utf-8"))),
        ("tags", TaggedFields),
    )


class ListGroupsRequest(Request[ListGroupsRequest_v4 | ListGroupsRequest_v5]):
    """ListGroups of every group the broker coordinates (no state or type filter): v5, else
    v4 (Kafka 2.6+).

    Raises:
        IncompatibleBrokerVersion: (at ``prepare``) the broker has neither.
    """

    API_KEY = 16

    def build(
        self, request_struct_class: type[ListGroupsRequest_v4 | ListGroupsRequest_v5]
    ) -> ListGroupsRequest_v4 | ListGroupsRequest_v5:
        if request_struct_class.API_VERSION >= 5:
            return request_struct_class([], [], {})
        return request_struct_class([], {})


def decode_list_groups(response: Any) -> tuple[int, list[ListedGroup]]:
    """``(error code, groups)`` of a ListGroups v4/v5 answer."""
    v5 = response.API_VERSION >= 5
    groups = [
        ListedGroup(
            group=str(g[0]),
            protocol_type=str(g[1] or ""),
            state=str(g[2] or ""),
            group_type=str(g[3] or "classic") if v5 else "classic",
        )
        for g in response.groups
    ]
    return int(response.error_code), groups


# -- DescribeGroups (key 15) v5 -------------------------------------------------------------


class DescribeGroupsResponse_v5(Response):
    API_KEY = 15
    API_VERSION = 5
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "groups",
            CompactArray(
                ("error_code", Int16),
                ("group_id", CompactString("utf-8")),
                ("group_state", CompactString("utf-8")),
                ("protocol_type", CompactString("utf-8")),
                ("protocol_data", CompactString("utf-8")),
                (
                    "members",
                    CompactArray(
                        ("member_id", CompactString("utf-8")),
                        ("group_instance_id", CompactString("utf-8")),
                        ("client_id", CompactString("utf-8")),
                        ("client_host", CompactString("utf-8")),
                        ("member_metadata", CompactBytes),
                        ("member_assignment", CompactBytes),
                        ("tags", TaggedFields),
                    ),
                ),
                ("authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeGroupsRequest_v5(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 15
    API_VERSION = 5
    RESPONSE_TYPE = DescribeGroupsResponse_v5
    SCHEMA = Schema(
        ("groups", CompactArray(CompactString("utf-8"))),
        ("include_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class DescribeGroupsRequest(Request[DescribeGroupsRequest_v5]):
    """DescribeGroups v5 (Kafka 2.4+): classic groups, members with their instance ids.

    Args:
        groups: the group ids.

    Raises:
        IncompatibleBrokerVersion: (at ``prepare``) the broker lacks v5.
    """

    API_KEY = 15

    def __init__(self, groups: Iterable[str]) -> None:
        self.groups = list(groups)

    def build(
        self, request_struct_class: type[DescribeGroupsRequest_v5]
    ) -> DescribeGroupsRequest_v5:
        return request_struct_class(self.groups, False, {})


def decode_describe_groups(response: Any) -> list[DescribedGroup]:
    """The groups of a DescribeGroups v5 answer (each classic)."""
    return [
        DescribedGroup(
            error_code=int(code),
            group=str(group),
            state=str(state or ""),
            protocol_type=str(protocol_type or ""),
            assignor=str(protocol or ""),
            group_type="classic",
            members=tuple(
                DescribedMember(
                    member_id=str(m[0]),
                    instance_id=None if m[1] is None else str(m[1]),
                    client_id=str(m[2]),
                    host=str(m[3]),
                    assignment=bytes(m[5] or b""),
                )
                for m in members
            ),
        )
        for code, group, state, protocol_type, protocol, members, *_ in response.groups
    ]


# -- ConsumerGroupDescribe (key 69) v0 ------------------------------------------------------

_ASSIGNMENT = Schema(
    (
        "topic_partitions",
        CompactArray(
            ("topic_id", Uuid),
            ("topic_name", CompactString("utf-8")),
            ("partitions", CompactArray(Int32)),
            ("tags", TaggedFields),
        ),
    ),
    ("tags", TaggedFields),
)


class ConsumerGroupDescribeResponse_v0(Response):
    API_KEY = 69
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "groups",
            CompactArray(
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("group_id", CompactString("utf-8")),
                ("group_state", CompactString("utf-8")),
                ("group_epoch", Int32),
                ("assignment_epoch", Int32),
                ("assignor_name", CompactString("utf-8")),
                (
                    "members",
                    CompactArray(
                        ("member_id", CompactString("utf-8")),
                        ("instance_id", CompactString("utf-8")),
                        ("rack_id", CompactString("utf-8")),
                        ("member_epoch", Int32),
                        ("client_id", CompactString("utf-8")),
                        ("client_host", CompactString("utf-8")),
                        ("subscribed_topic_names", CompactArray(CompactString("utf-8"))),
                        ("subscribed_topic_regex", CompactString("utf-8")),
                        ("assignment", _ASSIGNMENT),
                        ("target_assignment", _ASSIGNMENT),
                        ("tags", TaggedFields),
                    ),
                ),
                ("authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class ConsumerGroupDescribeRequest_v0(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 69
    API_VERSION = 0
    RESPONSE_TYPE = ConsumerGroupDescribeResponse_v0
    SCHEMA = Schema(
        ("group_ids", CompactArray(CompactString("utf-8"))),
        ("include_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class ConsumerGroupDescribeRequest(Request[ConsumerGroupDescribeRequest_v0]):
    """ConsumerGroupDescribe v0 (KIP-848, Kafka 4.0+ in KRaft mode): ``consumer`` groups.

    Args:
        groups: the group ids.

    Raises:
        IncompatibleBrokerVersion: (at ``prepare``) the broker has no consumer groups.
    """

    API_KEY = 69

    def __init__(self, groups: Iterable[str]) -> None:
        self.groups = list(groups)

    def build(
        self, request_struct_class: type[ConsumerGroupDescribeRequest_v0]
    ) -> ConsumerGroupDescribeRequest_v0:
        return request_struct_class(self.groups, False, {})


def decode_consumer_group_describe(response: Any) -> list[DescribedGroup]:
    """The groups of a ConsumerGroupDescribe v0 answer (each of type ``consumer``); the
    members' partitions are their current assignment, by topic name."""
    groups = []
    for (
        code,
        message,
        group,
        state,
        _epoch,
        _assignment_epoch,
        assignor,
        members,
        *_,
    ) in response.groups:
        described = []
        for m in members:
            member_id, instance_id, _rack, _member_epoch, client_id, host, names, regex = m[:8]
            assignment = m[8]
            tps = sorted(
                TopicPartition(str(name), int(p))
                for _tid, name, partitions, _ in assignment[0]
                for p in partitions
            )
            described.append(
                DescribedMember(
                    member_id=str(member_id),
                    instance_id=None if instance_id is None else str(instance_id),
                    client_id=str(client_id),
                    host=str(host),
                    partitions=tuple(tps),
                    subscribed_topic_names=tuple(str(n) for n in names or ()),
                    subscribed_topic_regex=str(regex) if regex else None,  # the broker: ""
                )
            )
        groups.append(
            DescribedGroup(
                error_code=int(code),
                group=str(group),
                state=str(state or ""),
                protocol_type="consumer",
                assignor=str(assignor or ""),
                group_type="consumer",
                members=tuple(described),
                error_message=None if message is None else str(message),
            )
        )
    return groups


# -- DeleteGroups (key 42) v2 ---------------------------------------------------------------


class DeleteGroupsResponse_v2(Response):
    API_KEY = 42
    API_VERSION = 2
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "results",
            CompactArray(
                ("group_id", CompactString("utf-8")),
                ("error_code", Int16),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DeleteGroupsRequest_v2(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 42
    API_VERSION = 2
    RESPONSE_TYPE = DeleteGroupsResponse_v2
    SCHEMA = Schema(
        ("groups_names", CompactArray(CompactString("utf-8"))),
        ("tags", TaggedFields),
    )


class DeleteGroupsRequest(Request[DeleteGroupsRequest_v2]):
    """DeleteGroups v2 (Kafka 2.4+). The answer's ``results`` are ``(group, error code,
    tags)``.

    Args:
        groups: the group ids.
    """

    API_KEY = 42

    def __init__(self, groups: Iterable[str]) -> None:
        self.groups = list(groups)

    def build(self, request_struct_class: type[DeleteGroupsRequest_v2]) -> DeleteGroupsRequest_v2:
        return request_struct_class(self.groups, {})


# -- OffsetDelete (key 47) v0 ---------------------------------------------------------------


class OffsetDeleteResponse_v0(Response):
    API_KEY = 47
    API_VERSION = 0
    SCHEMA = Schema(
        ("error_code", Int16),
        ("throttle_time_ms", Int32),
        (
            "topics",
            Array(
                ("name", String("utf-8")),
                ("partitions", Array(("partition_index", Int32), ("error_code", Int16))),
            ),
        ),
    )


class OffsetDeleteRequest_v0(RequestStruct):
    API_KEY = 47
    API_VERSION = 0
    RESPONSE_TYPE = OffsetDeleteResponse_v0
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        ("topics", Array(("name", String("utf-8")), ("partitions", Array(Int32)))),
    )


OffsetDeleteStruct: TypeAlias = OffsetDeleteRequest_v0


class OffsetDeleteRequest(Request[OffsetDeleteStruct]):
    """OffsetDelete v0 (KIP-496, Kafka 2.4+): drop a group's committed offsets of some
    partitions. The answer: a group error code, then ``(topic, [(partition, error code)])``.

    Args:
        group: the group id.
        partitions: the partitions.
    """

    API_KEY = 47

    def __init__(self, group: str, partitions: Iterable[TopicPartition]) -> None:
        self.group = group
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(set(partitions)):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        self.topics = sorted(by_topic.items())

    def build(self, request_struct_class: type[OffsetDeleteStruct]) -> OffsetDeleteStruct:
        return request_struct_class(self.group, self.topics)


def offset_delete_errors(response: Any) -> tuple[int, Mapping[TopicPartition, int]]:
    """``(group error code, {tp: error code})`` of an OffsetDelete answer."""
    per_partition = {
        TopicPartition(str(topic), int(partition)): int(code)
        for topic, partitions in response.topics
        for partition, code in partitions
    }
    return int(response.error_code), per_partition
