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

Decompression stays with aiokafka's codecs (:func:`decompressed`; gzip from the standard
library, snappy, lz4 and zstd through ``cramjam``, a dependency), and record sets holding a
batch of magic 0 or 1 go to aiokafka's parser whole. :func:`unsupported_codec_error` tells the
readers, from a batch header, that a codec cannot be decoded here (``cramjam`` missing),
before they hand anything of the batch out. Where the extension was not built (no
C compiler at install time) or ``AIOZKCONSUMER_NATIVE=0`` is set, :data:`AVAILABLE` is false
and every path uses aiokafka's (Cython) parser, with the same results.

This module wraps the extension (typed by ``_native.pyi``); which parser reads a fetched record
set, for every reader, is decided in :mod:`aiozkconsumer.kafka.records`, which the readers
outside ``kafka/`` use instead.
"""

from __future__ import annotations

import enum
import os
from typing import TYPE_CHECKING, Any, Final

import aiokafka.codec
from aiokafka.codec import gzip_decode, lz4_decode, snappy_decode, zstd_decode

from ..errors import CorruptRecordError, UnsupportedCodecError

__all__ = [
    "AVAILABLE",
    "CODEC_NAMES",
    "CODEC_PACKAGE",
    "STATUS_DONE",
    "STATUS_END",
    "STATUS_ERROR",
    "STATUS_FOREIGN",
    "STATUS_FULL",
    "STATUS_GATE",
    "STATUS_TS_TYPE",
    "NativeBatch",
    "NativeColumns",
    "MissingCodecError",
    "Outcome",
    "codec_available",
    "compression_of",
    "decompressed",
    "malformed_error",
    "native",
    "parse_record_set",
    "unsupported_codec_error",
]

if TYPE_CHECKING:
    # Typed by _native.pyi. At run time ``native`` is None when AVAILABLE is false (and
    # NativeBatch is ``type(None)``, NativeColumns None): callers check AVAILABLE first.
    from . import _native as native
    from ._native import Batch as NativeBatch
    from ._native import Columns as NativeColumns
else:
    try:
        if os.environ.get("AIOZKCONSUMER_NATIVE", "1") == "0":
            raise ImportError("disabled by AIOZKCONSUMER_NATIVE=0")
        from . import _native as native
    except ImportError:
        native = None
    # ``type(None)`` when unavailable, so that ``type(batch) is NativeBatch`` is false.
    NativeBatch = native.Batch if native is not None else type(None)
    NativeColumns = native.Columns if native is not None else None

AVAILABLE: bool = native is not None
"""Whether the native decoder is in use (built, and not disabled by ``AIOZKCONSUMER_NATIVE=0``)."""


class Outcome(enum.IntEnum):
    """Why a native take loop (``take_messages_from``, ``take_columns_from``) stopped.

    The loops return the plain ``int`` (``_native.c``'s ``STATUS_*``, equal to these values);
    compare it with the members. Readers get it through :mod:`aiozkconsumer.kafka.records`.
    """

    DONE = 0
    """The list of batches is used up."""
    FULL = 1
    """``limit`` records were taken (or the columns reached 2 GiB of keys or values)."""
    GATE = 2
    """The ownership gate's deadline passed before the next record."""
    END = 3
    """The next record is at ``end_offset`` or beyond."""
    FOREIGN = 4
    """The next batch is not one the native loop reads (compressed, aiokafka's, skipped)."""
    TS_TYPE = 5
    """The next batch's timestamp type differs from the rows added in this call."""
    ERROR = 6
    """A record did not parse after others were read: they are handed over, the next call raises."""


# The extension's own names for the outcomes.
STATUS_DONE: Final = Outcome.DONE
STATUS_FULL: Final = Outcome.FULL
STATUS_GATE: Final = Outcome.GATE
STATUS_END: Final = Outcome.END
STATUS_FOREIGN: Final = Outcome.FOREIGN
STATUS_TS_TYPE: Final = Outcome.TS_TYPE
STATUS_ERROR: Final = Outcome.ERROR

_CODECS = {1: gzip_decode, 2: snappy_decode, 3: lz4_decode, 4: zstd_decode}

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
"""A record batch's codec id (attributes & 7) -> the codec's name (``compression.type``)."""

CODEC_PACKAGE = "cramjam"
"""The package aiokafka's snappy, lz4 and zstd codecs need (gzip is the standard library's)."""

_HAS_CODEC = {1: "has_gzip", 2: "has_snappy", 3: "has_lz4", 4: "has_zstd"}


class MissingCodecError(ValueError):
    """:func:`decompressed` of a batch whose codec is not available here; args: ``(name,)``.

    Callers turn it into an :class:`~aiozkconsumer.errors.UnsupportedCodecError` with
    :func:`malformed_error`.
    """


def codec_available(codec: int) -> bool:
    """Whether batches of a codec id can be decompressed (asked of aiokafka's codecs each time).

    Args:
        codec: a record batch's codec id (``0`` none, ``1`` gzip, ``2`` snappy, ``3`` lz4,
            ``4`` zstd).

    Returns:
        ``True`` for ``0`` and for a codec whose library is importable; ``False`` for one
        missing and for an id Kafka does not define.
    """
    if codec == 0:
        return True
    name = _HAS_CODEC.get(codec)
    return name is not None and bool(getattr(aiokafka.codec, name)())


def compression_of(batch: Any) -> int:
    """The codec id of a batch of either parser (``0`` for placeholders without one)."""
    codec = getattr(batch, "compression", None)  # the native batch's
    if codec is None:
        codec = getattr(batch, "compression_type", 0)  # aiokafka's
    return int(codec or 0)


def unsupported_codec_error(topic: str, partition: int, batch: Any) -> UnsupportedCodecError | None:
    """The error for a batch compressed with a codec that cannot be decompressed here.

    Checked on the batch header before any record of it is handed out, by every reader of
    fetched record sets (aiokafka's parser would only fail when the batch is read).

    Args:
        topic: the partition's topic.
        partition: the partition.
        batch: a record batch of either parser.

    Returns:
        ``None`` when the batch is not compressed or its codec is available; otherwise the
        :class:`~aiozkconsumer.errors.UnsupportedCodecError` naming the codec, the batch's
        offsets and the package to install.
    """
    codec = compression_of(batch)
    if codec_available(codec):
        return None
    return _codec_error(topic, partition, batch, codec)


def _codec_error(topic: str, partition: int, batch: Any, codec: int) -> UnsupportedCodecError:
    name = CODEC_NAMES.get(codec)
    last = int(batch.next_offset) - 1
    first = int(getattr(batch, "base_offset", last))  # a legacy wrapper: its last offset
    if name is None:
        return UnsupportedCodecError(
            topic, partition, first, f"codec {codec}", last_offset=last, reason="unknown codec id"
        )
    return UnsupportedCodecError(
        topic,
        partition,
        first,
        name,
        last_offset=last,
        package=CODEC_PACKAGE if codec != 1 else None,
        reason=f"aiokafka.codec.has_{name}() is false",
    )


def decompressed(batch: Any) -> Any:
    """The batch over its decompressed records (itself when it is not compressed).

    Raises:
        MissingCodecError: the batch's codec is not available here (a ``ValueError``).
        ValueError: the batch names an unknown codec, or its records do not decompress
            (callers turn either into a ``CorruptRecordError`` or an
            ``UnsupportedCodecError`` with :func:`malformed_error`).
    """
    codec = batch.compression
    if codec == 0:
        return batch
    decode = _CODECS.get(codec)
    if decode is None:
        raise ValueError(f"unknown compression codec {codec} in batch at {batch.base_offset}")
    if not codec_available(codec):
        raise MissingCodecError(CODEC_NAMES[codec])
    try:
        payload = decode(batch.records_bytes())
    except Exception as e:  # each codec has its own errors
        raise ValueError(f"batch at {batch.base_offset} does not decompress: {e}") from e
    return batch.with_records(payload)


def malformed_error(
    topic: str, partition: int, batch: Any, error: Exception
) -> CorruptRecordError | UnsupportedCodecError:
    """The error for a batch the decoder refused (a ``ValueError`` of the native module).

    A :class:`MissingCodecError` becomes an ``UnsupportedCodecError`` (the batch is intact);
    anything else a ``CorruptRecordError``.

    Args:
        topic: the partition's topic.
        partition: the partition.
        batch: the batch the read started at (its offsets are used when ``error`` does not
            name the batch, e.g. a header key that is not UTF-8); may be ``None``.
        error: the decoder's error; a ``MalformedBatch`` carries the bad batch's offsets.
    """
    if isinstance(error, MissingCodecError) and batch is not None:
        return _codec_error(topic, partition, batch, compression_of(batch))
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
