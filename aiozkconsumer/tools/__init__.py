"""The old consumer's command-line tools, as an async library (Kafka 0.10.2.1, ``kafka.tools``).

The ``aiozkconsumer`` command line (``aiozkconsumer.cli``) is a thin layer over this package,
which does the work and can be used and tested on its own. Four modules, one idea each:

- :mod:`aiozkconsumer.tools.admin`: :class:`GroupAdmin`, one ZooKeeper session and one
  :class:`~aiozkconsumer.cluster.ClusterView` for the group tools: list, describe and delete
  groups (``ConsumerGroupCommand --zookeeper``), the offset checker's view
  (``ConsumerOffsetChecker``), offset export / import / update (``ExportZkOffsets``,
  ``ImportZkOffsets``, ``UpdateOffsetsInZK``) and the rebalance check
  (``VerifyConsumerRebalance``, its rules in the pure :func:`check_ownership`).
- :mod:`aiozkconsumer.tools.kafka_groups`: :class:`KafkaGroupAdmin`, the Kafka-coordinated
  groups as the brokers' group coordinators know them (``ConsumerGroupCommand
  --bootstrap-server``): list them with their state, describe one's members and lag.
- :mod:`aiozkconsumer.tools.console`: :class:`ConsoleConsumer`, the console consumer of the
  old mode (``ConsoleConsumer --zookeeper``), with :class:`MessageFormatter` as its
  ``DefaultMessageFormatter`` and :func:`parse_properties` for ``.properties`` files.
- :mod:`aiozkconsumer.tools.offsets_file`: the offsets file format (pure):
  :func:`parse_offsets_file`, :func:`format_offsets_file`.

Each public name of the four modules is importable from ``aiozkconsumer.tools`` itself.
"""

from __future__ import annotations

from .admin import (
    GroupActiveError,
    GroupAdmin,
    GroupDescription,
    MemberInfo,
    OffsetsStorage,
    PartitionOffsetState,
    RebalanceVerification,
    UnknownGroupError,
    check_ownership,
    owner_consumer_id,
)
from .console import ConsoleConsumer, MessageFormatter, parse_properties, random_console_group
from .kafka_groups import (
    GROUP_STATES,
    KafkaGroupAdmin,
    KafkaGroupDescription,
    KafkaGroupListing,
    MemberAssignmentState,
    PartitionAssignmentState,
)
from .offsets_file import OffsetEntry, OffsetsFileError, format_offsets_file, parse_offsets_file

__all__ = [
    "GROUP_STATES",
    "ConsoleConsumer",
    "GroupActiveError",
    "GroupAdmin",
    "GroupDescription",
    "KafkaGroupAdmin",
    "KafkaGroupDescription",
    "KafkaGroupListing",
    "MemberAssignmentState",
    "MemberInfo",
    "MessageFormatter",
    "OffsetEntry",
    "OffsetsFileError",
    "OffsetsStorage",
    "PartitionAssignmentState",
    "PartitionOffsetState",
    "RebalanceVerification",
    "UnknownGroupError",
    "check_ownership",
    "format_offsets_file",
    "owner_consumer_id",
    "parse_offsets_file",
    "parse_properties",
    "random_console_group",
]
