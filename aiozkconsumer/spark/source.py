"""The ``zkkafka`` Structured Streaming source: a consumer group member that plans for Spark.

Three processes take part (PySpark's Python data source design):

- the **source runner** (one Python process per source per query, on the driver host) holds
  the :class:`ZkKafkaStreamReader` Spark plans with. On first use the reader starts a
  :class:`GroupMember`: the connector ``group.coordinator`` names
  (:func:`~aiozkconsumer.create_connector`: a ``ZookeeperConsumerConnector`` or a
  ``KafkaConsumerConnector``) with ``fetch=False``, on an event loop in a background thread.
  It joins the group (registration and owner nodes in ZooKeeper, or JoinGroup / SyncGroup
  with the broker's group coordinator), takes part in every rebalance and reads the
  committed offsets — and fetches nothing. ``latestOffset`` plans offset ranges for the
  partitions it owns; ``commit`` writes the offsets of a batch to the group's offset store
  once Spark committed it.
- **executors** run :meth:`ZkKafkaStreamReader.read` for each planned range: it fetches
  ``[start, end)`` straight from the partition's leader (:class:`~aiozkconsumer.simple_consumer.
  SimpleConsumer`) and yields Arrow record batches in the Kafka source's schema (see
  :mod:`~aiozkconsumer.spark.executor`: each worker keeps its consumers between tasks).
- the **application** only registers the source (:func:`register`) and starts the query.

Replays are deterministic: every range is derived from the checkpointed start and end
offsets alone (see ``planning``), never from the group's state at replay time.

The source's parts have modules of their own, whose public names this module re-exports:
the group member (``member.py``), the stream reader (``stream_reader.py``), batch reads and
their commit (``batch_reader.py``), the data source and its registration
(``registration.py``); their pure decisions are in ``planning.py`` and ``driver_plan.py``.
"""

from __future__ import annotations

from .batch_reader import ZkKafkaBatchReader, commit_batch
from .member import GroupMember, MemberSnapshot
from .registration import ZkKafkaDataSource, check_worker_python, register
from .stream_reader import ZkKafkaStreamReader

__all__ = [
    "GroupMember",
    "MemberSnapshot",
    "ZkKafkaBatchReader",
    "ZkKafkaDataSource",
    "ZkKafkaStreamReader",
    "check_worker_python",
    "commit_batch",
    "register",
]
