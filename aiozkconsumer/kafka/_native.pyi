"""Types of the native record decoder, ``aiozkconsumer.kafka._native`` (C, ``_native.c``).

Written from the extension's method tables and type definitions; ``tests/test_kafka_records.py``
checks that every public name of the built module is declared here. Readers outside
``kafka/`` use it through :mod:`aiozkconsumer.kafka.records`, never directly.
"""

from collections.abc import Sequence
from typing import Any, Final, TypeVar, final

from _typeshed import ReadableBuffer

_Row = TypeVar("_Row", bound=tuple[Any, ...])

HARDWARE_CRC32C: Final[int]
"""1 when CRC-32C is computed with the CPU's instruction (SSE4.2), else 0."""

STATUS_DONE: Final = 0
STATUS_FULL: Final = 1
STATUS_GATE: Final = 2
STATUS_END: Final = 3
STATUS_FOREIGN: Final = 4
STATUS_TS_TYPE: Final = 5
STATUS_ERROR: Final = 6

class MalformedBatch(ValueError):
    """A record batch that does not parse; ``args``: ``(message, base offset, last offset)``."""

@final
class Batch:
    """A magic-2 record batch with a cursor over its records (made by :func:`parse_record_set`)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def base_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def record_count(self) -> int: ...
    @property
    def attributes(self) -> int: ...
    @property
    def magic(self) -> int: ...
    @property
    def crc(self) -> int:
        """The stored CRC-32C."""
    @property
    def start(self) -> int:
        """The batch's position in the record set."""
    @property
    def end(self) -> int:
        """The position after the batch in the record set."""
    @property
    def index(self) -> int:
        """The records read so far."""
    @property
    def last_offset(self) -> int:
        """The offset of the last record taken, ``-1`` when none."""
    @property
    def is_control_batch(self) -> bool: ...
    @property
    def compression(self) -> int:
        """The codec id (``0`` none)."""
    @property
    def timestamp_type(self) -> int:
        """``0`` CreateTime, ``1`` LogAppendTime."""
    @property
    def next_offset(self) -> int: ...
    @property
    def exhausted(self) -> bool: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def aborted(self) -> bool:
        """Marked as a batch of an aborted transaction (:meth:`mark_aborted`)."""
    @property
    def control_type(self) -> int:
        """A control batch's marker type: ``0`` ABORT, ``1`` COMMIT; ``-1`` otherwise."""
    def with_records(self, payload: ReadableBuffer, /) -> Batch:
        """This batch over its decompressed records."""
    def records_bytes(self) -> bytes:
        """The records part of the batch (of a compressed one, the compressed payload)."""
    def mark_aborted(self) -> None:
        """A batch of an aborted transaction: the take loops step over it."""

_VarColumn = tuple[bytearray | None, bytearray, bytearray, int]
"""A nullable variable-size column: validity bitmap (``None`` without nulls), int32 offsets,
data, null count."""

_HeaderColumns = tuple[bytearray | None, bytearray, int, int, _VarColumn, _VarColumn]
"""List validity (``None`` without nulls), list offsets, list null count, entries, header keys,
header values."""

@final
class Columns:
    """Records gathered into Arrow buffers."""

    def __init__(self, include_headers: bool = False) -> None: ...
    def __len__(self) -> int: ...
    @property
    def last_offset(self) -> int:
        """The offset of the last row added, ``-1`` when none."""
    @property
    def data_bytes(self) -> int:
        """Key and value bytes gathered."""
    def append(
        self,
        offset: int,
        timestamp_ms: int,
        key: ReadableBuffer | None,
        value: ReadableBuffer | None,
        headers: Sequence[tuple[str, ReadableBuffer | None]] | None,
        /,
    ) -> None:
        """Add one record from elsewhere."""
    def take(
        self,
    ) -> tuple[int, bytearray, bytearray, _VarColumn, _VarColumn, _HeaderColumns | None]:
        """``(rows, offsets, timestamps, keys, values, headers)``; the columns start empty."""

def parse_record_set(
    data: ReadableBuffer, check_crcs: bool = True, /
) -> tuple[list[Batch], int, int, list[Batch]]:
    """``(batches, end, legacy_at, corrupt)``; raises ``ValueError`` for a malformed header."""

def crc32c(data: ReadableBuffer, /) -> int:
    """The CRC-32C (Castagnoli) of ``data``."""

def take_messages_from(
    batches: list[Any],
    index: int,
    out: list[_Row],
    mam_type: type[_Row],
    topic: str,
    partition: int,
    min_offset: int,
    limit: int,
    deadline: float,
    /,
) -> tuple[int, int, int, int]:
    """``(appended, index, status, consumed)``; raises ``MalformedBatch``."""

def take_columns_from(
    batches: list[Any],
    index: int,
    columns: Columns,
    min_offset: int,
    limit: int,
    end_offset: int = ...,
    /,
) -> tuple[int, int, int, int, int]:
    """``(added, index, status, consumed, timestamp_type)``; raises ``MalformedBatch``."""

def alloc(n: int, /) -> bytearray:
    """A bytearray of ``n`` bytes, not zero-filled (to be received into)."""
