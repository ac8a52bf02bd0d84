# mypy: allow-subclassing-any
# (aiokafka ships no type information: its protocol base classes are Any to mypy.)
"""Leader epochs from and to the brokers (KIP-320): Metadata v7, OffsetsForLeaderEpoch v2-v3,
OffsetCommit v6-v7 and OffsetFetch v5.

aiokafka 0.14 asks for metadata at v0-v5, which carry no leader epoch, and has no class for
OffsetsForLeaderEpoch (API key 23) at all. Both are built here with aiokafka's
``Struct``/``Schema`` machinery, field by field as Kafka's ``MetadataRequest.json`` /
``MetadataResponse.json`` (v7: ``LeaderEpoch`` per partition) and
``OffsetForLeaderEpochRequest.json`` / ``OffsetForLeaderEpochResponse.json`` (v2:
``CurrentLeaderEpoch``; v3: ``ReplicaId``, -1 from a consumer) lay them out, and sent over
aiokafka's shared connection (:meth:`~aiozkconsumer.cluster.KafkaClient.send`), which
negotiates the version. Kafka 4.x removed OffsetsForLeaderEpoch v0-v1 (KIP-896); v2 and v3
are the non-flexible versions every broker since 2.1 (v2) / 2.3 (v3) answers. Offsets are
committed with the leader epoch of the record before them (``CommittedLeaderEpoch``,
OffsetCommit v6+, ``OffsetCommitRequest.json``) and read back with it (OffsetFetch v5+);
aiokafka's classes stop at v3, which carry none. The Metadata v7 answer is read by a reader of
its own (``struct.unpack_from`` over the body, the replica arrays stepped over: about five
times faster than aiokafka's decode), as a group over thousands of partitions asks for it at
every rebalance attempt.

What the answers mean for a consumer's position is decided in :mod:`aiozkconsumer.epochs`;
this module only asks and decodes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, TypeAlias

from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.commit import (
    OffsetCommitRequest_v2,
    OffsetCommitRequest_v3,
    OffsetCommitResponse_v3,
    OffsetFetchRequest_v1,
    OffsetFetchRequest_v2,
    OffsetFetchRequest_v3,
)
from aiokafka.protocol.types import Array, Boolean, Int16, Int32, Int64, Schema, String

from ..errors import BrokerNotAvailableError
from ..records import TopicPartition
from .errors import AiokafkaError
from .fetch_request import FlexibleReader

__all__ = [
    "CONSUMER_REPLICA_ID",
    "NO_EPOCH",
    "EpochEndOffset",
    "LeaderAndEpoch",
    "MetadataV7Request",
    "OffsetCommitEpochRequest",
    "OffsetFetchEpochRequest",
    "OffsetForLeaderEpochRequest",
    "leaders_and_epochs",
    "offsets_for_leader_epoch",
]

NO_EPOCH = -1
"""``RecordBatch.NO_PARTITION_LEADER_EPOCH``: no leader epoch known."""
CONSUMER_REPLICA_ID = -1
"""``ReplicaId`` of a consumer's OffsetsForLeaderEpoch (``OffsetsForLeaderEpochRequest``
``CONSUMER_REPLICA_ID``)."""


class LeaderAndEpoch(NamedTuple):
    """A partition's leader and its epoch, as the Java client's ``Metadata.LeaderAndEpoch``.

    Attributes:
        leader: the leader's broker id, -1 when it has none.
        epoch: the leader epoch, -1 when the broker gave none.
    """

    leader: int
    epoch: int


class EpochEndOffset(NamedTuple):
    """One partition of an OffsetsForLeaderEpoch answer (``EpochEndOffset`` in the schema).

    Attributes:
        error_code: the partition's error (0 none).
        leader_epoch: the largest epoch the leader knows that is at most the one asked
            for; -1 (``UNDEFINED_EPOCH``) when it knows none.
        end_offset: the end offset of that epoch: the start offset of the next epoch, or the
            log end offset if it is the current one; -1 (``UNDEFINED_EPOCH_OFFSET``) unknown.
    """

    error_code: int
    leader_epoch: int
    end_offset: int


# -- Metadata v7 (key 3): the leader epoch per partition -------------------------------------


_PARTITION_V7 = (
    ("error_code", Int16),
    ("partition", Int32),
    ("leader", Int32),
    ("leader_epoch", Int32),
)
"""A Metadata v7 partition's fields before its replica arrays."""


def _metadata_v7_schema(*partition_fields: tuple[str, Any]) -> Any:
    """Metadata v7's response schema with ``partition_fields`` per partition."""
    return Schema(
        ("throttle_time_ms", Int32),
        (
            "brokers",
            Array(
                ("node_id", Int32),
                ("host", String("utf-8")),
                ("port", Int32),
                ("rack", String("utf-8")),
            ),
        ),
        ("cluster_id", String("utf-8")),
        ("controller_id", Int32),
        (
            "topics",
            Array(
                ("error_code", Int16),
                ("topic", String("utf-8")),
                ("is_internal", Boolean),
                ("partitions", Array(*partition_fields)),
            ),
        ),
    )


class MetadataResponse_v7(Response):
    API_KEY = 3
    API_VERSION = 7
    SCHEMA = _metadata_v7_schema(
        *_PARTITION_V7,
        ("replicas", Array(Int32)),
        ("isr", Array(Int32)),
        ("offline_replicas", Array(Int32)),
    )


_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">hiii")  # error_code, partition, leader, leader_epoch


def _partitions_v7(r: FlexibleReader, n: int) -> list[tuple[int, int, int, int]]:
    """``n`` partitions of a Metadata v7 topic from ``r``'s position, each as ``(error_code,
    partition, leader, leader_epoch)``: the replica, ISR and offline-replica arrays after
    them are stepped over, not built (nothing here reads them). The hot loop of
    :func:`_decode_metadata_v7`, with its lookups in locals.

    Raises:
        struct.error: the body ends inside a partition.
    """
    head, i32 = _PARTITION_HEAD.unpack_from, _I32.unpack_from
    buf = r.data
    size = len(buf)
    pos = r.pos
    out: list[tuple[int, int, int, int]] = []
    append = out.append
    for _ in range(max(n, 0)):
        append(head(buf, pos))
        pos += 14
        for _ in range(3):
            (k,) = i32(buf, pos)
            pos += 4 + 4 * max(k, 0)
        if pos > size:
            raise struct.error(f"partition arrays end at byte {pos}, after the body's {size}")
    r.pos = pos
    return out


def _decode_metadata_v7(buf: bytes) -> tuple[Any, ...]:
    """The fields of a Metadata v7 response body as aiokafka's ``Schema`` decode of
    :class:`MetadataResponse_v7` gives them (lists of tuples), except that each partition
    is ``(error_code, partition, leader, leader_epoch)`` (:func:`_partitions_v7`). At 4,096
    partitions aiokafka's field-by-field decode took about 20 ms of a consumer's loop per
    response, this about a fifth of it.

    Raises:
        struct.error, ValueError: the body is shorter than its fields say.
    """
    r = FlexibleReader(buf)
    throttle_time_ms = r.i32()
    brokers = []
    for _ in range(r.i32()):
        node_id = r.i32()
        host = r.string()
        port = r.i32()
        brokers.append((node_id, host, port, r.string()))
    cluster_id = r.string()
    controller_id = r.i32()
    topics = []
    n_topics = r.i32()
    for _ in range(max(n_topics, 0)):
        topic_error = r.i16()
        topic = r.string()
        internal = r.boolean()
        n_partitions = r.i32()
        partitions = _partitions_v7(r, n_partitions)
        topics.append((topic_error, topic, internal, None if n_partitions == -1 else partitions))
    return (
        throttle_time_ms,
        brokers,
        cluster_id,
        controller_id,
        None if n_topics == -1 else topics,
    )


class MetadataAnswer_v7(Response):
    """A Metadata v7 answer read by :func:`_decode_metadata_v7`: the fields of
    :class:`MetadataResponse_v7`, each partition without its replica arrays (its ``SCHEMA``
    says so, for aiokafka's ``repr`` and ``to_object``)."""

    API_KEY = 3
    API_VERSION = 7
    SCHEMA = _metadata_v7_schema(*_PARTITION_V7)

    @classmethod
    def decode(cls, data: Any) -> MetadataAnswer_v7:
        raw = data if isinstance(data, bytes) else data.read()
        try:
            fields = _decode_metadata_v7(raw)
        except (struct.error, ValueError) as e:
            raise ValueError(f"Buffer underrun decoding a Metadata v7 response: {e}") from e
        return cls(*fields)


class MetadataRequest_v7(RequestStruct):
    API_KEY = 3
    API_VERSION = 7
    RESPONSE_TYPE = MetadataAnswer_v7
    SCHEMA = Schema(("topics", Array(String("utf-8"))), ("allow_auto_topic_creation", Boolean))


class MetadataV7Request(Request[MetadataRequest_v7]):
    """A MetadataRequest v7 for named topics, never auto-creating them.

    Args:
        topics: the topics.

    Raises:
        NotImplementedError: (at ``prepare``) the broker does not answer v7 (before 2.1).
    """

    API_KEY = 3

    def __init__(self, topics: Iterable[str]) -> None:
        self.topics = sorted(set(topics))

    def build(self, request_struct_class: type[MetadataRequest_v7]) -> MetadataRequest_v7:
        return request_struct_class(self.topics, False)


async def leaders_and_epochs(
    kafka: Any, node_id: int, topics: Iterable[str]
) -> dict[TopicPartition, LeaderAndEpoch]:
    """Each partition's leader and leader epoch, as ``node_id`` knows them (Metadata v7).

    Args:
        kafka: a started :class:`~aiozkconsumer.cluster.KafkaClient`.
        node_id: the broker to ask (any broker: each keeps the cluster's metadata).
        topics: the topics.

    Returns:
        ``{partition: (leader, epoch)}`` for the partitions of topics answered without a
        topic error; a partition without a leader has leader -1.

    Raises:
        BrokerNotAvailableError: the broker could not be reached, or answers no Metadata v7.
    """
    try:
        response = await kafka.send(node_id, MetadataV7Request(topics))
    except NotImplementedError as e:  # Request.prepare: the broker is older than 2.1
        raise BrokerNotAvailableError(f"broker {node_id} answers no Metadata v7: {e}") from e
    out: dict[TopicPartition, LeaderAndEpoch] = {}
    for topic_error, topic, _internal, partitions in response.topics:
        if topic_error:
            continue
        for _error, partition, leader, epoch, *_ in partitions:
            out[TopicPartition(topic, partition)] = LeaderAndEpoch(int(leader), int(epoch))
    return out


# -- OffsetsForLeaderEpoch v2-v3 (key 23) ----------------------------------------------------


class OffsetForLeaderEpochResponse_v2(Response):
    API_KEY = 23
    API_VERSION = 2
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            Array(
                ("topic", String("utf-8")),
                (
                    "partitions",
                    Array(
                        ("error_code", Int16),
                        ("partition", Int32),
                        ("leader_epoch", Int32),
                        ("end_offset", Int64),
                    ),
                ),
            ),
        ),
    )


class OffsetForLeaderEpochResponse_v3(Response):
    API_KEY = 23
    API_VERSION = 3
    SCHEMA = OffsetForLeaderEpochResponse_v2.SCHEMA


_REQUEST_TOPICS = (
    "topics",
    Array(
        ("topic", String("utf-8")),
        (
            "partitions",
            Array(
                ("partition", Int32),
                ("current_leader_epoch", Int32),
                ("leader_epoch", Int32),
            ),
        ),
    ),
)


class OffsetForLeaderEpochRequest_v2(RequestStruct):
    API_KEY = 23
    API_VERSION = 2
    RESPONSE_TYPE = OffsetForLeaderEpochResponse_v2
    SCHEMA = Schema(_REQUEST_TOPICS)


class OffsetForLeaderEpochRequest_v3(RequestStruct):
    API_KEY = 23
    API_VERSION = 3
    RESPONSE_TYPE = OffsetForLeaderEpochResponse_v3
    SCHEMA = Schema(("replica_id", Int32), _REQUEST_TOPICS)


OffsetForLeaderEpochRequestStruct: TypeAlias = (
    OffsetForLeaderEpochRequest_v2 | OffsetForLeaderEpochRequest_v3
)


class OffsetForLeaderEpochRequest(Request[OffsetForLeaderEpochRequestStruct]):
    """A consumer's OffsetsForLeaderEpoch, as ``OffsetsForLeaderEpochUtils.prepareRequest``.

    Args:
        epochs: ``{partition: (current leader epoch, epoch to look up)}``: the epoch the
            client knows the leader at (-1 unknown: no fencing), and the epoch of the
            position's last fetched record.

    Raises:
        NotImplementedError: (at ``prepare``) the broker answers neither v2 nor v3.
    """

    API_KEY = 23

    def __init__(self, epochs: Mapping[TopicPartition, tuple[int, int]]) -> None:
        by_topic: dict[str, list[tuple[int, int, int]]] = {}
        for tp, (current, epoch) in sorted(epochs.items()):
            by_topic.setdefault(tp.topic, []).append((tp.partition, current, epoch))
        self.topics = sorted(by_topic.items())

    def build(
        self, request_struct_class: type[OffsetForLeaderEpochRequestStruct]
    ) -> OffsetForLeaderEpochRequestStruct:
        if request_struct_class.API_VERSION >= 3:
            return request_struct_class(CONSUMER_REPLICA_ID, self.topics)
        return request_struct_class(self.topics)


async def offsets_for_leader_epoch(
    kafka: Any, node_id: int, epochs: Mapping[TopicPartition, tuple[int, int]]
) -> dict[TopicPartition, EpochEndOffset]:
    """Ask a partition's leader where an epoch of its log ends (OffsetsForLeaderEpoch).

    Args:
        kafka: a started :class:`~aiozkconsumer.cluster.KafkaClient`.
        node_id: the leader of every partition in ``epochs``.
        epochs: ``{partition: (current leader epoch, epoch to look up)}``.

    Returns:
        ``{partition: its answer}`` for the partitions the broker answered (an unrequested
        one is left out, as ``OffsetsForLeaderEpochUtils.handleResponse`` ignores it).

    Raises:
        BrokerNotAvailableError: the broker could not be reached or timed out, or answers
            neither OffsetsForLeaderEpoch v2 nor v3 (older than 2.1).
    """
    if not epochs:
        return {}
    try:
        response = await kafka.send(node_id, OffsetForLeaderEpochRequest(epochs))
    except NotImplementedError as e:
        raise BrokerNotAvailableError(
            f"broker {node_id} answers no OffsetsForLeaderEpoch v2+: {e}"
        ) from e
    except AiokafkaError as e:  # pragma: no cover - KafkaClient.send translates these
        raise BrokerNotAvailableError(f"OffsetsForLeaderEpoch to {node_id}: {e!r}") from e
    out: dict[TopicPartition, EpochEndOffset] = {}
    for topic, partitions in response.topics:
        for error_code, partition, leader_epoch, end_offset in partitions:
            tp = TopicPartition(topic, partition)
            if tp in epochs:
                out[tp] = EpochEndOffset(int(error_code), int(leader_epoch), int(end_offset))
    return out


# -- OffsetCommit v6-v7 and OffsetFetch v5 (keys 8, 9): offsets with their leader epoch ------


class OffsetCommitResponse_v6(Response):
    API_KEY = 8
    API_VERSION = 6
    SCHEMA = OffsetCommitResponse_v3.SCHEMA


class OffsetCommitResponse_v7(Response):
    API_KEY = 8
    API_VERSION = 7
    SCHEMA = OffsetCommitResponse_v3.SCHEMA


_COMMIT_TOPICS = (
    "topics",
    Array(
        ("topic", String("utf-8")),
        (
            "partitions",
            Array(
                ("partition", Int32),
                ("offset", Int64),
                ("committed_leader_epoch", Int32),
                ("metadata", String("utf-8")),
            ),
        ),
    ),
)


class OffsetCommitRequest_v6(RequestStruct):
    API_KEY = 8
    API_VERSION = 6
    RESPONSE_TYPE = OffsetCommitResponse_v6
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        ("generation_id", Int32),
        ("member_id", String("utf-8")),
        _COMMIT_TOPICS,
    )


class OffsetCommitRequest_v7(RequestStruct):
    API_KEY = 8
    API_VERSION = 7
    RESPONSE_TYPE = OffsetCommitResponse_v7
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        ("generation_id", Int32),
        ("member_id", String("utf-8")),
        ("group_instance_id", String("utf-8")),
        _COMMIT_TOPICS,
    )


OffsetCommitEpochStruct: TypeAlias = (
    OffsetCommitRequest_v2
    | OffsetCommitRequest_v3
    | OffsetCommitRequest_v6
    | OffsetCommitRequest_v7
)


class OffsetCommitEpochRequest(Request[OffsetCommitEpochStruct]):
    """OffsetCommit with each offset's leader epoch (``CommittedLeaderEpoch``, v6+).

    The newest of v2, v3, v6 and v7 both sides know (v7 from Kafka 2.3 on; the flexible v8+
    are not needed by a consumer that has no ``group.instance.id``); v2-v3 carry no epoch and
    keep the broker's retention (-1), as aiokafka's ``OffsetCommitRequest``.

    Args:
        group_id: ``group.id``.
        generation: the group generation (-1: a "simple consumer" commit).
        member_id: the member id of that generation (``""`` with -1).
        topics: ``[(topic, [(partition, offset, leader epoch, metadata)])]``; epoch -1
            unknown.

    Raises:
        NotImplementedError: (at ``prepare``) no version in common.
    """

    API_KEY = 8

    def __init__(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        topics: list[tuple[str, list[tuple[int, int, int, str]]]],
    ) -> None:
        self.group_id = group_id
        self.generation = generation
        self.member_id = member_id
        self.topics = topics

    def build(self, request_struct_class: type[OffsetCommitEpochStruct]) -> OffsetCommitEpochStruct:
        head = (self.group_id, self.generation, self.member_id)
        version = request_struct_class.API_VERSION
        if version < 6:
            old = [(t, [(p, o, m) for p, o, _, m in parts]) for t, parts in self.topics]
            return request_struct_class(*head, -1, old)
        if version == 6:
            return request_struct_class(*head, self.topics)
        return request_struct_class(*head, None, self.topics)


class OffsetFetchResponse_v5(Response):
    API_KEY = 9
    API_VERSION = 5
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            Array(
                ("topic", String("utf-8")),
                (
                    "partitions",
                    Array(
                        ("partition", Int32),
                        ("offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("metadata", String("utf-8")),
                        ("error_code", Int16),
                    ),
                ),
            ),
        ),
        ("error_code", Int16),
    )


class OffsetFetchRequest_v5(RequestStruct):
    API_KEY = 9
    API_VERSION = 5
    RESPONSE_TYPE = OffsetFetchResponse_v5
    SCHEMA = OffsetFetchRequest_v3.SCHEMA


OffsetFetchEpochStruct: TypeAlias = (
    OffsetFetchRequest_v1 | OffsetFetchRequest_v2 | OffsetFetchRequest_v3 | OffsetFetchRequest_v5
)


class OffsetFetchEpochRequest(Request[OffsetFetchEpochStruct]):
    """OffsetFetch answering each offset's leader epoch (``CommittedLeaderEpoch``, v5+).

    The newest of v1, v2, v3 and v5 both sides know (v5 from Kafka 2.1 on). Partitions of a
    v5 answer are ``(partition, offset, leader epoch, metadata, error code)``, of the older
    ones ``(partition, offset, metadata, error code)``.

    Args:
        group_id: ``group.id``.
        topics: ``[(topic, [partition])]``; ``None``: every partition with an offset (v2+).

    Raises:
        IncompatibleBrokerVersion: (at ``prepare``) ``topics`` is ``None`` and the broker
            knows only v1.
        NotImplementedError: (at ``prepare``) no version in common.
    """

    API_KEY = 9

    def __init__(self, group_id: str, topics: list[tuple[str, list[int]]] | None) -> None:
        self.group_id = group_id
        self.topics = topics

    def build(self, request_struct_class: type[OffsetFetchEpochStruct]) -> OffsetFetchEpochStruct:
        if request_struct_class.API_VERSION < 2 and self.topics is None:
            raise IncompatibleBrokerVersion("OffsetFetch v1 needs the partitions named")
        return request_struct_class(self.group_id, self.topics)
