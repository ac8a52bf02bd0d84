"""ListOffsets at an isolation level: the last stable offset as the latest under read_committed.

``KafkaClient.list_offsets`` asks with ``isolation_level=0`` (read_uncommitted), so its
``LATEST`` is the high watermark. A ``read_committed`` reader must start (``auto.offset.reset
=largest``), plan (the Spark source's end offsets) and stop (``--exit-at-end``) at the last
stable offset instead, as the Java client's ``endOffsets``/``seekToEnd`` do: records past it
are not readable yet, and records between it and the high watermark may still be committed
(starting at the high watermark would skip them). :func:`list_offsets` sends the same
ListOffsets request (v2+, which carries the isolation level) through the client.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from aiokafka.protocol.offset import OffsetRequest

from ..errors import BrokerNotAvailableError, NoBrokersError, UnknownTopicError
from ..records import TopicPartition
from .errors import PartitionError, classify_partition_error, error_name
from .transactions import READ_UNCOMMITTED

if TYPE_CHECKING:
    from .client import KafkaClient

__all__ = ["leader_offsets", "leader_offsets_for", "list_offsets"]

log = logging.getLogger(__name__)


async def list_offsets(
    kafka: KafkaClient,
    node_id: int,
    timestamps: Mapping[TopicPartition, int],
    *,
    isolation_level: int = READ_UNCOMMITTED,
) -> dict[TopicPartition, int]:
    """Ask one broker (the partitions' leader) for offsets by timestamp, at an isolation level.

    As ``KafkaClient.list_offsets``; with :data:`~.transactions.READ_COMMITTED`, ``LATEST``
    (-1) answers the last stable offset rather than the high watermark.

    Args:
        kafka: a started client.
        node_id: the leader of every partition in ``timestamps``.
        timestamps: ``{tp: EARLIEST | LATEST | epoch ms}``.
        isolation_level: ``0`` read_uncommitted (``KafkaClient.list_offsets`` itself) or
            ``1`` read_committed.

    Returns:
        ``{tp: offset}`` for the partitions the broker answered without error.

    Raises:
        BrokerNotAvailableError: the broker could not be reached.
        UnknownTopicError: the broker does not know a partition's topic.
    """
    if isolation_level == READ_UNCOMMITTED:
        return await kafka.list_offsets(node_id, timestamps)
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for tp, ts in timestamps.items():
        by_topic.setdefault(tp.topic, []).append((tp.partition, ts))
    response = await kafka.send(node_id, OffsetRequest(-1, isolation_level, list(by_topic.items())))
    result: dict[TopicPartition, int] = {}
    for topic, parts in response.topics:
        for partition, error_code, *info in parts:
            kind = classify_partition_error(error_code)
            if kind is PartitionError.NONE:
                result[TopicPartition(topic, partition)] = int(info[-1])
            elif kind is PartitionError.UNKNOWN_TOPIC:
                raise UnknownTopicError(topic, f"broker {node_id} does not know {topic!r}")
            else:
                log.debug(
                    "ListOffsets (isolation level %d) for [%s,%s] failed: %s",
                    isolation_level,
                    topic,
                    partition,
                    error_name(error_code),
                )
    return result


async def leader_offsets(
    kafka: KafkaClient,
    tps: Iterable[TopicPartition],
    timestamp: int,
    isolation: int = READ_UNCOMMITTED,
) -> dict[TopicPartition, int]:
    """Ask each partition's leader for an offset by timestamp (ListOffsets).

    Args:
        kafka: a started client.
        tps: the partitions.
        timestamp: ``EARLIEST``, ``LATEST`` or epoch milliseconds.
        isolation: ``READ_UNCOMMITTED`` (``LATEST`` is the high watermark) or
            ``READ_COMMITTED`` (the last stable offset).

    Returns:
        ``{tp: offset}`` for the partitions whose leader answered.

    Raises:
        NoBrokersError: no broker answered a metadata request.
        BrokerNotAvailableError: a partition has no leader, or its leader is unreachable.
    """
    return await leader_offsets_for(kafka, dict.fromkeys(tps, timestamp), isolation)


async def leader_offsets_for(
    kafka: KafkaClient,
    timestamps: Mapping[TopicPartition, int],
    isolation: int = READ_UNCOMMITTED,
) -> dict[TopicPartition, int]:
    """As :func:`leader_offsets`, with a timestamp per partition (``{tp: EARLIEST | LATEST
    | epoch ms}``), one ListOffsets per leader."""
    if not timestamps:
        return {}
    if not await kafka.refresh_metadata({tp.topic for tp in timestamps}):
        raise NoBrokersError(f"no broker of {kafka.bootstrap_servers!r} answered")
    by_leader: dict[int, dict[TopicPartition, int]] = {}
    for tp in sorted(timestamps):
        leader = kafka.leader_for(tp)
        if leader is None:
            raise BrokerNotAvailableError(f"partition {tp} has no leader")
        by_leader.setdefault(leader, {})[tp] = timestamps[tp]
    result: dict[TopicPartition, int] = {}
    for leader, asked in sorted(by_leader.items()):
        result.update(await list_offsets(kafka, leader, asked, isolation_level=isolation))
    return result
