# mypy: allow-subclassing-any
# (aiokafka ships no type information: its protocol base classes are Any to mypy.)
"""The classic group protocol's requests, through aiokafka's protocol classes.

FindCoordinator, JoinGroup, SyncGroup, Heartbeat and LeaveGroup (the Java client's
``AbstractCoordinator``), and the ``ConsumerProtocol`` encoding of subscriptions and
assignments (protocol type ``consumer``), so that a Java ``KafkaConsumer``, an aiokafka or a
confluent-kafka consumer using the same assignor can be a member of the same group. Every
aiokafka failure and every error code is translated into :class:`GroupRequestError` here; the
driver (``aiozkconsumer.group.classic``) decides what to do with it.

Static membership (KIP-345, ``group.instance.id``): JoinGroup v5+, SyncGroup v3+, Heartbeat
v3+, LeaveGroup v3+ (a members list) and OffsetCommit v7+ carry the instance id. aiokafka
(0.14) has JoinGroup v5 and SyncGroup v3; Heartbeat v3 and LeaveGroup v3 are declared here
from Kafka's message schemas, and OffsetCommit v7 is ``leader_epoch``'s. A request that would
have to drop an instance id for an older broker is refused (``IncompatibleBrokerVersion``),
as the Java client's builders throw ``UnsupportedVersionException``.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.coordinator.protocol import (
    ConsumerProtocol,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.coordination import FindCoordinatorRequest
from aiokafka.protocol.group import (
    HeartbeatRequest_v0,
    HeartbeatRequest_v1,
    JoinGroupRequest,
    LeaveGroupRequest_v0,
    LeaveGroupRequest_v1,
    SyncGroupRequest,
)
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

from ..errors import ConsumerError
from ..records import TopicPartition
from .channel import KafkaGetter, OffsetsChannel
from .client import KafkaClient, send_coordination
from .errors import NO_ANSWER, AiokafkaError, IncompatibleBrokerVersion, error_name
from .leader_epoch import OffsetCommitEpochRequest, OffsetCommitEpochStruct, OffsetFetchEpochRequest

__all__ = [
    "COORDINATOR_MOVED",
    "FENCED",
    "FENCED_INSTANCE_ID",
    "INSTANCE_ERRORS",
    "UNRELEASED_INSTANCE_ID",
    "GroupRequestError",
    "HeartbeatRequest_v3",
    "InstanceHeartbeatRequest",
    "InstanceJoinGroupRequest",
    "InstanceOffsetCommitRequest",
    "InstanceSyncGroupRequest",
    "JoinResult",
    "LeaveGroupRequest_v3",
    "MembersLeaveGroupRequest",
    "PROTOCOL_TYPE",
    "ConsumerSubscription",
    "GroupClient",
    "StaticMemberOffsetsChannel",
    "parse_subscription",
    "decode_assignment",
    "decode_subscription",
    "subscription_rack",
    "encode_assignment",
    "encode_subscription",
]

log = logging.getLogger(__name__)

PROTOCOL_TYPE = ConsumerProtocol.PROTOCOL_TYPE
"""``"consumer"``: the embedded protocol of consumer groups."""

# Error codes (org.apache.kafka.common.protocol.Errors) the driver acts on.
NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
GROUP_AUTHORIZATION_FAILED = 30
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
UNRELEASED_INSTANCE_ID = 111

COORDINATOR_MOVED = frozenset({COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})
"""Codes after which the coordinator is looked up again."""
FENCED = frozenset({ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID})
"""Codes meaning this member's generation is over: it must rejoin (commits are refused)."""
INSTANCE_ERRORS = frozenset({FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID})
"""Codes about the ``group.instance.id`` itself: fatal, as the Java client's
``FencedInstanceIdException`` / ``UnreleasedInstanceIdException`` (rejoining cannot help)."""
_RETRIABLE = COORDINATOR_MOVED | {COORDINATOR_LOAD_IN_PROGRESS, REBALANCE_IN_PROGRESS}
# Codes aiokafka (0.14) does not name.
_NAMES = {
    FENCED_INSTANCE_ID: "FENCED_INSTANCE_ID",
    UNRELEASED_INSTANCE_ID: "UNRELEASED_INSTANCE_ID",
}


def code_name(code: int) -> str:
    """Kafka's name of an error code with the code, including the static membership codes
    aiokafka does not know (``"FENCED_INSTANCE_ID (82)"``)."""
    name = _NAMES.get(code)
    return f"{name} ({code})" if name is not None else error_name(code)


class GroupRequestError(ConsumerError):
    """A group request failed: no answer, or an error code.

    Attributes:
        what: the request (``"JoinGroup"``, ...).
        code: the Kafka error code, or ``None`` when no answer came.
        fatal: retrying cannot help (authorization, inconsistent protocol, old broker).
    """

    def __init__(self, what: str, code: int | None, detail: str, *, fatal: bool = False) -> None:
        name = "no answer" if code is None else code_name(code)
        super().__init__(f"{what}: {name}: {detail}" if detail else f"{what}: {name}")
        self.what = what
        self.code = code
        self.fatal = fatal

    @property
    def coordinator_moved(self) -> bool:
        """Look the coordinator up again (no answer, or NOT_COORDINATOR-like codes)."""
        return self.code is None or self.code in COORDINATOR_MOVED

    @property
    def fenced(self) -> bool:
        """This member's generation is over (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID)."""
        return self.code in FENCED

    @property
    def instance_error(self) -> bool:
        """The ``group.instance.id`` was fenced or is not released (fatal)."""
        return self.code in INSTANCE_ERRORS

    @property
    def retriable(self) -> bool:
        """Whether the same step may simply be tried again."""
        return not self.fatal and (self.code is None or self.code in _RETRIABLE)


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer.

    Attributes:
        generation: the group's generation id.
        protocol: the assignor the coordinator chose (``"range"``, ``"roundrobin"``).
        leader: the leader's member id.
        member_id: this member's id.
        members: the leader gets ``[(member id, group instance id or None, subscription
            metadata)]``; the others an empty tuple.
    """

    generation: int
    protocol: str
    leader: str
    member_id: str
    members: tuple[tuple[str, str | None, bytes], ...]

    @property
    def is_leader(self) -> bool:
        """Whether this member leads the group (computes the assignment)."""
        return self.leader == self.member_id


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def encode_subscription(
    topics: Iterable[str],
    *,
    rack: str | None = None,
    user_data: bytes | None = None,
    owned_partitions: Iterable[TopicPartition] = (),
    generation: int = -1,
) -> bytes:
    """``ConsumerProtocolSubscription`` of ``topics`` (what Java members decode).

    With nothing but topics, v0 (topics, empty user data), as before. With anything more
    (``client.rack``, a sticky assignor's user data, owned partitions, a generation), v3, the
    version the Java client 3.5+ sends (``ConsumerProtocol.serializeSubscription``): topics,
    user data, owned partitions (v1+, KIP-429: what a cooperative member keeps through the
    rebalance), generation id (v2+) and rack id (v3+, KIP-881).

    Args:
        topics: the subscribed topics (sent sorted, once each).
        rack: ``client.rack``, ``None`` for none.
        user_data: the assignor's user data (``None``: null).
        owned_partitions: what the member owns now (an eager member owns nothing at join).
        generation: the generation of the member's current membership (-1: none).

    Returns:
        The subscription bytes of one JoinGroup protocol.
    """
    names = sorted(set(topics))
    owned = sorted(set(owned_partitions))
    if rack is None and user_data is None and not owned and generation < 0:
        return bytes(ConsumerProtocolMemberMetadata(0, names, b"").encode())
    parts = [struct.pack(">hi", 3, len(names)), *(_string(t) for t in names)]
    if user_data is None:
        parts.append(struct.pack(">i", -1))
    else:
        parts.append(struct.pack(">i", len(user_data)) + user_data)
    by_topic: dict[str, list[int]] = {}
    for tp in owned:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    parts.append(struct.pack(">i", len(by_topic)))
    for topic, ps in by_topic.items():
        parts.append(_string(topic) + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    parts.append(struct.pack(">i", generation))
    parts.append(struct.pack(">h", -1) if rack is None else _string(rack))
    return b"".join(parts)


def decode_subscription(data: bytes) -> list[str]:
    """The topics of a member's subscription (any version: later fields are appended).

    Raises:
        ValueError: the bytes are not a consumer subscription.
    """
    try:
        meta = ConsumerProtocolMemberMetadata.decode(data)
    except Exception as e:
        raise ValueError(f"not a consumer protocol subscription: {e!r}") from e
    return list(meta.subscription)


@dataclass(frozen=True)
class ConsumerSubscription:
    """Every field of a ``ConsumerProtocolSubscription`` (what the leader reads).

    Attributes:
        version: the version the member wrote (0-3).
        topics: the subscribed topics.
        user_data: the assignor's user data, ``None`` when null.
        owned_partitions: v1+: what the member owns (a cooperative member's kept partitions).
        generation_id: v2+: the generation of its membership; ``None`` before v2.
        rack: v3+: its ``client.rack``; ``None`` for an earlier version, a null or an empty
            rack.
    """

    version: int
    topics: tuple[str, ...]
    user_data: bytes | None
    owned_partitions: tuple[TopicPartition, ...]
    generation_id: int | None
    rack: str | None


def parse_subscription(data: bytes) -> ConsumerSubscription:
    """Decode a member's ``ConsumerProtocolSubscription`` of any version.

    The layout: version (int16), topics (array of string), user data (nullable bytes); v1+
    owned partitions (array of topic, array of int32); v2+ generation id (int32); v3+ rack
    id (nullable string). A version above 3 is read as 3 (later fields are appended, and
    ``ConsumerProtocol.deserializeSubscription`` reads what it knows).

    Raises:
        ValueError: the bytes end before a field of their version.
    """
    view = memoryview(data)
    at = 0

    def take(n: int) -> memoryview:
        nonlocal at
        if n < 0 or at + n > len(view):
            raise ValueError("a consumer subscription ends early")
        chunk = view[at : at + n]
        at += n
        return chunk

    def int16() -> int:
        value: int = struct.unpack(">h", take(2))[0]
        return value

    def int32() -> int:
        value: int = struct.unpack(">i", take(4))[0]
        return value

    def string() -> str | None:
        n = int16()
        return None if n < 0 else bytes(take(n)).decode("utf-8")

    version = int16()
    if version < 0:
        raise ValueError(f"a consumer subscription of version {version}")
    topics = tuple(t or "" for t in (string() for _ in range(max(0, int32()))))
    n = int32()
    user_data = None if n < 0 else bytes(take(n))
    owned: list[TopicPartition] = []
    generation: int | None = None
    rack: str | None = None
    if version >= 1:
        for _ in range(max(0, int32())):
            topic = string() or ""
            owned.extend(TopicPartition(topic, int32()) for _ in range(max(0, int32())))
    if version >= 2:
        generation = int32()
    if version >= 3:
        rack = string() or None
    return ConsumerSubscription(version, topics, user_data, tuple(owned), generation, rack)


def subscription_rack(data: bytes) -> str | None:
    """The ``rack_id`` of a member's subscription (v3+, KIP-881: what a Java 3.5+ member with
    ``client.rack`` sends), ``None`` for an earlier version, a null or an empty rack.

    Raises:
        ValueError: the bytes end before a field of their version.
    """
    return parse_subscription(data).rack


def encode_assignment(tps: Iterable[TopicPartition]) -> bytes:
    """``ConsumerProtocolAssignment`` v0 of ``tps``."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(set(tps)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return bytes(ConsumerProtocolMemberAssignment(0, sorted(by_topic.items()), b"").encode())


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions of an assignment (empty bytes: none).

    Raises:
        ValueError: the bytes are not a consumer assignment.
    """
    if not data:
        return []
    try:
        assignment = ConsumerProtocolMemberAssignment.decode(data)
    except Exception as e:
        raise ValueError(f"not a consumer protocol assignment: {e!r}") from e
    return sorted(TopicPartition(t, p) for t, parts in assignment.assignment for p in parts)


# -- static membership: the request versions that carry group.instance.id -----------------


def _require_version(instance_id: str | None, version: int, needed: int, what: str) -> None:
    """Refuse to send an instance id's request at a version without the field.

    Raises:
        IncompatibleBrokerVersion: ``instance_id`` is set and ``version < needed``.
    """
    if instance_id is not None and version < needed:
        raise IncompatibleBrokerVersion(
            f"{what} v{version} cannot carry group.instance.id (static membership needs "
            f"{what} v{needed}+, Kafka 2.3+)"
        )


class InstanceJoinGroupRequest(JoinGroupRequest):
    """aiokafka's JoinGroup (v0-v2, v5) that refuses to drop a ``group.instance.id``: with
    one, v5 is needed (``IncompatibleBrokerVersion`` at ``prepare`` otherwise)."""

    def build(self, request_struct_class: Any) -> Any:
        _require_version(self._group_instance_id, request_struct_class.API_VERSION, 5, "JoinGroup")
        return super().build(request_struct_class)


class InstanceSyncGroupRequest(SyncGroupRequest):
    """aiokafka's SyncGroup (v0, v1, v3) that refuses to drop a ``group.instance.id``: with
    one, v3 is needed (``IncompatibleBrokerVersion`` at ``prepare`` otherwise)."""

    def build(self, request_struct_class: Any) -> Any:
        _require_version(self._group_instance_id, request_struct_class.API_VERSION, 3, "SyncGroup")
        return super().build(request_struct_class)


class HeartbeatResponse_v3(Response):
    API_KEY = 12
    API_VERSION = 3
    SCHEMA = Schema(("throttle_time_ms", Int32), ("error_code", Int16))


class HeartbeatRequest_v3(RequestStruct):
    """Heartbeat v3 (Kafka 2.3+, KIP-345): v1's fields and ``GroupInstanceId``."""

    API_KEY = 12
    API_VERSION = 3
    RESPONSE_TYPE = HeartbeatResponse_v3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("generation_id", Int32),
        ("member_id", String("utf-8")),
        ("group_instance_id", String("utf-8")),
    )


class InstanceHeartbeatRequest(
    Request[HeartbeatRequest_v0 | HeartbeatRequest_v1 | HeartbeatRequest_v3]
):
    """Heartbeat at the newest of v0, v1 and v3 both sides speak.

    Args:
        group: ``group.id``.
        generation_id: the generation of the membership.
        member_id: the member id.
        group_instance_id: ``group.instance.id`` (``None``: a dynamic member).

    Raises:
        IncompatibleBrokerVersion: (at ``prepare``) an instance id for a broker without v3.
    """

    API_KEY = 12

    def __init__(
        self, group: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> None:
        self.group = group
        self.generation_id = generation_id
        self.member_id = member_id
        self.group_instance_id = group_instance_id

    def build(self, request_struct_class: Any) -> Any:
        version = request_struct_class.API_VERSION
        _require_version(self.group_instance_id, version, 3, "Heartbeat")
        head = (self.group, self.generation_id, self.member_id)
        if version >= 3:
            return request_struct_class(*head, self.group_instance_id)
        return request_struct_class(*head)


class LeaveGroupResponse_v3(Response):
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class LeaveGroupRequest_v3(RequestStruct):
    """LeaveGroup v3 (Kafka 2.4+, KIP-345): a batch of members, each with its instance id."""

    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class MembersLeaveGroupRequest(
    Request[LeaveGroupRequest_v0 | LeaveGroupRequest_v1 | LeaveGroupRequest_v3]
):
    """LeaveGroup of one member at the newest of v0, v1 and v3 both sides speak (v3: the
    members list, as the Java client's ``LeaveGroupRequest.Builder``).

    Args:
        group: ``group.id``.
        member_id: the member id.
        group_instance_id: ``group.instance.id`` (``None``: a dynamic member).

    Raises:
        IncompatibleBrokerVersion: (at ``prepare``) an instance id for a broker without v3.
    """

    API_KEY = 13

    def __init__(self, group: str, member_id: str, group_instance_id: str | None) -> None:
        self.group = group
        self.member_id = member_id
        self.group_instance_id = group_instance_id

    def build(self, request_struct_class: Any) -> Any:
        version = request_struct_class.API_VERSION
        _require_version(self.group_instance_id, version, 3, "LeaveGroup")
        if version >= 3:
            return request_struct_class(self.group, [(self.member_id, self.group_instance_id)])
        return request_struct_class(self.group, self.member_id)


class InstanceOffsetCommitRequest(OffsetCommitEpochRequest):
    """:class:`~aiozkconsumer.kafka.leader_epoch.OffsetCommitEpochRequest` with the member's
    ``group.instance.id`` (``GroupInstanceId``, v7+), as the Java client's
    ``OffsetCommitRequest.Builder``.

    Args:
        group_id, generation, member_id, topics: as ``OffsetCommitEpochRequest``.
        group_instance_id: ``group.instance.id`` (``None``: as ``OffsetCommitEpochRequest``).

    Raises:
        IncompatibleBrokerVersion: (at ``prepare``) an instance id for a broker without v7.
        NotImplementedError: (at ``prepare``) no version in common.
    """

    def __init__(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        topics: list[tuple[str, list[tuple[int, int, int, str]]]],
        group_instance_id: str | None,
    ) -> None:
        super().__init__(group_id, generation, member_id, topics)
        self.group_instance_id = group_instance_id

    def build(self, request_struct_class: type[OffsetCommitEpochStruct]) -> OffsetCommitEpochStruct:
        version = request_struct_class.API_VERSION
        _require_version(self.group_instance_id, version, 7, "OffsetCommit")
        if version >= 7:
            return request_struct_class(
                self.group_id, self.generation, self.member_id, self.group_instance_id, self.topics
            )
        return super().build(request_struct_class)


class StaticMemberOffsetsChannel(OffsetsChannel):
    """The offsets channel of a classic group's static member: its OffsetCommits carry the
    ``group.instance.id`` (v7+), so the coordinator refuses a commit of a member whose
    instance id another member took (``FENCED_INSTANCE_ID``). OffsetFetch and coordinator
    discovery are the base channel's.

    Args:
        kafka_getter, group, socket_timeout_ms: as :class:`OffsetsChannel`.
        group_instance_id: ``group.instance.id``.
    """

    def __init__(
        self,
        kafka_getter: KafkaGetter,
        group: str,
        *,
        socket_timeout_ms: int,
        group_instance_id: str,
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
        """As :meth:`OffsetsChannel.commit`, with the instance id.

        Raises:
            ChannelError: no usable answer (``fatal``: the broker has no OffsetCommit v7).
        """
        texts = metadata or {}
        epochs = leader_epochs or {}
        by_topic: dict[str, list[tuple[int, int, int, str]]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append(
                (tp.partition, offset, epochs.get(tp, -1), texts.get(tp, ""))
            )
        request = InstanceOffsetCommitRequest(
            self.group, generation, member_id, sorted(by_topic.items()), self.group_instance_id
        )
        async with self._lock:
            response = await self._to_coordinator(request, "OffsetCommit")
        codes = dict.fromkeys(offsets, NO_ANSWER)
        for topic, parts in response.topics:
            for partition, code in parts:
                tp = TopicPartition(topic, partition)
                if tp in codes:
                    codes[tp] = int(code)
        return codes


class GroupClient:
    """Requests of the classic group protocol to one group's coordinator.

    Args:
        kafka_getter: async callable returning the started Kafka client.
        group: ``group.id``.
        request_timeout_ms: time limit of FindCoordinator, SyncGroup, Heartbeat and
            LeaveGroup, ms.
        group_instance_id: ``group.instance.id``, default ``None`` (dynamic membership);
            JoinGroup, SyncGroup, Heartbeat and LeaveGroup carry it.
    """

    def __init__(
        self,
        kafka_getter: KafkaGetter,
        group: str,
        *,
        request_timeout_ms: int,
        group_instance_id: str | None = None,
    ) -> None:
        self._kafka_getter = kafka_getter
        self.group = group
        self.request_timeout_ms = request_timeout_ms
        self.group_instance_id = group_instance_id
        self._coordinator: int | None = None
        self._answered_at = time.monotonic()
        # Whether the coordinator is known to have loaded the group: see heartbeat().
        self._loaded = False

    @property
    def coordinator(self) -> int | None:
        """The coordinator's broker id, ``None`` until found."""
        return self._coordinator

    @property
    def seconds_since_answer(self) -> float:
        """Seconds since the coordinator last answered a request (since this client was made,
        before its first answer): heartbeats go every ``heartbeat.interval.ms``, so many
        seconds mean the coordinator is unknown or unreachable."""
        return max(0.0, time.monotonic() - self._answered_at)

    async def coordinator_address(self) -> str:
        """``host:port`` of the coordinator (``"unknown"`` before it is found)."""
        if self._coordinator is None:
            return "unknown"
        kafka = await self._kafka_getter()
        return kafka.broker_address(self._coordinator)

    async def find_coordinator(self) -> int:
        """Find the group's coordinator (FindCoordinator, key type group).

        Raises:
            GroupRequestError: no broker answered, or the answer was an error (e.g.
                ``COORDINATOR_NOT_AVAILABLE`` while ``__consumer_offsets`` is being created;
                ``GROUP_AUTHORIZATION_FAILED`` is fatal).
        """
        kafka = await self._kafka_getter()
        node = kafka.raw.get_random_node()
        if node is None:
            raise GroupRequestError("FindCoordinator", None, "no broker known")
        resp = await self._send(kafka, node, FindCoordinatorRequest(self.group, 0), None)
        code = int(resp.error_code)
        if code != NONE:
            raise GroupRequestError(
                "FindCoordinator",
                code,
                f"group {self.group!r}",
                fatal=code == GROUP_AUTHORIZATION_FAILED,
            )
        self._coordinator = int(resp.coordinator_id)
        self._loaded = False
        log.info(
            "group %s: coordinator is broker %d (%s)",
            self.group,
            self._coordinator,
            kafka.broker_address(self._coordinator),
        )
        return self._coordinator

    def forget_coordinator(self) -> None:
        """Look the coordinator up again before the next request."""
        self._coordinator = None
        self._loaded = False

    async def join(
        self,
        member_id: str,
        *,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocols: Sequence[tuple[str, bytes]],
    ) -> JoinResult:
        """JoinGroup; answered once every member has (re)joined.

        A first join with an empty member id is answered ``MEMBER_ID_REQUIRED`` with the id
        to use (KIP-394); that second join is made here. A static member (``group.instance.id``)
        is given its id at once; if its instance id is known to a group that is stable, the
        coordinator answers at once with the current generation and the member keeps its
        assignment (no rebalance), the member id the instance had before being replaced.

        Raises:
            GroupRequestError: an error code or no answer within the rebalance timeout (+ the
                request timeout). ``INCONSISTENT_GROUP_PROTOCOL``,
                ``GROUP_AUTHORIZATION_FAILED``, ``INVALID_SESSION_TIMEOUT`` and
                ``FENCED_INSTANCE_ID`` (the member id sent is not the one the instance id
                has now) are fatal; a broker without JoinGroup v5 for an instance id too.
        """
        for _ in range(2):
            request = InstanceJoinGroupRequest(
                self.group,
                session_timeout_ms,
                rebalance_timeout_ms,
                member_id,
                self.group_instance_id,
                PROTOCOL_TYPE,
                list(protocols),
            )
            resp = await self._to_coordinator(
                request, "JoinGroup", (rebalance_timeout_ms + self.request_timeout_ms) / 1000
            )
            code = int(resp.error_code)
            if code == MEMBER_ID_REQUIRED:
                member_id = str(resp.member_id)
                continue
            if code != NONE:
                detail = f"group {self.group!r}"
                if code == INCONSISTENT_GROUP_PROTOCOL:
                    detail += (
                        f": this member offers {[name for name, _ in protocols]}, which the "
                        "group's members do not all support (or another protocol type is "
                        "in use)"
                    )
                raise GroupRequestError(
                    "JoinGroup",
                    code,
                    detail,
                    fatal=code
                    in (
                        INCONSISTENT_GROUP_PROTOCOL,
                        GROUP_AUTHORIZATION_FAILED,
                        INVALID_SESSION_TIMEOUT,
                        FENCED_INSTANCE_ID,
                    ),
                )
            self._loaded = True  # answered without an error: the group is loaded there
            members = tuple(
                (str(m[0]), (str(m[1]) or None) if len(m) == 3 else None, bytes(m[-1]))
                for m in resp.members
            )
            return JoinResult(
                generation=int(resp.generation_id),
                protocol=str(resp.group_protocol),
                leader=str(resp.leader_id),
                member_id=str(resp.member_id),
                members=members,
            )
        raise GroupRequestError("JoinGroup", MEMBER_ID_REQUIRED, "asked for a member id twice")

    async def sync(
        self, generation: int, member_id: str, assignments: Sequence[tuple[str, bytes]]
    ) -> bytes:
        """SyncGroup: the leader sends every member's assignment; each gets its own.

        Returns:
            This member's assignment bytes.

        Raises:
            GroupRequestError: an error code (``REBALANCE_IN_PROGRESS``, ``ILLEGAL_GENERATION``
                ... : rejoin) or no answer; ``GROUP_AUTHORIZATION_FAILED`` and
                ``FENCED_INSTANCE_ID`` are fatal.
        """
        request = InstanceSyncGroupRequest(
            self.group, generation, member_id, self.group_instance_id, list(assignments)
        )
        resp = await self._to_coordinator(request, "SyncGroup", self.request_timeout_ms / 1000)
        code = int(resp.error_code)
        if code != NONE:
            raise GroupRequestError(
                "SyncGroup",
                code,
                f"group {self.group!r}",
                fatal=code in (GROUP_AUTHORIZATION_FAILED, FENCED_INSTANCE_ID),
            )
        return bytes(resp.member_assignment)

    async def heartbeat(self, generation: int, member_id: str) -> None:
        """Heartbeat; returns when it was answered without an error, which then proves the
        membership (the member's lease is extended on it).

        A coordinator still loading the group answers a Heartbeat with *no* error, blindly
        (Kafka's ``GroupCoordinatorService.heartbeat``: "The group is still loading, so
        blindly respond"; the ZooKeeper-era ``GroupCoordinator.handleHeartbeat`` alike), so
        right after the coordinator moved, a member whose session the old coordinator had
        already ended would be told it is still a member. So until the current coordinator
        is known to have the group loaded, an empty OffsetFetch goes first (a read, which a
        loading coordinator answers ``COORDINATOR_LOAD_IN_PROGRESS``), and the Heartbeat is
        sent only once that is answered without an error; a JoinGroup answered without one
        shows the group loaded as well. A coordinator is known loaded until it is looked up
        again (:meth:`find_coordinator`, after it moved or stopped answering).

        Raises:
            GroupRequestError: an error code (``REBALANCE_IN_PROGRESS``: rejoin;
                ``ILLEGAL_GENERATION``/``UNKNOWN_MEMBER_ID``: fenced; ``FENCED_INSTANCE_ID``:
                another member took this member's ``group.instance.id``, fatal;
                ``COORDINATOR_LOAD_IN_PROGRESS``: the coordinator is loading the group, no
                Heartbeat was sent) or no answer.
        """
        if not self._loaded:
            await self._check_loaded()
        request = InstanceHeartbeatRequest(
            self.group, generation, member_id, self.group_instance_id
        )
        resp = await self._to_coordinator(request, "Heartbeat", self.request_timeout_ms / 1000)
        code = int(resp.error_code)
        if code != NONE:
            raise GroupRequestError(
                "Heartbeat", code, f"group {self.group!r}", fatal=code == FENCED_INSTANCE_ID
            )

    async def leave(self, member_id: str) -> None:
        """LeaveGroup (v3+: the members list, with ``group.instance.id``), so the group
        rebalances at once (never raises). A static member's driver does not call it on
        shutdown (as the Java client's ``maybeLeaveGroup``)."""
        if not member_id:
            return
        try:
            resp = await self._to_coordinator(
                MembersLeaveGroupRequest(self.group, member_id, self.group_instance_id),
                "LeaveGroup",
                self.request_timeout_ms / 1000,
            )
        except (GroupRequestError, ConsumerError) as e:
            log.info("group %s: LeaveGroup failed: %s", self.group, e)
            return
        codes = [int(getattr(resp, "error_code", NONE))]
        codes += [int(m[-1]) for m in getattr(resp, "members", None) or ()]
        for code in codes:
            if code != NONE:
                log.info("group %s: LeaveGroup answered %s", self.group, code_name(code))

    async def _check_loaded(self) -> None:
        """An OffsetFetch of no partition: answered ``COORDINATOR_LOAD_IN_PROGRESS`` while the
        coordinator loads the group (raised as the Heartbeat's failure), without an error
        once it has (then :attr:`_loaded`). An answer that says neither (another error, or
        OffsetFetch v1, which has no group-level error) proves nothing either way: the
        Heartbeat's answer is then taken as it is, as before this check."""
        response = await self._to_coordinator(
            OffsetFetchEpochRequest(self.group, []), "Heartbeat", self.request_timeout_ms / 1000
        )
        code = int(getattr(response, "error_code", NONE))
        if code == COORDINATOR_LOAD_IN_PROGRESS or code in COORDINATOR_MOVED:
            if code in COORDINATOR_MOVED:
                self.forget_coordinator()
            raise GroupRequestError(
                "Heartbeat",
                code,
                f"group {self.group!r}: the coordinator has not loaded the group yet "
                "(its Heartbeat answers would not prove the membership)",
            )
        if code != NONE:
            log.info(
                "group %s: cannot tell whether the coordinator has loaded the group (OffsetFetch "
                "answered %s): its Heartbeat answers are taken as they are",
                self.group,
                code_name(code),
            )
        self._loaded = True

    # -- one request ---------------------------------------------------------------------

    async def _to_coordinator(self, request: Any, what: str, timeout_s: float) -> Any:
        kafka = await self._kafka_getter()
        if self._coordinator is None:
            await self.find_coordinator()
        assert self._coordinator is not None
        try:
            response = await self._send(kafka, self._coordinator, request, timeout_s, what)
        except GroupRequestError as e:
            if e.coordinator_moved:
                self.forget_coordinator()
            raise
        self._answered_at = time.monotonic()
        return response

    async def _send(
        self,
        kafka: KafkaClient,
        node: int,
        request: Any,
        timeout_s: float | None,
        what: str = "FindCoordinator",
    ) -> Any:
        limit = self.request_timeout_ms / 1000 if timeout_s is None else timeout_s
        try:
            return await send_coordination(kafka, node, request, limit)
        except TimeoutError:
            raise GroupRequestError(
                what, None, f"{kafka.broker_address(node)} did not answer within {limit:.1f} s"
            ) from None
        except IncompatibleBrokerVersion as e:
            raise GroupRequestError(what, None, f"broker too old: {e}", fatal=True) from e
        except AiokafkaError as e:
            raise GroupRequestError(what, None, f"{kafka.broker_address(node)}: {e!r}") from e
        except NotImplementedError as e:
            raise GroupRequestError(
                what, None, f"no protocol version in common: {e}", fatal=True
            ) from e

    def __repr__(self) -> str:
        where = "unknown" if self._coordinator is None else f"broker {self._coordinator}"
        return f"<GroupClient group={self.group} [coordinator {where}]>"
