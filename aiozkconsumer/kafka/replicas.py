"""Where a partition's replicas are, from the client's Kafka metadata (KIP-392, KIP-881).

The fetcher follows a preferred read replica only while the metadata shows it online: a broker
the last metadata response listed, and one of the partition's replicas (the Java client's
``Cluster.nodeIfOnline``). aiokafka's ``ClusterMetadata`` keeps each partition's replicas but
offers no public way to read them; this module is the one place that reads them. The racks
of each partition's replicas are the rack-aware range assignor's input (KIP-881).
"""

from __future__ import annotations

from typing import Any

from ..records import TopicPartition

__all__ = ["metadata_version", "preferred_read_replicas", "replica_online", "replica_racks"]


def replica_online(kafka: Any, tp: TopicPartition, node_id: int) -> bool:
    """Whether ``node_id`` is a live broker holding a replica of ``tp``, per the metadata.

    Args:
        kafka: a :class:`~aiozkconsumer.cluster.KafkaClient`.
        tp: the partition.
        node_id: the broker.

    Returns:
        ``False`` when the metadata does not list the broker (it is down, or the metadata
        is older than it), does not know the partition, or does not count the broker among
        its replicas (reassigned away). Never raises.
    """
    cluster = kafka.raw.cluster
    brokers = getattr(cluster, "_brokers", None) or {}
    partitions = (getattr(cluster, "_partitions", None) or {}).get(tp.topic) or {}
    meta = partitions.get(tp.partition)
    if meta is None or node_id not in brokers:
        return False
    return node_id in (meta.replicas or ())


def replica_racks(kafka: Any, topic: str) -> list[frozenset[str]]:
    """The racks of each partition's replicas (all replicas, online or not, as the Java
    client's ``PartitionInfo.replicas()``), per the last metadata.

    Args:
        kafka: a :class:`~aiozkconsumer.cluster.KafkaClient`.
        topic: the topic.

    Returns:
        Index = partition id, up to the highest partition the metadata knows; a broker the
        metadata does not list, or one without ``broker.rack``, adds no rack. Empty for an
        unknown topic. Never raises.
    """
    cluster = kafka.raw.cluster
    brokers = getattr(cluster, "_brokers", None) or {}
    partitions = (getattr(cluster, "_partitions", None) or {}).get(topic) or {}
    if not partitions:
        return []
    out: list[frozenset[str]] = [frozenset()] * (max(partitions) + 1)
    for partition, meta in partitions.items():
        racks = {getattr(brokers.get(r), "rack", None) for r in (meta.replicas or ())}
        out[partition] = frozenset(r for r in racks if r)
    return out


def metadata_version(kafka: Any) -> Any:
    """A value that changes whenever the client's metadata is updated (the time of its
    last successful update), for callers that look again only when it does."""
    return getattr(kafka.raw.cluster, "_last_successful_refresh_ms", None)


def preferred_read_replicas(response: Any) -> dict[TopicPartition, int]:
    """The ``PreferredReadReplica`` of each partition a Fetch v11+ response names one for.

    Our parser's responses carry them apart; aiokafka's decoded v11 response (the fallback
    path) has it as the partition's seventh field of eight.

    Returns:
        ``{partition: broker id}``; empty when the response names none.
    """
    found = getattr(response, "preferred_read_replicas", None)
    if found is not None:
        return dict(found)
    out: dict[TopicPartition, int] = {}
    for topic, parts in response.topics:
        for part in parts:
            if len(part) == 8 and isinstance(part[6], int) and part[6] >= 0:
                out[TopicPartition(topic, part[0])] = part[6]
    return out
