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
from collections.abc import Mapping
from typing import TYPE_CHECKING

from aiokafka.protocol.offset import OffsetRequest

from ..errors import UnknownTopicError
from ..records import TopicPartition
from .errors import PartitionError, classify_partition_error, error_name
from .transactions import READ_UNCOMMITTED

if TYPE_CHECKING:
    from .client import KafkaClient

__all__ = ["list_offsets"]

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
