"""The old consumer's command-line tools, as an async library (Kafka 0.10.2.1, ``kafka.tools``).

The ``aiozkconsumer`` command line (``aiozkconsumer.cli``) is a thin layer over this package,
which does the work and can be used and tested on its own. Six modules, one idea each (the
two largest are packages split by job, their pure parts apart):

- :mod:`aiozkconsumer.tools.admin`: :class:`GroupAdmin`, one ZooKeeper session and one
  :class:`~aiozkconsumer.cluster.ClusterView` for the group tools: list, describe (offsets,
  members, state) and delete groups (``ConsumerGroupCommand --zookeeper``), the offset
  checker's view (``ConsumerOffsetChecker``), offset export / import / update
  (``ExportZkOffsets``, ``ImportZkOffsets``, ``UpdateOffsetsInZK``), the offsets reset of
  ``kafka-consumer-groups.sh --reset-offsets`` and the rebalance check
  (``VerifyConsumerRebalance``, its rules in the pure :func:`check_ownership`). One module
  a job: session, describe, offsets, reset, delete; the pure decisions in
  :mod:`aiozkconsumer.tools.admin.judges`.
- :mod:`aiozkconsumer.tools.reset`: the offsets reset's pure planning: which partitions
  (:func:`select_partitions`), the new offset per mode and the clamp to the log
  (:func:`plan_reset`), and its arguments (:func:`parse_topic_partitions`,
  :func:`parse_datetime_ms`, :func:`parse_duration`).
- :mod:`aiozkconsumer.tools.kafka_groups`: :class:`KafkaGroupAdmin`, the Kafka-coordinated
  groups as the brokers' group coordinators know them (``ConsumerGroupCommand
  --bootstrap-server``): list them with their state, describe one's members and lag.
- :mod:`aiozkconsumer.tools.migrate`: :func:`migrate_offsets`, a group's committed offsets
  copied from ZooKeeper to Kafka or back (``offsets migrate``), refused while the target group
  has live members; what it copies is the pure :func:`plan_migration`'s decision.
- :mod:`aiozkconsumer.tools.console`: :class:`ConsoleConsumer`, the console consumer of the
  old mode (``ConsoleConsumer --zookeeper``), with :class:`MessageFormatter` as its
  ``DefaultMessageFormatter`` and :func:`parse_properties` for ``.properties`` files. One
  module a job: formatters, sinks, the consumer loops, and their pure rules.
- :mod:`aiozkconsumer.tools.offsets_file`: the offsets file formats (pure): ``ExportZkOffsets``'
  (:func:`parse_offsets_file`, :func:`format_offsets_file`) and ``kafka-consumer-groups``' CSV
  (:func:`parse_offsets_csv`, :func:`format_offsets_csv`), told apart by
  :func:`detect_offsets_format`.

Each public name of the six modules is importable from ``aiozkconsumer.tools`` itself.
"""

from __future__ import annotations

from .admin import (
    GROUP_STABILITY,
    GroupActiveError,
    GroupAdmin,
    GroupDescription,
    GroupMembers,
    GroupState,
    MalformedNode,
    MemberDescription,
    MemberInfo,
    OffsetsStorage,
    PartitionOffsetState,
    RebalanceVerification,
    ResetStorage,
    UnknownGroupError,
    check_ownership,
    consumer_id_host,
    group_state,
    infer_assignment_strategy,
    owner_consumer_id,
)
from .console import (
    ConsoleConsumer,
    FdSink,
    JsonFormatter,
    KcatFormatter,
    MessageFormatter,
    OutputSink,
    PartitionConsoleConsumer,
    RecordFormatter,
    StreamSink,
    parse_properties,
    random_console_group,
)
from .kafka_groups import (
    GROUP_STATES,
    KafkaGroupAdmin,
    KafkaGroupDescription,
    KafkaGroupListing,
    MemberAssignmentState,
    PartitionAssignmentState,
)
from .migrate import (
    MigrationPlan,
    MigrationTarget,
    PartitionMigration,
    kafka_group_members,
    migrate_offsets,
    plan_migration,
)
from .offsets_file import (
    OffsetEntry,
    OffsetsFileError,
    OffsetsFormat,
    detect_offsets_format,
    format_offsets_csv,
    format_offsets_file,
    parse_offsets_csv,
    parse_offsets_file,
)
from .reset import (
    AllTopics,
    FromOffsets,
    PartitionReset,
    ResetPlan,
    ResetPlanError,
    ResetScope,
    ResetSpec,
    ShiftBy,
    ToEarliest,
    ToLatest,
    ToOffset,
    TopicsScope,
    ToTimestamp,
    format_timestamp_ms,
    parse_datetime_ms,
    parse_duration,
    parse_topic_partitions,
    plan_reset,
    select_partitions,
)

__all__ = [
    "GROUP_STABILITY",
    "GROUP_STATES",
    "AllTopics",
    "ConsoleConsumer",
    "FdSink",
    "JsonFormatter",
    "KcatFormatter",
    "OutputSink",
    "PartitionConsoleConsumer",
    "RecordFormatter",
    "StreamSink",
    "FromOffsets",
    "GroupActiveError",
    "GroupAdmin",
    "GroupDescription",
    "GroupMembers",
    "GroupState",
    "KafkaGroupAdmin",
    "KafkaGroupDescription",
    "KafkaGroupListing",
    "MalformedNode",
    "MemberAssignmentState",
    "MemberDescription",
    "MemberInfo",
    "MessageFormatter",
    "MigrationPlan",
    "MigrationTarget",
    "OffsetEntry",
    "OffsetsFileError",
    "OffsetsFormat",
    "OffsetsStorage",
    "PartitionAssignmentState",
    "PartitionMigration",
    "PartitionOffsetState",
    "PartitionReset",
    "RebalanceVerification",
    "ResetPlan",
    "ResetPlanError",
    "ResetScope",
    "ResetSpec",
    "ResetStorage",
    "ShiftBy",
    "ToEarliest",
    "ToLatest",
    "ToOffset",
    "ToTimestamp",
    "TopicsScope",
    "UnknownGroupError",
    "check_ownership",
    "consumer_id_host",
    "detect_offsets_format",
    "format_offsets_csv",
    "format_offsets_file",
    "format_timestamp_ms",
    "group_state",
    "infer_assignment_strategy",
    "kafka_group_members",
    "migrate_offsets",
    "owner_consumer_id",
    "parse_datetime_ms",
    "parse_duration",
    "parse_offsets_csv",
    "parse_offsets_file",
    "parse_properties",
    "parse_topic_partitions",
    "plan_migration",
    "plan_reset",
    "random_console_group",
    "select_partitions",
]
