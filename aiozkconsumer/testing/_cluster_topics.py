"""Topics and records of a local cluster: create a topic and wait until it is usable,
produce records, read the log start and end offsets.

:class:`TopicTools` is the part of :class:`~aiozkconsumer.testing.cluster.LocalCluster` that
loads and inspects data; the clients that do it are in
:mod:`~aiozkconsumer.testing._records`, bootstrapped from the brokers that run and are not
paused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from aiozkconsumer.errors import BrokerNotAvailableError
from aiozkconsumer.testing import _readiness, _records
from aiozkconsumer.testing._cluster_base import ClusterCore

__all__ = ["TopicTools"]


class TopicTools(ClusterCore):
    """Topic administration and records, on a running cluster."""

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
    ) -> None:
        """Create a topic and wait until it is usable.

        Returns once every running broker's metadata gives each partition a leader (and, in
        the ZooKeeper flavour, ``/brokers/topics/<name>`` exists in ZooKeeper).

        Args:
            name: topic name (``[a-zA-Z0-9._-]``, at most 249 characters).
            partitions: number of partitions, at least 1.
            replication_factor: replicas per partition (at most the number of brokers).
            config: topic-level configs, e.g. ``{"cleanup.policy": "compact"}``.

        Raises:
            LocalClusterError: if the cluster is not running, the broker rejects the topic
                (e.g. it already exists; the message carries Kafka's error name), or it does
                not become usable within ``startup_timeout_s``.
            BrokerNotAvailableError: if no broker can be reached.
        """
        self._require_running()
        await _records.create_topic(
            self._live_bootstrap, name, partitions, replication_factor, config
        )
        await self._wait_topic_ready(name, partitions)

    async def produce(
        self,
        topic: str,
        records: Iterable[tuple[bytes | None, bytes]],
        *,
        partition: int | None = None,
    ) -> int:
        """Produce ``(key, value)`` records with ``acks=all`` and wait for every ack.

        Records are packed into large batches per partition and pipelined (aiokafka's
        ``create_batch``/``send_batch``), so a million small records take seconds. Without
        ``partition``, a keyed record goes where aiokafka's default partitioner sends it
        (murmur2 of the key, as the Java client) and a record without key to a random
        partition. Order is kept within a partition.

        Args:
            topic: an existing topic.
            records: ``(key, value)`` pairs, consumed once (a generator is fine).
            partition: send every record to this partition instead.

        Returns:
            The number of records acknowledged (all of them).

        Raises:
            UnknownTopicError: if the topic does not exist (or ``partition`` is not one of
                its partitions).
            ProduceError: if some batches were not acknowledged; ``acknowledged`` says how
                many records were.
            LocalClusterError: if the cluster is not running or a record is larger than a
                batch (512 KiB).
            BrokerNotAvailableError: if no broker can be reached.
        """
        self._require_running()
        return await _records.produce(self._live_bootstrap(), topic, records, partition)

    async def produce_to_partitions(
        self,
        topic: str,
        records_by_partition: Mapping[int, Sequence[tuple[bytes | None, bytes]]],
    ) -> int:
        """Produce records to explicit partitions (the fastest path), ``acks=all``.

        Batches of different partitions are interleaved, so one produce request carries a
        batch for every partition of a broker. Order is kept within each partition.

        Args:
            topic: an existing topic.
            records_by_partition: partition -> its ``(key, value)`` records, in order.

        Returns:
            The number of records acknowledged (all of them).

        Raises:
            UnknownTopicError: if the topic or one of the partitions does not exist.
            ProduceError: if some batches were not acknowledged.
            LocalClusterError: if the cluster is not running or a record is too large.
            BrokerNotAvailableError: if no broker can be reached.
        """
        self._require_running()
        return await _records.produce_to_partitions(
            self._live_bootstrap(), topic, records_by_partition
        )

    async def log_end_offsets(self, topic: str) -> dict[int, int]:
        """The log end offset (high watermark: offset of the next record) per partition.

        Uses ListOffsets (``AIOKafkaConsumer.end_offsets``, no consumer group).

        Args:
            topic: an existing topic.

        Returns:
            ``{partition: log end offset}`` for every partition of the topic.

        Raises:
            UnknownTopicError: if the topic does not exist.
            LocalClusterError: if the cluster is not running or the request fails.
            BrokerNotAvailableError: if no broker can be reached.
        """
        return await self._list_offsets(topic, latest=True)

    async def beginning_offsets(self, topic: str) -> dict[int, int]:
        """The log start offset (earliest available record) per partition.

        Args:
            topic: an existing topic.

        Returns:
            ``{partition: log start offset}`` for every partition of the topic.

        Raises:
            UnknownTopicError: if the topic does not exist.
            LocalClusterError: if the cluster is not running or the request fails.
            BrokerNotAvailableError: if no broker can be reached.
        """
        return await self._list_offsets(topic, latest=False)

    # ---- internals -------------------------------------------------------------------

    async def _wait_topic_ready(self, topic: str, partitions: int) -> None:
        await _readiness.wait_topic(
            None if self.kraft else self.zookeeper_connect,
            self._live_bootstrap,
            self._brokers,
            topic,
            partitions,
            time_limit=self._settings.startup_timeout_s,
        )

    def _live_bootstrap(self) -> str:
        """Bootstrap servers of the brokers that run and are not paused.

        (A paused broker accepts connections but never answers: bootstrapping from it
        would stall for a whole request timeout.)
        """
        bootstrap = ",".join(
            s.address for s in self._brokers.values() if s.alive() and not s.paused
        )
        if not bootstrap:
            raise BrokerNotAvailableError("no broker of the cluster is running")
        return bootstrap

    async def _list_offsets(self, topic: str, *, latest: bool) -> dict[int, int]:
        self._require_running()
        return await _records.list_offsets(self._live_bootstrap, topic, latest=latest)
