"""Kafka's error codes and aiokafka's exceptions, translated once.

Kafka answers with a protocol error code per partition (``org.apache.kafka.common.protocol.
Errors``); aiokafka maps codes to exception classes and raises its own exceptions from its
client and record parsers. This module is the one place that reads ``aiokafka.errors``:

- the error codes the consumer's rules name (:data:`NONE`, :data:`OFFSET_OUT_OF_RANGE` ...),
  with Kafka's names for messages (:func:`error_name`) and whether retrying may help
  (:func:`is_retriable`);
- :class:`PartitionError` / :func:`classify_partition_error`: what a partition's error code in
  a Fetch or ListOffsets answer asks the caller to do;
- the aiokafka exception classes the adapter and the record parsing code catch
  (:data:`AiokafkaError`, :data:`IncompatibleBrokerVersion`, :data:`RECORD_PARSE_ERRORS`),
  each translated into :mod:`aiozkconsumer.errors` where it is caught.
"""

from __future__ import annotations

import enum
import functools

from aiokafka import errors as _aiokafka_errors

__all__ = [
    "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE",
    "NONE",
    "NOT_COORDINATOR",
    "NO_ANSWER",
    "OFFSET_METADATA_TOO_LARGE",
    "OFFSET_OUT_OF_RANGE",
    "RECORD_PARSE_ERRORS",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "AiokafkaError",
    "IncompatibleBrokerVersion",
    "PartitionError",
    "classify_partition_error",
    "error_name",
    "is_retriable",
]

# Kafka protocol error codes the consumer's rules name (Kafka's ``Errors`` enum).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
"""``GROUP_LOAD_IN_PROGRESS`` in 0.10.2."""
COORDINATOR_NOT_AVAILABLE = 15
"""``GROUP_COORDINATOR_NOT_AVAILABLE`` in 0.10.2."""
NOT_COORDINATOR = 16
"""``NOT_COORDINATOR_FOR_GROUP`` in 0.10.2."""
NO_ANSWER = -1
"""Pseudo error code of a partition the coordinator's answer left out (Kafka's ``UNKNOWN``)."""

AiokafkaError: type[Exception] = _aiokafka_errors.KafkaError
"""Base class of aiokafka's exceptions, for the adapter's ``except`` clauses; never re-raised
as such (each is translated into an :mod:`aiozkconsumer.errors` class where caught)."""

IncompatibleBrokerVersion: type[Exception] = _aiokafka_errors.IncompatibleBrokerVersion
"""aiokafka's "the broker does not support this request" (no API version in common)."""

RECORD_PARSE_ERRORS: tuple[type[Exception], ...] = (_aiokafka_errors.CorruptRecordException,)
"""What aiokafka's record parsers (``MemoryRecords`` and the batches it yields) raise for bytes
that do not parse; callers translate it into
:class:`~aiozkconsumer.errors.CorruptRecordError`."""


@functools.cache
def error_name(code: int) -> str:
    """Kafka's name of a protocol error code, with the code: ``"NOT_COORDINATOR (16)"``.

    A code aiokafka does not know is named ``UNKNOWN``.
    """
    return f"{_aiokafka_errors.for_code(code).message} ({code})"


@functools.cache
def is_retriable(code: int) -> bool:
    """Whether the error ``code`` is transient: the same request may succeed later.

    Kafka's ``RetriableException`` subclasses (``NOT_LEADER_FOR_PARTITION``,
    ``COORDINATOR_LOAD_IN_PROGRESS``, ``UNKNOWN_TOPIC_OR_PARTITION`` ...). ``NONE`` and
    unknown codes are not retriable.
    """
    return bool(_aiokafka_errors.for_code(code).retriable)


class PartitionError(enum.Enum):
    """What a partition's error code in a Fetch or ListOffsets answer asks of the caller."""

    NONE = "none"
    """No error: the partition's data (or offset) is in the answer."""
    OFFSET_OUT_OF_RANGE = "offset_out_of_range"
    """The offset asked for is outside the log (``OFFSET_OUT_OF_RANGE``): reset it."""
    UNKNOWN_TOPIC = "unknown_topic"
    """The broker does not know the topic or partition (``UNKNOWN_TOPIC_OR_PARTITION``).
    Retriable: a broker that has just restarted, or a new topic, may lag behind."""
    REFRESH_METADATA = "refresh_metadata"
    """A transient error (``NOT_LEADER_FOR_PARTITION``, ``LEADER_NOT_AVAILABLE``,
    ``REQUEST_TIMED_OUT`` ...): refresh metadata, find the leader again and retry."""
    FATAL = "fatal"
    """An error retrying cannot fix (e.g. ``TOPIC_AUTHORIZATION_FAILED``, ``CORRUPT_MESSAGE``,
    or a code this client does not know)."""

    @property
    def retriable(self) -> bool:
        """Whether the request may succeed if sent again (after a metadata refresh)."""
        return self in (PartitionError.UNKNOWN_TOPIC, PartitionError.REFRESH_METADATA)


@functools.cache
def classify_partition_error(code: int) -> PartitionError:
    """What the partition error ``code`` of a Fetch or ListOffsets answer means.

    Args:
        code: the partition's error code.

    Returns:
        ``NONE`` for 0, ``OFFSET_OUT_OF_RANGE`` for 1, ``UNKNOWN_TOPIC`` for 3,
        ``REFRESH_METADATA`` for the other retriable codes (:func:`is_retriable`), ``FATAL``
        for the rest.
    """
    if code == NONE:
        return PartitionError.NONE
    if code == OFFSET_OUT_OF_RANGE:
        return PartitionError.OFFSET_OUT_OF_RANGE
    if code == UNKNOWN_TOPIC_OR_PARTITION:
        return PartitionError.UNKNOWN_TOPIC
    return PartitionError.REFRESH_METADATA if is_retriable(code) else PartitionError.FATAL
