"""The classic group protocol's requests, through aiokafka's protocol classes.

FindCoordinator, JoinGroup, SyncGroup, Heartbeat and LeaveGroup (the Java client's
``AbstractCoordinator``), and the ``ConsumerProtocol`` encoding of subscriptions and
assignments (protocol type ``consumer``), so that a Java ``KafkaConsumer``, an aiokafka or a
confluent-kafka consumer using the same assignor can be a member of the same group. Every
aiokafka failure and every error code is translated into :class:`GroupRequestError` here; the
driver (``aiozkconsumer.group.classic``) decides what to do with it.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.coordinator.protocol import (
    ConsumerProtocol,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.protocol.coordination import FindCoordinatorRequest
from aiokafka.protocol.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)

from ..errors import ConsumerError
from ..records import TopicPartition
from .channel import KafkaGetter
from .client import KafkaClient, send_coordination
from .errors import AiokafkaError, IncompatibleBrokerVersion, error_name

__all__ = [
    "COORDINATOR_MOVED",
    "FENCED",
    "GroupRequestError",
    "JoinResult",
    "PROTOCOL_TYPE",
    "GroupClient",
    "decode_assignment",
    "decode_subscription",
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

COORDINATOR_MOVED = frozenset({COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})
"""Codes after which the coordinator is looked up again."""
FENCED = frozenset({ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID})
"""Codes meaning this member's generation is over: it must rejoin (commits are refused)."""
_RETRIABLE = COORDINATOR_MOVED | {COORDINATOR_LOAD_IN_PROGRESS, REBALANCE_IN_PROGRESS}


class GroupRequestError(ConsumerError):
    """A group request failed: no answer, or an error code.

    Attributes:
        what: the request (``"JoinGroup"``, ...).
        code: the Kafka error code, or ``None`` when no answer came.
        fatal: retrying cannot help (authorization, inconsistent protocol, old broker).
    """

    def __init__(self, what: str, code: int | None, detail: str, *, fatal: bool = False) -> None:
        name = "no answer" if code is None else error_name(code)
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


def encode_subscription(topics: Iterable[str], *, rack: str | None = None) -> bytes:
    """``ConsumerProtocolSubscription`` of ``topics`` (what Java members decode).

    Without a rack, v0 (topics, no user data). With ``client.rack``, v3 (KIP-881, as the Java
    client 3.5+ sends it), so that a rack-aware assignor of a Java leader can use it: topics,
    user data (null), owned partitions (none: this member is eager and gives everything up
    before it joins), generation id (-1) and the rack id.
    """
    names = sorted(set(topics))
    if rack is None:
        return bytes(ConsumerProtocolMemberMetadata(0, names, b"").encode())
    parts = [struct.pack(">hi", 3, len(names)), *(_string(t) for t in names)]
    parts.append(struct.pack(">iii", -1, 0, -1))  # user data null, no owned, generation -1
    parts.append(_string(rack))
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


class GroupClient:
    """Requests of the classic group protocol to one group's coordinator.

    Args:
        kafka_getter: async callable returning the started Kafka client.
        group: ``group.id``.
        request_timeout_ms: time limit of FindCoordinator, SyncGroup, Heartbeat and
            LeaveGroup, ms.
    """

    def __init__(self, kafka_getter: KafkaGetter, group: str, *, request_timeout_ms: int) -> None:
        self._kafka_getter = kafka_getter
        self.group = group
        self.request_timeout_ms = request_timeout_ms
        self._coordinator: int | None = None

    @property
    def coordinator(self) -> int | None:
        """The coordinator's broker id, ``None`` until found."""
        return self._coordinator

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
        to use (KIP-394); that second join is made here.

        Raises:
            GroupRequestError: an error code or no answer within the rebalance timeout (+ the
                request timeout). ``INCONSISTENT_GROUP_PROTOCOL`` and
                ``GROUP_AUTHORIZATION_FAILED`` are fatal.
        """
        for _ in range(2):
            request = JoinGroupRequest(
                self.group,
                session_timeout_ms,
                rebalance_timeout_ms,
                member_id,
                None,  # no static membership (a null group.instance.id)
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
                    ),
                )
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
                ... : rejoin) or no answer.
        """
        request = SyncGroupRequest(self.group, generation, member_id, None, list(assignments))
        resp = await self._to_coordinator(request, "SyncGroup", self.request_timeout_ms / 1000)
        code = int(resp.error_code)
        if code != NONE:
            raise GroupRequestError(
                "SyncGroup", code, f"group {self.group!r}", fatal=code == GROUP_AUTHORIZATION_FAILED
            )
        return bytes(resp.member_assignment)

    async def heartbeat(self, generation: int, member_id: str) -> None:
        """Heartbeat.

        Raises:
            GroupRequestError: an error code (``REBALANCE_IN_PROGRESS``: rejoin;
                ``ILLEGAL_GENERATION``/``UNKNOWN_MEMBER_ID``: fenced) or no answer.
        """
        request = HeartbeatRequest(self.group, generation, member_id)
        resp = await self._to_coordinator(request, "Heartbeat", self.request_timeout_ms / 1000)
        code = int(resp.error_code)
        if code != NONE:
            raise GroupRequestError("Heartbeat", code, f"group {self.group!r}")

    async def leave(self, member_id: str) -> None:
        """LeaveGroup, so the group rebalances at once (never raises)."""
        if not member_id:
            return
        try:
            resp = await self._to_coordinator(
                LeaveGroupRequest(self.group, member_id),
                "LeaveGroup",
                self.request_timeout_ms / 1000,
            )
        except (GroupRequestError, ConsumerError) as e:
            log.info("group %s: LeaveGroup failed: %s", self.group, e)
            return
        code = int(getattr(resp, "error_code", NONE))
        if code != NONE:
            log.info("group %s: LeaveGroup answered %s", self.group, error_name(code))

    # -- one request ---------------------------------------------------------------------

    async def _to_coordinator(self, request: Any, what: str, timeout_s: float) -> Any:
        kafka = await self._kafka_getter()
        if self._coordinator is None:
            await self.find_coordinator()
        assert self._coordinator is not None
        try:
            return await self._send(kafka, self._coordinator, request, timeout_s, what)
        except GroupRequestError as e:
            if e.coordinator_moved:
                self.forget_coordinator()
            raise

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
