"""Topics and records for the local cluster: create a topic, produce in bulk, read offsets.

What :meth:`LocalCluster.create_topic`, :meth:`LocalCluster.produce`,
:meth:`LocalCluster.produce_to_partitions`, :meth:`LocalCluster.log_end_offsets` and
:meth:`LocalCluster.beginning_offsets` do once the cluster has checked that it runs. The
functions get the cluster's live bootstrap servers, never the cluster; each client they
create is closed (bounded) before they return.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from aiozkconsumer.errors import BrokerNotAvailableError, UnknownTopicError
from aiozkconsumer.testing._clients import (
    CLIENT_ID,
    CLOSE_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    UNKNOWN_TOPIC_OR_PARTITION,
    bounded_close,
    kafka_client,
    topic_metadata,
)
from aiozkconsumer.testing._errors import LocalClusterError, ProduceError

__all__ = ["create_topic", "list_offsets", "produce", "produce_to_partitions"]

log = logging.getLogger(__name__)

_CREATE_TOPIC_ATTEMPTS = 4
_CREATE_TOPIC_BACKOFF_S = 1.0
# aiokafka's producer sends one request per broker at a time, one batch per partition in
# it: big batches are what makes bulk produce fast. Kafka's default message.max.bytes
# (1 MiB + 12) bounds a batch.
_BATCH_BYTES = 512 * 1024

Routed = Iterator[tuple[int, bytes | None, bytes]]
"""``(partition, key, value)`` records in the order they are to be sent."""


async def create_topic(
    bootstrap: Callable[[], str],
    name: str,
    partitions: int,
    replication_factor: int,
    config: Mapping[str, str] | None,
) -> None:
    """Ask a broker to create a topic, retrying errors a new controller may answer with.

    Does not wait until the topic is usable (that is the cluster's readiness check).

    Args:
        bootstrap: returns the live brokers' bootstrap servers (asked at each attempt).
        name: the topic.
        partitions: its number of partitions.
        replication_factor: replicas per partition.
        config: topic-level configs.

    Raises:
        LocalClusterError: if the broker rejects the topic (the message carries Kafka's error
            name), after up to 4 attempts for transient errors.
        BrokerNotAvailableError: if no broker can be reached.
    """
    for attempt in range(1, _CREATE_TOPIC_ATTEMPTS + 1):
        admin = AIOKafkaAdminClient(
            bootstrap_servers=bootstrap(),
            client_id=CLIENT_ID,
            request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
        )
        try:
            await admin.start()
            response = await admin.create_topics(
                [NewTopic(name, partitions, replication_factor, topic_configs=dict(config or {}))]
            )
        except kafka_errors.KafkaConnectionError as exc:
            raise BrokerNotAvailableError(f"cannot reach Kafka: {exc}") from exc
        except kafka_errors.KafkaError as exc:
            raise LocalClusterError(f"creating topic {name!r} failed: {exc!r}") from exc
        finally:
            await bounded_close(admin.close(), time_limit=CLOSE_TIMEOUT_S, what="admin client")
        errors = [
            (kafka_errors.for_code(int(entry[1])), entry[2] if len(entry) > 2 else "")
            for entry in response.topic_errors
            if int(entry[1]) != 0
        ]
        if attempt > 1 and errors and errors[0][0] is kafka_errors.TopicAlreadyExistsError:
            return  # an earlier attempt created it after all
        if not errors:
            return
        error, message = errors[0]
        # A controller that ZooKeeper or a broker restart has just replaced may answer
        # UNKNOWN_SERVER_ERROR or a retriable error for a moment.
        transient = error is kafka_errors.UnknownError or getattr(error, "retriable", False)
        if not transient or attempt == _CREATE_TOPIC_ATTEMPTS:
            raise LocalClusterError(
                f"creating topic {name!r} failed: {error.__name__} {message or ''}".rstrip()
            )
        log.info("creating topic %r: %s; retrying", name, error.__name__)
        await asyncio.sleep(_CREATE_TOPIC_BACKOFF_S * attempt)


async def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes]],
    partition: int | None,
) -> int:
    """Produce ``(key, value)`` records; see :meth:`LocalCluster.produce`.

    Raises:
        UnknownTopicError: if the topic (or ``partition``) does not exist.
        ProduceError: if some batches were not acknowledged.
        LocalClusterError: if a record is larger than a batch.
        BrokerNotAvailableError: if no broker can be reached.
    """
    async with _producer(bootstrap) as producer:
        all_partitions = await _partitions_for(producer.client, topic)
        if partition is not None:
            if partition not in all_partitions:
                raise UnknownTopicError(topic, f"topic {topic!r} has no partition {partition}")
            fixed = partition

            def routed() -> Routed:
                for key, value in records:
                    yield fixed, key, value

        elif len(all_partitions) == 1:
            only = all_partitions[0]

            def routed() -> Routed:
                for key, value in records:
                    yield only, key, value

        else:
            partitioner = DefaultPartitioner()
            choice = random.choice

            def routed() -> Routed:
                for key, value in records:
                    if key is None:
                        yield choice(all_partitions), key, value
                    else:
                        yield partitioner(key, all_partitions, all_partitions), key, value

        return await _send_batches(producer, topic, routed())


async def produce_to_partitions(
    bootstrap: str,
    topic: str,
    records_by_partition: Mapping[int, Sequence[tuple[bytes | None, bytes]]],
) -> int:
    """Produce records to explicit partitions; see :meth:`LocalCluster.produce_to_partitions`.

    Raises:
        UnknownTopicError: if the topic or one of the partitions does not exist.
        ProduceError: if some batches were not acknowledged.
        LocalClusterError: if a record is too large.
        BrokerNotAvailableError: if no broker can be reached.
    """
    async with _producer(bootstrap) as producer:
        all_partitions = set(await _partitions_for(producer.client, topic))
        unknown = sorted(set(records_by_partition) - all_partitions)
        if unknown:
            raise UnknownTopicError(topic, f"topic {topic!r} has no partitions {unknown}")

        def interleaved() -> Routed:
            # ~ one batch worth of 100-byte records per partition per round
            chunk = 4096
            pending = {p: (rs, 0) for p, rs in records_by_partition.items() if rs}
            while pending:
                for p in list(pending):
                    rs, start = pending[p]
                    end = min(start + chunk, len(rs))
                    for i in range(start, end):
                        key, value = rs[i]
                        yield p, key, value
                    if end >= len(rs):
                        del pending[p]
                    else:
                        pending[p] = (rs, end)

        return await _send_batches(producer, topic, interleaved())


async def list_offsets(bootstrap: Callable[[], str], topic: str, *, latest: bool) -> dict[int, int]:
    """The log end (``latest``) or log start offset of every partition of ``topic``.

    Uses ListOffsets (``AIOKafkaConsumer.end_offsets`` / ``beginning_offsets``, no group).

    Raises:
        UnknownTopicError: if the topic does not exist.
        LocalClusterError: if the request fails.
        BrokerNotAvailableError: if no broker can be reached.
    """
    async with kafka_client(bootstrap(), time_limit=REQUEST_TIMEOUT_S) as client:
        partitions = await _partitions_for(client, topic)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap(),
        client_id=CLIENT_ID,
        enable_auto_commit=False,
        request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
    )
    try:
        try:
            await consumer.start()
        except kafka_errors.KafkaConnectionError as exc:
            raise BrokerNotAvailableError(f"cannot reach Kafka: {exc}") from exc
        tps = [KafkaTopicPartition(topic, p) for p in partitions]
        try:
            if latest:
                offsets = await consumer.end_offsets(tps)
            else:
                offsets = await consumer.beginning_offsets(tps)
        except kafka_errors.KafkaError as exc:
            raise LocalClusterError(f"ListOffsets for {topic!r} failed: {exc!r}") from exc
    finally:
        await bounded_close(consumer.stop(), time_limit=CLOSE_TIMEOUT_S, what="consumer")
    return {int(tp.partition): int(offset) for tp, offset in offsets.items()}


@contextlib.asynccontextmanager
async def _producer(bootstrap: str) -> AsyncIterator[Any]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        client_id=CLIENT_ID,
        acks="all",
        linger_ms=5,
        max_batch_size=_BATCH_BYTES,
        max_request_size=2 * _BATCH_BYTES,
        request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
    )
    try:
        try:
            await producer.start()
        except kafka_errors.KafkaConnectionError as exc:
            raise BrokerNotAvailableError(f"cannot reach Kafka: {exc}") from exc
        yield producer
    finally:
        await bounded_close(producer.stop(), time_limit=REQUEST_TIMEOUT_S, what="producer")


async def _partitions_for(client: Any, topic: str) -> list[int]:
    """The topic's partitions, asked of a broker directly through an ``AIOKafkaClient``.

    (aiokafka's own lookup waits ``request_timeout_ms`` before reporting an unknown
    topic; this fails at once.)
    """
    node_ids = [int(b.nodeId) for b in client.cluster.brokers()]
    if not node_ids:
        raise BrokerNotAvailableError("no broker known")
    random.shuffle(node_ids)
    failures: list[str] = []
    for node_id in node_ids:  # some may be down (kill_broker) or not ready
        try:
            entry = await topic_metadata(client, node_id, topic, REQUEST_TIMEOUT_S)
            break
        except (kafka_errors.KafkaError, TimeoutError) as exc:
            failures.append(f"broker {node_id}: {exc!r}")
    else:
        raise BrokerNotAvailableError(
            f"metadata request for {topic!r} failed: {'; '.join(failures)}"
        )
    if entry["error_code"] == UNKNOWN_TOPIC_OR_PARTITION or not entry["partitions"]:
        raise UnknownTopicError(topic)
    return sorted(int(p["partition"]) for p in entry["partitions"])


async def _send_batches(producer: Any, topic: str, routed: Routed) -> int:
    """Pack records into one open batch per partition; submit full ones as they fill.

    ``send_batch`` waits while the partition's previous batch is not yet drained, so at
    most two batches per partition are buffered: memory stays bounded and the broker
    gets one request per round trip with a batch for each partition.
    """
    builders: dict[int, Any] = {}
    sent: list[tuple[asyncio.Future[Any], int]] = []

    async def submit(part: int, builder: Any) -> None:
        builder.close()
        try:
            future = await producer.send_batch(builder, topic, partition=part)
        except kafka_errors.KafkaError as exc:
            raise LocalClusterError(f"producing to {topic}/{part} failed: {exc!r}") from exc
        sent.append((future, builder.record_count()))

    try:
        for count, (part, key, value) in enumerate(routed, 1):
            if not count & 0x3FFF:
                # Filling a batch is pure CPU: let the loop breathe (ZooKeeper
                # heartbeats, consumers under test) every 16k records.
                await asyncio.sleep(0)
            builder = builders.get(part)
            if builder is None:
                builder = builders[part] = producer.create_batch()
            if builder.append(timestamp=None, key=key, value=value) is None:
                await submit(part, builder)
                builder = builders[part] = producer.create_batch()
                if builder.append(timestamp=None, key=key, value=value) is None:
                    raise LocalClusterError(
                        f"a record of {len(value)} bytes does not fit in a "
                        f"{_BATCH_BYTES} byte batch"
                    )
        for part, builder in builders.items():
            if builder.record_count():
                await submit(part, builder)
        builders.clear()
    finally:
        # Results of everything already submitted, even if we stop early: an
        # unretrieved failed future would be reported by the loop.
        outcomes = await asyncio.gather(*(f for f, _ in sent), return_exceptions=True)
    acknowledged = sum(n for (_, n), r in zip(sent, outcomes, strict=True) if not _is_exc(r))
    failures = [r for r in outcomes if _is_exc(r)]
    if failures:
        total = sum(n for _, n in sent)
        raise ProduceError(
            f"{total - acknowledged} of {total} records to {topic!r} were not acknowledged "
            f"({len(failures)} failed batches; first error: {failures[0]!r})",
            acknowledged,
        )
    return acknowledged


def _is_exc(outcome: object) -> bool:
    return isinstance(outcome, BaseException)
