"""The console consumer of the old mode (``ConsoleConsumer --zookeeper``, Kafka 0.10.2), and more.

:class:`ConsoleConsumer` runs one connector with one stream and writes each record through a
formatter: :class:`MessageFormatter` (the original's ``DefaultMessageFormatter``),
:class:`JsonFormatter` (one JSON object a line) or :class:`KcatFormatter` (kcat's ``-f``
format strings). :class:`PartitionConsoleConsumer` reads one partition from an offset through
a :class:`~aiozkconsumer.simple_consumer.SimpleConsumer`, without a group (the console
consumer's ``--partition``/``--offset``). Both write to an :class:`OutputSink`:
:class:`FdSink` writes to a file descriptor and knows exactly which records got out (and,
on a pipe, which the reader took), so that only those are committed; :class:`StreamSink`
wraps a file-like object. :func:`parse_properties` reads the ``consumer.properties`` file the
console consumer may be given, and :func:`random_console_group` makes the group id it uses
when none is given.

One job a module: :mod:`~aiozkconsumer.tools.console.formatters` (what is written for a
record), :mod:`~aiozkconsumer.tools.console.sinks` (where it goes and what got out),
:mod:`~aiozkconsumer.tools.console.consumer` (the loops) and
:mod:`~aiozkconsumer.tools.console.rules` (the pure rules and arguments).
"""

from __future__ import annotations

from .consumer import ConsoleConsumer, PartitionConsoleConsumer
from .formatters import (
    KCAT_TOKENS,
    DecodedJsonFormatter,
    JsonFormatter,
    KcatFormatter,
    MessageFormatter,
    RecordFormatter,
)
from .rules import (
    OffsetSpec,
    at_log_end,
    parse_offset_spec,
    parse_properties,
    random_console_group,
    resolve_start_offset,
    rewind_offsets,
)
from .sinks import FdSink, OutputSink, StreamSink, records_written

__all__ = [
    "KCAT_TOKENS",
    "ConsoleConsumer",
    "FdSink",
    "DecodedJsonFormatter",
    "JsonFormatter",
    "KcatFormatter",
    "MessageFormatter",
    "OffsetSpec",
    "OutputSink",
    "PartitionConsoleConsumer",
    "RecordFormatter",
    "StreamSink",
    "at_log_end",
    "parse_offset_spec",
    "parse_properties",
    "random_console_group",
    "records_written",
    "resolve_start_offset",
    "rewind_offsets",
]
