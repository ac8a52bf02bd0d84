"""One exception hierarchy for aiozkconsumer.

Errors raised by aiozk and aiokafka are translated into these classes at the boundary, by
the adapters (``zk/client.py`` for ZooKeeper, ``kafka/`` for Kafka); none of the libraries' own
exception types escape the public API, and callers catch these classes (never inspecting
``__cause__``). Names follow the original consumer (``kafka.common.*Exception``) in
Python spelling.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .records import TopicPartition

__all__ = [
    "AuthenticationError",
    "CommitFencedError",
    "BrokerNotAvailableError",
    "ConsumerClosedError",
    "ConsumerError",
    "ConsumerRebalanceFailedError",
    "ConsumerTimeoutError",
    "CorruptRecordError",
    "FencedInstanceIdError",
    "InvalidConfigError",
    "KafkaConnectionError",
    "MalformedZookeeperDataError",
    "MessageSizeTooLargeError",
    "MessageStreamsExistError",
    "NoBrokersError",
    "OffsetCommitError",
    "OffsetFetchError",
    "OffsetOutOfRangeError",
    "OffsetStorageError",
    "PartitionNotAssignedError",
    "RecordDecodeError",
    "SchemaRegistryError",
    "UnknownSchemaError",
    "UnknownTopicError",
    "UnreleasedInstanceIdError",
    "UnsupportedCodecError",
    "GroupCoordinatorError",
    "SslAuthenticationError",
    "ZookeeperAuthError",
    "ZookeeperConnectionError",
    "ZookeeperError",
    "ZookeeperBadVersionError",
    "ZookeeperNoNodeError",
    "ZookeeperNodeExistsError",
    "ZookeeperSessionExpiredError",
]


class ConsumerError(Exception):
    """Base class of every error aiozkconsumer raises."""


class InvalidConfigError(ConsumerError, ValueError):
    """A configuration value is missing, has the wrong type or is out of range.

    Attributes:
        key: the dotted property key at fault (``"group.id"``), as the original's
            ``InvalidConfigException`` / ``IllegalArgumentException`` messages name it.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class MessageStreamsExistError(ConsumerError):
    """``create_message_streams`` was called a second time on one connector.

    As ``MessageStreamsExistException`` ("can create message streams at most once").
    """


class ConsumerRebalanceFailedError(ConsumerError):
    """A rebalance did not succeed within ``rebalance.max.retries`` attempts."""


class ConsumerTimeoutError(ConsumerError, TimeoutError):
    """No record arrived within ``consumer.timeout.ms``; the iterator stays usable."""


class ConsumerClosedError(ConsumerError):
    """The connector is shut down (or not started) and cannot do what was asked."""


class MessageSizeTooLargeError(ConsumerError):
    """A record batch is larger than ``fetch.message.max.bytes``.

    As the original's ``MessageSizeTooLargeException``: increase the fetch size, or decrease
    the maximum message size the broker allows.
    """


class GroupCoordinatorError(ConsumerError):
    """A Kafka-coordinated group could not be joined or kept (``group.coordinator=kafka``).

    Raised after retrying what can be retried (no coordinator yet, the coordinator moved, a
    rebalance under way), or at once for what cannot (``GROUP_AUTHORIZATION_FAILED``,
    ``INCONSISTENT_GROUP_PROTOCOL``: the group's members use assignors this member does not
    offer, a broker too old for the group protocol).

    Attributes:
        group: ``group.id``.
        coordinator: ``host:port`` of the group coordinator, or ``"unknown"``.
        reason: what failed.
    """

    def __init__(self, group: str, coordinator: str, reason: str) -> None:
        super().__init__(f"group {group!r} (coordinator {coordinator}): {reason}")
        self.group = group
        self.coordinator = coordinator
        self.reason = reason


class FencedInstanceIdError(GroupCoordinatorError):
    """Another member took this member's ``group.instance.id``: the group coordinator
    answered ``FENCED_INSTANCE_ID`` (error 82). Fatal, as the Java client's
    ``FencedInstanceIdException``: the member stops handing out records and committing, and
    the connector fails with this error (raised by ``create_message_streams`` when it comes
    while joining, else by the connector's ``async with`` block).

    With the classic protocol, a member that joins with an instance id a live member has
    takes it over, and the older member is fenced at its next heartbeat; with
    ``group.protocol=consumer``, a member whose static membership was released (member
    epoch -2) and then taken by another, or that an admin removed, is fenced.

    Attributes:
        group, coordinator, reason: as :class:`GroupCoordinatorError`.
        instance_id: the ``group.instance.id`` at stake.
    """

    def __init__(self, group: str, coordinator: str, instance_id: str, reason: str) -> None:
        super().__init__(
            group,
            coordinator,
            f"group.instance.id {instance_id!r} was fenced: another member of the group uses "
            f"the same group.instance.id; each live member needs its own ({reason})",
        )
        self.instance_id = instance_id


class UnreleasedInstanceIdError(GroupCoordinatorError):
    """The group coordinator refused to let this member join with its ``group.instance.id``:
    a member with the same id is still in the group and did not leave (``UNRELEASED_INSTANCE_ID``,
    error 111; ``group.protocol=consumer`` only). Fatal, as the Java client's
    ``UnreleasedInstanceIdException`` (its ``ConsumerHeartbeatRequestManager``): either another
    live member has the id, or the previous one with it stopped without leaving (a crash) and
    its session has not timed out yet.

    Attributes:
        group, coordinator, reason: as :class:`GroupCoordinatorError`.
        instance_id: the ``group.instance.id`` at stake.
    """

    def __init__(self, group: str, coordinator: str, instance_id: str, reason: str) -> None:
        super().__init__(
            group,
            coordinator,
            f"group.instance.id {instance_id!r} is still held by another member of the group "
            f"(a live member with the same group.instance.id, or one that stopped without "
            f"leaving, until its session times out) ({reason})",
        )
        self.instance_id = instance_id


class ZookeeperError(ConsumerError):
    """Base class of ZooKeeper failures."""


class ZookeeperAuthError(ZookeeperError):
    """ZooKeeper refused this client: its credentials (``AUTH_FAILED``), or the node's ACL
    (``NOAUTH``) for the operation asked.

    Attributes:
        path: the node's path, or ``None`` for a failure of the session's authentication.
    """

    def __init__(self, path: str | None, message: str) -> None:
        super().__init__(message)
        self.path = path


class ZookeeperConnectionError(ZookeeperError, ConnectionError):
    """ZooKeeper could not be reached (or the connection was lost) in the time allowed."""


class ZookeeperSessionExpiredError(ZookeeperError):
    """The ZooKeeper session expired; its ephemeral nodes are gone."""


class ZookeeperNodeExistsError(ZookeeperError):
    """An ephemeral node another session owns is in the way.

    Attributes:
        path: the node's path.
    """

    def __init__(self, path: str, message: str | None = None) -> None:
        super().__init__(message or f"ZooKeeper node {path} already exists")
        self.path = path


class ZookeeperNoNodeError(ZookeeperError):
    """The node does not exist (ZooKeeper's ``NONODE``; kazoo's ``NoNodeError``).

    Attributes:
        path: the node's path.
    """

    def __init__(self, path: str, message: str | None = None) -> None:
        super().__init__(message or f"ZooKeeper node {path} does not exist")
        self.path = path


class ZookeeperBadVersionError(ZookeeperError):
    """A conditional write or check found another version (``BADVERSION``).

    Attributes:
        path: the node's path.
    """

    def __init__(self, path: str, message: str | None = None) -> None:
        super().__init__(message or f"ZooKeeper node {path} has another version")
        self.path = path


class MalformedZookeeperDataError(ZookeeperError, ValueError):
    """A ZooKeeper node holds data that does not parse as the original layout expects.

    Attributes:
        path: the node's path, or ``None`` when parsing data not read from a node.
        data: the raw bytes (or text) that failed to parse.
    """

    def __init__(self, path: str | None, data: bytes | str | None, reason: str) -> None:
        where = path if path is not None else "<data>"
        super().__init__(f"malformed data in ZooKeeper node {where}: {reason} (data: {data!r})")
        self.path = path
        self.data = data


class NoBrokersError(ConsumerError):
    """No broker is registered (``/brokers/ids`` is empty or missing)."""


class BrokerNotAvailableError(ConsumerError):
    """A broker (or every bootstrap broker) could not be reached."""


class KafkaConnectionError(BrokerNotAvailableError, ConnectionError):
    """A connection to a Kafka broker failed."""


class AuthenticationError(ConsumerError):
    """A broker refused this client's credentials, or the client could not authenticate.

    As the Java client's ``AuthenticationException`` (``SaslAuthenticationException`` for a
    SASL failure). Not retried in a loop: a wrong password stays wrong.

    Attributes:
        broker: ``host:port`` of the broker that refused (or could not be authenticated).
        mechanism: the SASL mechanism (``SCRAM-SHA-512``), or ``None`` for TLS.
    """

    def __init__(self, broker: str, mechanism: str | None, reason: str) -> None:
        how = f" with {mechanism}" if mechanism else ""
        super().__init__(f"authentication{how} at broker {broker} failed: {reason}")
        self.broker = broker
        self.mechanism = mechanism
        self.reason = reason


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake with a broker failed: untrusted or wrong-host certificate, a client
    certificate the broker refused, or TLS spoken to a port that does not (Java's
    ``SslAuthenticationException``)."""

    def __init__(self, broker: str, reason: str) -> None:
        super().__init__(broker, None, reason)


class UnknownTopicError(ConsumerError, LookupError):
    """A topic does not exist in the cluster.

    Attributes:
        topic: the topic's name.
    """

    def __init__(self, topic: str, message: str | None = None) -> None:
        super().__init__(message or f"unknown topic {topic!r}")
        self.topic = topic


class OffsetStorageError(ConsumerError):
    """Base class of failures to commit or read offsets in Kafka (``offsets.storage=kafka``).

    ZooKeeper-storage failures stay ``ZookeeperError``, as the original let ZooKeeper
    exceptions through ``commitOffsets`` unchanged.
    """


class OffsetCommitError(OffsetStorageError):
    """Some offsets were not committed to Kafka after every attempt the commit was allowed.

    Partitions the coordinator accepted stay committed (and, with ``dual.commit.enabled``,
    written to ZooKeeper); the next commit sends the failed ones again.

    Attributes:
        failed: ``{partition: reason}`` of the partitions not committed, the reason being
            Kafka's error name (``"NOT_COORDINATOR (16)"``) or why no answer came.
        committed: number of partitions the coordinator accepted.
        attempts: number of OffsetCommit attempts made (``1 + retries``).
    """

    def __init__(
        self,
        group: str,
        failed: Mapping[TopicPartition, str],
        *,
        committed: int,
        attempts: int,
    ) -> None:
        shown = ", ".join(f"{tp}: {why}" for tp, why in sorted(failed.items())[:5])
        more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
        super().__init__(
            f"offset commit of group {group!r} failed for {len(failed)} partition(s) after "
            f"{attempts} attempt(s) ({committed} committed): {shown}{more}"
        )
        self.failed = dict(failed)
        self.committed = committed
        self.attempts = attempts


class OffsetFetchError(OffsetStorageError):
    """Committed offsets could not be read from Kafka.

    Raised when the coordinator did not answer (or kept answering with a retriable error)
    within the fetch time limit, or answered with an error that retrying cannot fix (an
    authorization failure). The original looped forever here while holding the rebalance
    lock.

    Attributes:
        partitions: the partitions whose offsets were asked for.
        attempts: number of OffsetFetch attempts made.
    """

    def __init__(
        self,
        group: str,
        partitions: Iterable[TopicPartition],
        reason: str,
        *,
        attempts: int,
    ) -> None:
        self.partitions = tuple(sorted(partitions))
        self.attempts = attempts
        super().__init__(
            f"reading committed offsets of group {group!r} ({len(self.partitions)} "
            f"partition(s)) from Kafka failed after {attempts} attempt(s): {reason}"
        )


class OffsetOutOfRangeError(ConsumerError):
    """A fetch asked for an offset the partition does not hold (``OFFSET_OUT_OF_RANGE``).

    As the original's ``OffsetOutOfRangeException`` from ``SimpleConsumer.fetch``: the offset is
    below the log start offset (deleted by retention) or beyond the log end offset.

    Attributes:
        topic: the topic's name.
        partition: the partition number.
        offset: the offset that was asked for.
        earliest: the log start offset when the error was raised, ``None`` if it could not be
            read.
        latest: the log end offset (high watermark) when the error was raised, ``None`` if it
            could not be read. Fetching at exactly ``latest`` is valid (it returns no records).
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        earliest: int | None,
        latest: int | None,
    ) -> None:
        valid = (
            f"valid offsets are {earliest}..{latest} (log start offset..log end offset)"
            if earliest is not None and latest is not None
            else "the valid range could not be read"
        )
        super().__init__(
            f"offset {offset} is out of range for partition [{topic},{partition}]; {valid}"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.earliest = earliest
        self.latest = latest


class CorruptRecordError(ConsumerError):
    """A fetched record batch is corrupt: its CRC does not match, or it does not parse.

    The original's ``ConsumerIterator`` called ``ensureValid()`` on every message (0.10.2), so a
    message whose CRC did not match raised ``InvalidMessageException`` instead of being handed
    out; the Java ``KafkaConsumer`` and aiokafka check the CRC of every record batch when
    ``check.crcs`` is true and raise ``CorruptRecordException``. Here nothing of a corrupt
    batch is delivered, and the consumed offset stays before it, so nothing committed moves
    past it (see ``check.crcs`` and ``crc.error.action`` in ``ConsumerConfig``).

    Attributes:
        topic: the topic's name.
        partition: the partition number.
        offset: the first offset of the corrupt batch as its header gives it (the base
            offset), or, for a batch that does not parse at all, the offset after the last
            batch that did.
        last_offset: the batch's last offset as its header gives it, ``None`` when unknown.
        expected_crc: the CRC stored in the batch (CRC-32C for magic 2, CRC-32 for the
            legacy magic 0 and 1 message sets), ``None`` when not a CRC mismatch.
        actual_crc: the CRC computed over the bytes received, ``None`` likewise.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        reason: str,
        *,
        last_offset: int | None = None,
        expected_crc: int | None = None,
        actual_crc: int | None = None,
    ) -> None:
        offsets = f"offset {offset}"
        if last_offset is not None and last_offset != offset:
            offsets = f"offsets {offset}..{last_offset}"
        super().__init__(
            f"corrupt record batch in partition [{topic},{partition}] at {offsets}: {reason}"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.last_offset = last_offset
        self.expected_crc = expected_crc
        self.actual_crc = actual_crc

    @classmethod
    def crc_mismatch(
        cls, topic: str, partition: int, first: int, last: int, stored: int, computed: int
    ) -> CorruptRecordError:
        """The error for the batch at offsets ``first..last`` whose stored CRC is not ``computed``.

        Built by both record parsers' checks (``kafka/crc.py``, ``kafka/native.py``).
        """
        return cls(
            topic,
            partition,
            first,
            f"CRC mismatch: stored {stored:#010x}, computed {computed:#010x}",
            last_offset=last,
            expected_crc=stored,
            actual_crc=computed,
        )


class CommitFencedError(OffsetStorageError):
    """A commit was refused because another member claimed the partitions since.

    Each claim bumps the partition's fencing node (``/consumers/<group>/fencing/<topic>/<p>``);
    a member commits only while the node still has the version it saw when it claimed. A
    member that was paused past its session timeout (a zombie) is refused this way instead
    of moving the new owner's committed offset backwards.

    Attributes:
        fenced: the partitions whose commit was refused.
    """

    def __init__(self, group: str, fenced: Iterable[TopicPartition]) -> None:
        self.fenced = frozenset(fenced)
        shown = ", ".join(str(tp) for tp in sorted(self.fenced))
        super().__init__(
            f"offset commit of group {group!r} refused for {shown}: another member claimed "
            "them since this member did (fenced)"
        )


class PartitionNotAssignedError(ConsumerError, LookupError):
    """A runtime verb named a partition this member does not own now.

    As the Java client's ``IllegalStateException("No current assignment for partition ...")``
    from ``KafkaConsumer.seek``, ``pause``, ``resume`` and ``position``: those act on the
    current assignment only. A partition being given up by a rebalance under way (no longer
    handed out, its offset being committed) counts as not owned: the verb is refused rather
    than applied to an assignment that is ending.

    Attributes:
        partition: the partition named.
        owned: the partitions this member owned at the time (those still handed out).
        verb: the verb refused (``"seek"``, ``"pause"``, ...).
    """

    def __init__(
        self, verb: str, partition: TopicPartition, owned: Iterable[TopicPartition]
    ) -> None:
        self.verb = verb
        self.partition = partition
        self.owned = frozenset(owned)
        shown = ", ".join(str(tp) for tp in sorted(self.owned)) or "none"
        super().__init__(
            f"{verb}: no current assignment for partition {partition} (owned now: {shown})"
        )


class UnsupportedCodecError(ConsumerError):
    """A fetched record batch is compressed with a codec this installation cannot decompress.

    gzip comes with Python; snappy, lz4 and zstd come with ``cramjam``, a dependency of
    aiozkconsumer (through aiokafka's codecs), so this is raised only when that package is
    missing or broken (an installation without dependencies, ``pip install --no-deps``), or
    for a codec id Kafka does not define. The batch itself is intact (this is no
    :class:`CorruptRecordError`): install the package and read the partition again. Nothing
    of the batch is handed out and the consumed offset stays before it, so nothing committed
    moves past it; the stream's other partitions go on.

    Attributes:
        topic: the topic's name.
        partition: the partition number.
        offset: the batch's first offset (its base offset).
        last_offset: the batch's last offset as its header gives it.
        codec: the codec's name (``"gzip"``, ``"snappy"``, ``"lz4"``, ``"zstd"``, or
            ``"codec <id>"`` for an unknown id).
        package: the Python package that brings it (``"cramjam"``), ``None`` for an unknown
            codec.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        codec: str,
        *,
        last_offset: int | None = None,
        package: str | None = None,
        reason: str | None = None,
    ) -> None:
        offsets = f"offset {offset}"
        if last_offset is not None and last_offset != offset:
            offsets = f"offsets {offset}..{last_offset}"
        fix = (
            f"install the {package!r} package (pip install {package}; it is a dependency of "
            "aiozkconsumer) and read the partition again"
            if package is not None
            else "no package installed here decodes it"
        )
        detail = f" ({reason})" if reason else ""
        super().__init__(
            f"record batch in partition [{topic},{partition}] at {offsets} is compressed with "
            f"{codec}, which this installation cannot decompress{detail}: {fix}"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.last_offset = last_offset
        self.codec = codec
        self.package = package


class SchemaRegistryError(ConsumerError):
    """The Schema Registry could not be asked: unreachable, refused the credentials, or
    answered with an error other than "no such schema".

    The URL in the message and in :attr:`url` never carries credentials.

    Attributes:
        url: the registry's base URL (credentials removed).
        status: the HTTP status of the answer, ``None`` when there was none.
        reason: what failed.
    """

    def __init__(self, url: str, reason: str, *, status: int | None = None) -> None:
        where = f"schema registry {url}"
        super().__init__(f"{where}: HTTP {status}: {reason}" if status else f"{where}: {reason}")
        self.url = url
        self.status = status
        self.reason = reason


class RecordDecodeError(ConsumerError, ValueError):
    """A record's key or value could not be decoded with its schema: the bytes are not in
    the Confluent wire format (magic byte 0, a 4-byte schema id, the payload), the payload
    does not parse with the schema, or it fails the JSON Schema validation.

    Attributes:
        topic: the record's topic, ``None`` when decoded without its coordinates (a
            ``value_decoder`` is given the bytes only).
        partition: the record's partition, or ``None`` likewise.
        offset: the record's offset, or ``None`` likewise.
        schema_id: the schema id of the wire format header, ``None`` when the header
            itself is unreadable.
        reason: what failed.
    """

    def __init__(
        self,
        reason: str,
        *,
        schema_id: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        where = "record"
        if topic is not None:
            where = f"record at offset {offset} of partition [{topic},{partition}]"
        schema = f" (schema id {schema_id})" if schema_id is not None else ""
        super().__init__(f"cannot decode {where}{schema}: {reason}")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.schema_id = schema_id
        self.reason = reason

    def at(self, topic: str, partition: int, offset: int) -> RecordDecodeError:
        """The same error, naming the record's coordinates.

        Args:
            topic: the record's topic.
            partition: its partition.
            offset: its offset.

        Returns:
            A new error of the same class.
        """
        return type(self)(
            self.reason, schema_id=self.schema_id, topic=topic, partition=partition, offset=offset
        )


class UnknownSchemaError(RecordDecodeError, LookupError):
    """The registry has no schema with the record's schema id (Confluent error 40403)."""
