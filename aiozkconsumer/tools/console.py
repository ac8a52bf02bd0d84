"""The console consumer of the old mode (``ConsoleConsumer --zookeeper``, Kafka 0.10.2).

:class:`ConsoleConsumer` runs one connector with one stream and writes each record through
:class:`MessageFormatter` (the original's ``DefaultMessageFormatter``); :func:`parse_properties`
reads the ``consumer.properties`` file it may be given, and :func:`random_console_group` makes
the group id it uses when none is given.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anyio

from ..config import ConsumerConfig
from ..connector import ZookeeperConsumerConnector
from ..errors import ConsumerTimeoutError, InvalidConfigError
from ..records import MessageAndMetadata
from ..subscription import TopicFilter

__all__ = ["ConsoleConsumer", "MessageFormatter", "parse_properties", "random_console_group"]


def _unescape_properties(value: str) -> str:
    out: list[str] = []
    it = iter(value)
    for ch in it:
        if ch != "\\":
            out.append(ch)
            continue
        nxt = next(it, "")
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Parse a Java ``.properties`` file (``consumer.properties``), as ``Properties.load``.

    ``key=value``, ``key: value`` or ``key value``; ``#`` and ``!`` start comment lines; a line
    ending in an odd number of backslashes continues on the next line; ``\\t``, ``\\n``,
    ``\\=``, ``\\:`` and ``\\\\`` are unescaped. Unicode escapes (``\\uXXXX``) are not
    supported. Later keys override earlier ones.

    Args:
        text: the file's text.

    Returns:
        Key -> value, in file order.
    """
    props: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        i = 0
        key_chars: list[str] = []
        while i < len(line):
            ch = line[i]
            if ch == "\\" and i + 1 < len(line):
                key_chars.append(line[i : i + 2])
                i += 2
                continue
            if ch in "=: \t\f":
                break
            key_chars.append(ch)
            i += 1
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape_properties("".join(key_chars))] = _unescape_properties(rest)
    return props


def random_console_group() -> str:
    """A group id as the console consumer makes one: ``console-consumer-<0..99999>``."""
    return f"console-consumer-{random.randint(0, 99999)}"


_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
_FORMATTER_FLAGS = ("print.key", "print.timestamp", "print.partition", "print.offset")
_FORMATTER_KEYS = (*_FORMATTER_FLAGS, "print.value", "key.separator", "line.separator")


@dataclass(frozen=True)
class MessageFormatter:
    """The console consumer's ``DefaultMessageFormatter`` (0.10.2, plus partition and offset).

    Writes, in this order and each followed by ``key_separator``: ``<type>:<timestamp>``
    (``CreateTime:1490000000000``, or ``NO_TIMESTAMP``), ``Partition:<p>``, ``Offset:<o>``
    (the last two as Kafka 2.x's formatter), the key; then the value followed by
    ``line_separator``. A null key or value is written as ``null``.

    Attributes:
        print_key: ``print.key``.
        print_timestamp: ``print.timestamp``.
        print_partition: ``print.partition``.
        print_offset: ``print.offset``.
        print_value: ``print.value`` (default true).
        key_separator: ``key.separator`` (default a tab).
        line_separator: ``line.separator`` (default a newline).
    """

    print_key: bool = False
    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> MessageFormatter:
        """Build a formatter from ``--property`` values, as ``DefaultMessageFormatter.init``.

        Booleans are true when the trimmed value equals ``true`` in any case.

        Args:
            props: formatter property -> value.

        Returns:
            The formatter.

        Raises:
            InvalidConfigError: an unknown property (the original ignored it silently).
        """
        unknown = sorted(set(props) - set(_FORMATTER_KEYS))
        if unknown:
            raise InvalidConfigError(
                unknown[0],
                f"unknown formatter property; known: {', '.join(_FORMATTER_KEYS)}",
            )

        def flag(key: str, default: bool) -> bool:
            return props[key].strip().lower() == "true" if key in props else default

        return cls(
            print_key=flag("print.key", False),
            print_timestamp=flag("print.timestamp", False),
            print_partition=flag("print.partition", False),
            print_offset=flag("print.offset", False),
            print_value=flag("print.value", True),
            key_separator=props.get("key.separator", "\t").encode(),
            line_separator=props.get("line.separator", "\n").encode(),
        )

    def format(self, msg: MessageAndMetadata) -> bytes:
        """The bytes written for one record.

        Args:
            msg: the record.

        Returns:
            Its formatted bytes, ending with ``line_separator``.
        """
        parts: list[bytes] = []
        sep = self.key_separator
        if self.print_timestamp:
            kind = _TIMESTAMP_TYPES.get(msg.timestamp_type)
            parts.append(b"NO_TIMESTAMP" if kind is None else f"{kind}:{msg.timestamp}".encode())
            parts.append(sep)
        if self.print_partition:
            parts += (b"Partition:%d" % msg.partition, sep)
        if self.print_offset:
            parts += (b"Offset:%d" % msg.offset, sep)
        if self.print_key:
            parts += (b"null" if msg.key is None else msg.key, sep)
        if self.print_value:
            parts.append(b"null" if msg.value is None else msg.value)
        parts.append(self.line_separator)
        return b"".join(parts)


class ConsoleConsumer:
    """The console consumer of the old mode (``ConsoleConsumer --zookeeper``, 0.10.2).

    One connector with one stream over a topic filter (``createMessageStreamsByFilter(filter,
    1)``); records go to ``write`` through the formatter until ``max_messages`` were written,
    ``consumer.timeout.ms`` passes without a record, or :meth:`stop` is called. Leaving
    commits the consumed offsets (with ``auto.commit.enable``) and closes the session. The
    offsets count exactly the records written: a batch never holds more than the records
    still wanted.

    Args:
        config: the consumer configuration.
        topic_filter: a ``Whitelist`` or ``Blacklist``.
        write: called with each formatted record.
        flush: called after each batch of records.
        formatter: the record formatter.
        max_messages: stop after this many records (``None``: no limit).

    Attributes:
        count: records written so far.
        timed_out: whether the run ended because ``consumer.timeout.ms`` passed.
        output_closed: whether the run ended because ``write`` or ``flush`` raised
            ``BrokenPipeError`` (the reader of a pipe went away).
    """

    def __init__(
        self,
        config: ConsumerConfig,
        topic_filter: TopicFilter,
        write: Callable[[bytes], object],
        flush: Callable[[], object] = lambda: None,
        *,
        formatter: MessageFormatter | None = None,
        max_messages: int | None = None,
    ) -> None:
        self.config = config
        self.topic_filter = topic_filter
        self.write = write
        self.flush = flush
        self.formatter = formatter or MessageFormatter()
        self.max_messages = max_messages
        self.count = 0
        self.timed_out = False
        self.output_closed = False
        self.connector: ZookeeperConsumerConnector | None = None
        self._stop = anyio.Event()

    def stop(self) -> None:
        """Ask :meth:`run` to end (e.g. from a signal handler in the event loop's thread)."""
        self._stop.set()

    async def run(self) -> int:
        """Consume until the limit, the timeout or :meth:`stop`; then shut down.

        Returns:
            The number of records written.

        Raises:
            ConsumerError: from the connector (``ZookeeperConnectionError``,
                ``ConsumerRebalanceFailedError``, ...).
        """
        async with ZookeeperConsumerConnector(self.config) as connector:
            self.connector = connector
            async with anyio.create_task_group() as tg:

                async def watch_stop() -> None:
                    await self._stop.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(watch_stop)
                (stream,) = await connector.create_message_streams_by_filter(self.topic_filter, 1)
                iterator = stream.iterator
                fmt = self.formatter.format
                while self.max_messages is None or self.count < self.max_messages:
                    want = 500 if self.max_messages is None else self.max_messages - self.count
                    try:
                        batch = await iterator.next_batch(min(want, 500))
                    except StopAsyncIteration:
                        break
                    except ConsumerTimeoutError:
                        self.timed_out = True
                        break
                    try:
                        for msg in batch:
                            self.write(fmt(msg))
                            self.count += 1
                        self.flush()
                    except BrokenPipeError:
                        # The reader went away (``| head``): a normal end. Records of the
                        # batch not written count as consumed; the original lost them too.
                        self.output_closed = True
                        break
                tg.cancel_scope.cancel()
        return self.count
