"""The native record decoder, when it was built: magic-2 batches straight into what is handed out.

``aiozkconsumer.kafka._native`` (C, ``_native.c``, built by the package's set-up) reads a
fetched record set's magic-2 record batches in place and

- checks each batch's CRC-32C (``check.crcs``) with the CPU's CRC instruction where it has
  one (SSE4.2), several GiB/s, in the same pass that reads the batch headers;
- turns records into :class:`~aiozkconsumer.records.MessageAndMetadata` tuples
  (``async for``, ``batches()``) with no aiokafka record object in between;
- appends records to Arrow column buffers (``arrow_batches()``, the Spark executors): key and
  value bytes are copied once, from the fetched bytes into the column's data buffer, and the
  buffers become a ``pyarrow.RecordBatch`` without another copy.

Decompression stays with aiokafka's codecs (:func:`decompressed`), and record sets holding a
batch of magic 0 or 1 go to aiokafka's parser whole. Where the extension was not built (no
C compiler at install time) or ``AIOZKCONSUMER_NATIVE=0`` is set, :data:`AVAILABLE` is false
and every path uses aiokafka's (Cython) parser, with the same results.
"""

from __future__ import annotations

import os
from typing import Any

from aiokafka.codec import gzip_decode, lz4_decode, snappy_decode, zstd_decode

from ..errors import CorruptRecordError

__all__ = [
    "AVAILABLE",
    "STATUS_DONE",
    "STATUS_END",
    "STATUS_ERROR",
    "STATUS_FOREIGN",
    "STATUS_FULL",
    "STATUS_GATE",
    "STATUS_TS_TYPE",
    "NativeBatch",
    "NativeColumns",
    "decompressed",
    "malformed_error",
    "native",
    "parse_record_set",
]

native: Any
try:
    if os.environ.get("AIOZKCONSUMER_NATIVE", "1") == "0":
        raise ImportError("disabled by AIOZKCONSUMER_NATIVE=0")
    from . import _native as native  # type: ignore[attr-defined,no-redef]
except ImportError:
    native = None

AVAILABLE: bool = native is not None
"""Whether the native decoder is in use (built, and not disabled by ``AIOZKCONSUMER_NATIVE=0``)."""

NativeBatch: Any = native.Batch if native is not None else type(None)
"""The native batch type (``type(None)`` when unavailable, so ``isinstance`` checks are false)."""
NativeColumns: Any = native.Columns if native is not None else None

STATUS_DONE = 0
"""The batch's records are used up."""
STATUS_FULL = 1
"""``limit`` records were taken (or the columns reached 2 GiB of keys or values)."""
STATUS_GATE = 2
"""The ownership gate's deadline passed before the next record."""
STATUS_END = 3
"""The next record is at ``end_offset`` or beyond."""
STATUS_FOREIGN = 4
"""The next batch is not one the native loop reads (compressed, aiokafka's, skipped)."""
STATUS_TS_TYPE = 5
"""The next batch's timestamp type differs from the rows added in this call."""
STATUS_ERROR = 6
"""A record did not parse after others were read: they are handed over, the next call raises."""

_CODECS = {1: gzip_decode, 2: snappy_decode, 3: lz4_decode, 4: zstd_decode}


def decompressed(batch: Any) -> Any:
    """The batch over its decompressed records (itself when it is not compressed).

    Raises:
        ValueError: the batch names an unknown codec, or its records do not decompress
            (callers turn it into a ``CorruptRecordError`` with :func:`malformed_error`).
    """
    codec = batch.compression
    if codec == 0:
        return batch
    decode = _CODECS.get(codec)
    if decode is None:
        raise ValueError(f"unknown compression codec {codec} in batch at {batch.base_offset}")
    try:
        payload = decode(batch.records_bytes())
    except Exception as e:  # each codec has its own errors
        raise ValueError(f"batch at {batch.base_offset} does not decompress: {e}") from e
    return batch.with_records(payload)


def malformed_error(topic: str, partition: int, batch: Any, error: Exception) -> CorruptRecordError:
    """The error for a batch the decoder refused (a ``ValueError`` of the native module).

    Args:
        topic: the partition's topic.
        partition: the partition.
        batch: the batch the read started at (its offsets are used when ``error`` does not
            name the batch, e.g. a header key that is not UTF-8); may be ``None``.
        error: the decoder's error; a ``MalformedBatch`` carries the bad batch's offsets.
    """
    if native is not None and isinstance(error, native.MalformedBatch):
        message, first, last = error.args
        return CorruptRecordError(topic, partition, first, message, last_offset=last)
    first = batch.base_offset if batch is not None else -1
    last = batch.next_offset - 1 if batch is not None else None
    return CorruptRecordError(
        topic, partition, first, f"record batch does not parse: {error}", last_offset=last
    )


def parse_record_set(
    data: Any, tp: Any, check_crcs: bool
) -> tuple[list[Any], dict[int, CorruptRecordError]] | None:
    """A fetched record set's magic-2 batches, and the corrupt ones, in one pass.

    Args:
        data: a partition's ``records`` bytes (``bytes``, ``bytearray`` or a memoryview).
        tp: the partition (``TopicPartition``, for the errors).
        check_crcs: compute and compare each batch's CRC-32C.

    Returns:
        ``(batches, corrupt)``: a :data:`NativeBatch` per complete batch (a trailing partial
        batch left out) and, keyed by a corrupt batch's ``next_offset``, the
        ``CorruptRecordError`` naming it (as ``crc.corrupt_batches``); ``None`` when the
        native decoder is unavailable or the set holds a batch of magic 0 or 1 or a
        malformed header (aiokafka's parser then handles it, with its errors).
    """
    if native is None:
        return None
    try:
        batches, _end, legacy_at, bad = native.parse_record_set(data, check_crcs)
    except ValueError:
        return None
    if legacy_at >= 0:
        return None
    corrupt: dict[int, CorruptRecordError] = {}
    if bad:
        for batch in bad:
            view = memoryview(data)[batch.start + _CRC_FROM : batch.end]
            last = batch.next_offset - 1
            corrupt.setdefault(
                batch.next_offset,
                CorruptRecordError.crc_mismatch(
                    tp.topic, tp.partition, batch.base_offset, last, batch.crc, native.crc32c(view)
                ),
            )
    return batches, corrupt


_CRC_FROM = 21  # a magic-2 batch's CRC covers the bytes from its attributes field on
