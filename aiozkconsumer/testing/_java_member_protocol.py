"""The contract between :class:`~aiozkconsumer.testing.java_member.JavaConsumerMember` and its
Java process (pure): what the process is given, and the lines it writes back.

In: a properties file (the consumer configuration, :meth:`MemberSettings.consumer_properties`)
and the program's arguments (:meth:`MemberSettings.command`, as the ``main`` of
:data:`~aiozkconsumer.testing._java_member_source.JAVA_SOURCE` reads them).

Out: one tab-separated line per event on stdout, which :class:`OutputParser` turns into events
as they arrive (the Java client's own log, ``org.apache.kafka.clients.consumer`` at INFO, goes
to stderr and from there to the member's ``log_file``):

- ``STARTED <client id>``: subscribed (the constructor accepted the configuration).
- ``RECORD <topic> <partition> <offset> <timestamp ms> <key> <value>``: key and value in
  base64, ``-`` for null; written as ``poll()`` returns the record.
- ``REVOKED|ASSIGNED|LOST <topic:partition,...>``: the ``ConsumerRebalanceListener`` calls.
- ``ASSIGNMENT <generation> <member id> <topic:partition,...>``: the partitions owned after
  each listener call (the eager classic protocol revokes everything and assigns the new
  set; the cooperative and ``consumer`` protocols add and remove only the difference).
- ``COMMITTED <topic:partition=offset,...>``: after a successful ``commitSync`` (commit mode
  ``"sync"`` only; offsets are the next offsets to read).
- ``ERROR <exception; caused by ...>``: the consumer failed; it is closed and the process
  exits with 1.
- ``CLOSED``: ``KafkaConsumer.close`` returned: the member left the group.

Nothing here starts a process or reads a pipe, so both directions are tested without a JVM.
Import the public names from :mod:`aiozkconsumer.testing.java_member`.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing._java_member_source import (
    JAVA_CLASS,
    LOG4J2_PROPERTIES,
    LOG4J_PROPERTIES,
)

__all__ = [
    "ASSIGNORS",
    "COMMIT_MODES",
    "GROUP_PROTOCOLS",
    "JVM_OPTIONS",
    "REMOTE_ASSIGNORS",
    "Closed",
    "Committed",
    "Failed",
    "JavaAssignment",
    "JavaRecord",
    "ListenerCall",
    "MemberSettings",
    "OutputEvent",
    "OutputParser",
    "Started",
    "parse_partitions",
    "properties_text",
    "subscription_of",
]

ASSIGNORS: Mapping[str, str] = {
    "range": "org.apache.kafka.clients.consumer.RangeAssignor",
    "roundrobin": "org.apache.kafka.clients.consumer.RoundRobinAssignor",
    "sticky": "org.apache.kafka.clients.consumer.StickyAssignor",
    "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
}
"""Client-side assignors of the classic protocol: our name -> the Java class
(``partition.assignment.strategy``). Their protocol names in JoinGroup are ``range``,
``roundrobin``, ``sticky`` and ``cooperative-sticky``."""

REMOTE_ASSIGNORS: tuple[str, ...] = ("range", "uniform")
"""Server-side assignors of the ``consumer`` protocol (KIP-848, ``group.remote.assignor``)."""

GROUP_PROTOCOLS: tuple[str, ...] = ("classic", "consumer")
COMMIT_MODES: tuple[str, ...] = ("auto", "sync", "none")

JVM_OPTIONS = [
    "-Xms64m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    # C1 only: a test member lives seconds to minutes; it starts faster and uses one core less.
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
]
"""The member JVM's options: a small heap, the serial collector, the C1 compiler only."""


# ---- in: settings, properties, arguments -------------------------------------------------


def subscription_of(topics: str | Sequence[str] | re.Pattern[str]) -> tuple[str, str]:
    """The program's subscription arguments: ``("topics", "a,b")`` or ``("pattern", regex)``.

    Args:
        topics: a topic name, a sequence of them, or a compiled regular expression (the
            pattern text is handed to Java's ``Pattern``).

    Raises:
        ValueError: if no topic is given, or a name is empty.
    """
    if isinstance(topics, re.Pattern):
        return ("pattern", topics.pattern)
    names = [topics] if isinstance(topics, str) else list(topics)
    if not names or not all(names):
        raise ValueError("give at least one topic (and no empty name)")
    return ("topics", ",".join(names))


@dataclass(frozen=True, kw_only=True)
class MemberSettings:
    """What one member process is told: its consumer configuration and its arguments.

    The attributes are :class:`~aiozkconsumer.testing.java_member.JavaConsumerMember`'s
    arguments of the same names (see there), checked at construction.

    Raises:
        ValueError: if ``group_protocol``, ``assignor`` or ``commit`` is not one of the allowed
            values (:data:`GROUP_PROTOCOLS`; :data:`ASSIGNORS` with the classic protocol,
            :data:`REMOTE_ASSIGNORS` with ``consumer``; :data:`COMMIT_MODES`).
    """

    bootstrap: str
    group: str
    client_id: str
    subscription: tuple[str, str]
    """As :func:`subscription_of` returns it."""
    assignor: str = "range"
    group_protocol: str = "classic"
    commit: str = "auto"
    auto_commit_interval_ms: int = 1000
    session_timeout_ms: int = 10_000
    extra_properties: Mapping[str, str] = field(default_factory=dict)
    close_timeout_s: float = 10.0
    poll_timeout_ms: int = 1000

    def __post_init__(self) -> None:
        if self.group_protocol not in GROUP_PROTOCOLS:
            raise ValueError(
                f"group_protocol must be one of {', '.join(GROUP_PROTOCOLS)}, "
                f"got {self.group_protocol!r}"
            )
        allowed = tuple(ASSIGNORS) if self.group_protocol == "classic" else REMOTE_ASSIGNORS
        if self.assignor not in allowed:
            raise ValueError(
                f"assignor must be one of {', '.join(allowed)} with the {self.group_protocol} "
                f"protocol, got {self.assignor!r}"
            )
        if self.commit not in COMMIT_MODES:
            raise ValueError(
                f"commit must be one of {', '.join(COMMIT_MODES)}, got {self.commit!r}"
            )

    def consumer_properties(self) -> dict[str, str]:
        """The consumer configuration the process gets (``extra_properties`` applied last)."""
        props = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "client.id": self.client_id,
            "key.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
            "value.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": "false",
            "enable.auto.commit": "true" if self.commit == "auto" else "false",
            "auto.commit.interval.ms": str(self.auto_commit_interval_ms),
            "group.protocol": self.group_protocol,
        }
        if self.group_protocol == "classic":
            props["partition.assignment.strategy"] = ASSIGNORS[self.assignor]
            props["session.timeout.ms"] = str(self.session_timeout_ms)
            props["heartbeat.interval.ms"] = str(min(1000, self.session_timeout_ms // 3))
        else:
            props["group.remote.assignor"] = self.assignor
        if self.subscription[0] == "pattern":
            # A pattern subscription sees new topics only with fresh metadata.
            props["metadata.max.age.ms"] = "2000"
        props.update(self.extra_properties)
        return props

    def work_files(self) -> dict[str, str]:
        """The files the process reads from its work directory: name -> text."""
        return {
            "consumer.properties": properties_text(self.consumer_properties()),
            "log4j.properties": LOG4J_PROPERTIES,
            "log4j2.properties": LOG4J2_PROPERTIES,
        }

    def command(self, java: str, classes: Path, libs: Path, work: Path) -> list[str]:
        """The process's command line.

        Args:
            java: the ``java`` executable.
            classes: the compiled member class's directory (``build_java_member``).
            libs: the provisioned ``libs`` directory (``kafka-clients`` and its dependencies).
            work: the work directory holding :meth:`work_files`.
        """
        mode, subscription = self.subscription
        return [
            java,
            *JVM_OPTIONS,
            f"-Dlog4j.configuration=file:{work / 'log4j.properties'}",
            f"-Dlog4j2.configurationFile={work / 'log4j2.properties'}",
            "-cp",
            f"{classes}{os.pathsep}{libs}/*",
            JAVA_CLASS,
            str(work / "consumer.properties"),
            mode,
            subscription,
            self.commit,
            str(int(self.close_timeout_s * 1000)),
            str(self.poll_timeout_ms),
        ]


def properties_text(props: Mapping[str, str]) -> str:
    """``props`` as a Java ``.properties`` file (``key=value`` lines, values escaped)."""
    return "".join(f"{k}={_escape(v)}\n" for k, v in props.items())


def _escape(value: str) -> str:
    """Escape a value for a Java ``.properties`` file (backslashes and line breaks)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


# ---- out: the events the process reports ---------------------------------------------------


@dataclass(frozen=True)
class JavaRecord:
    """One record as the Java consumer's ``poll()`` returned it.

    Attributes:
        topic: the topic.
        partition: the partition number.
        offset: the record's offset.
        timestamp_ms: the record's timestamp, ms since the epoch.
        key: the key bytes, or None.
        value: the value bytes, or None (a tombstone).
        received_at: when the member read the line from the process, ``time.time()``
            seconds (0.0 when built by hand).
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    received_at: float = 0.0

    @property
    def tp(self) -> TopicPartition:
        """The record's ``TopicPartition``."""
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class JavaAssignment:
    """The partitions a Java member owned after one ``ConsumerRebalanceListener`` call.

    Attributes:
        generation: the group generation (``ConsumerGroupMetadata.generationId``; the member
            epoch with the ``consumer`` protocol), -1 when unknown.
        member_id: the member id the coordinator gave it ("" when unknown).
        partitions: every partition owned after the call.
        change: the listener call: ``"assigned"``, ``"revoked"`` or ``"lost"``.
        changed: the partitions the call was about.
        received_at: when the member read the ``ASSIGNMENT`` line from the process,
            ``time.time()`` seconds (0.0 when built by hand).
    """

    generation: int
    member_id: str
    partitions: frozenset[TopicPartition]
    change: str
    changed: frozenset[TopicPartition]
    received_at: float = 0.0


@dataclass(frozen=True)
class ListenerCall:
    """A ``REVOKED``, ``ASSIGNED`` or ``LOST`` line: ``change`` is the call, lower-cased."""

    change: str
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True)
class Committed:
    """A ``COMMITTED`` line: the offsets (next to read) ``commitSync`` wrote."""

    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class Started:
    """A ``STARTED`` line: the consumer was built and subscribed."""

    client_id: str


@dataclass(frozen=True)
class Closed:
    """A ``CLOSED`` line: ``KafkaConsumer.close`` returned (the member left the group)."""


@dataclass(frozen=True)
class Failed:
    """An ``ERROR`` line: the exception the consumer died of, on one line."""

    error: str


OutputEvent = JavaRecord | JavaAssignment | ListenerCall | Committed | Started | Closed | Failed
"""What one line of the process's output says."""


def parse_partitions(text: str) -> frozenset[TopicPartition]:
    """Parse ``topic:partition,...`` (topic names cannot hold ``:`` or ``,``).

    Raises:
        ValueError: a partition is not a number.
    """
    out: set[TopicPartition] = set()
    for item in text.split(","):
        if item:
            topic, _, partition = item.rpartition(":")
            out.add(TopicPartition(topic, int(partition)))
    return frozenset(out)


def _bytes(text: str) -> bytes | None:
    return None if text == "-" else base64.b64decode(text)


class OutputParser:
    """Turns the process's output lines into events, in order.

    It keeps the last listener call, which the ``ASSIGNMENT`` line after it completes into a
    :class:`JavaAssignment`.
    """

    def __init__(self) -> None:
        self.last_change: tuple[str, frozenset[TopicPartition]] = ("assigned", frozenset())
        """The last ``REVOKED``/``ASSIGNED``/``LOST`` call and its partitions."""

    def parse(self, line: str, received_at: float) -> OutputEvent | None:
        """The event one output line reports.

        Args:
            line: the line, without its newline.
            received_at: when it was read, ``time.time()`` seconds (records and assignments
                carry it).

        Returns:
            The event, or None for a line of no known kind.

        Raises:
            ValueError: a line of a known kind does not parse (wrong field count, a number or
                base64 value that is not one); nothing is changed then.
        """
        kind, _, rest = line.partition("\t")
        fields = rest.split("\t")
        if kind == "RECORD":
            topic, partition, offset, timestamp, key, value = fields
            return JavaRecord(
                topic,
                int(partition),
                int(offset),
                int(timestamp),
                _bytes(key),
                _bytes(value),
                received_at,
            )
        if kind == "ASSIGNMENT":
            generation, member_id, owned = fields
            change, changed = self.last_change
            return JavaAssignment(
                int(generation), member_id, parse_partitions(owned), change, changed, received_at
            )
        if kind in ("ASSIGNED", "REVOKED", "LOST"):
            call = ListenerCall(kind.lower(), parse_partitions(rest))
            self.last_change = (call.change, call.partitions)
            return call
        if kind == "COMMITTED":
            offsets: dict[TopicPartition, int] = {}
            for item in rest.split(","):
                tp, _, offset = item.partition("=")
                (parsed,) = parse_partitions(tp)
                offsets[parsed] = int(offset)
            return Committed(offsets)
        if kind == "STARTED":
            return Started(rest)
        if kind == "CLOSED":
            return Closed()
        if kind == "ERROR":
            return Failed(rest)
        return None
