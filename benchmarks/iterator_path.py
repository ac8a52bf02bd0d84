"""The iterator's hot path alone, without servers: records/s of ``async for`` and ``batches()``.

Fetched record sets are built once in memory (magic-2 batches of 100 B values, as a broker
returns them), parsed by the decoder ``kafka/records.py`` picks, queued as fetched chunks and
read back through a ``KafkaStream``: no broker, no socket, so the number changes only with the
code between the queue and the user (the decode choice, the take loops, the gate checks).
Meant for A/B runs of a refactor of that path, e.g. against another checkout::

    .venv/bin/python benchmarks/iterator_path.py --mode iter
    PYTHONPATH=/path/to/other/checkout .venv/bin/python benchmarks/iterator_path.py --mode iter

Each run reads ``--chunks`` x ``--batches`` x ``--records`` records ``--repeats`` times in
fresh event loops and prints the median, min and max rate; building the record sets is not
timed. The machine's noise is large at this scale: interleave A and B several times and
compare the maxima and medians, not one run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import time

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from aiozkconsumer.kafka.records import read_record_set
from aiozkconsumer.queues import ChunkQueue
from aiozkconsumer.records import FetchedDataChunk, PartitionTopicInfo, TopicPartition
from aiozkconsumer.stream import KafkaStream

TP = TopicPartition("t", 0)


def record_set(base: int, batches: int, records: int, value_size: int) -> bytes:
    """``batches`` magic-2 batches of ``records`` records each, offsets from ``base``."""
    out = bytearray()
    for b in range(batches):
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 24)
        for i in range(records):
            builder.append(i, 1_700_000_000_000 + i, None, b"v" * value_size, [])
        raw = bytearray(builder.build())
        raw[0:8] = struct.pack(">q", base + b * records)  # the broker assigns the base offset
        out += raw
    return bytes(out)


async def read_once(sets: list[bytes], per_chunk: int, mode: str, max_records: int) -> float:
    """Read every record of ``sets`` once; records/s."""
    queue = ChunkQueue(maxsize=len(sets) + 2)
    info = PartitionTopicInfo("t", 0, queue, 0, 0, 1 << 26, "bench")
    for c, data in enumerate(sets):
        batches = list(read_record_set(data, TP, True).batches)
        queue.put_nowait(FetchedDataChunk(batches, info, c * per_chunk))
    total = per_chunk * len(sets)
    stream = KafkaStream(queue, -1, "bench", "t-0")
    n = 0
    started = time.perf_counter()
    if mode == "iter":
        async for _ in stream:
            n += 1
            if n == total:
                break
    else:
        async for batch in stream.batches(max_records=max_records):
            n += len(batch)
            if n >= total:
                break
    return total / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["iter", "batches"], default="iter")
    parser.add_argument("--chunks", type=int, default=40, help="fetched chunks (default 40)")
    parser.add_argument("--batches", type=int, default=20, help="batches per chunk (20)")
    parser.add_argument("--records", type=int, default=500, help="records per batch (500)")
    parser.add_argument("--value-size", type=int, default=100, help="bytes per value (100)")
    parser.add_argument("--max-records", type=int, default=1000, help="batches() size (1000)")
    parser.add_argument("--repeats", type=int, default=11, help="timed runs (11)")
    args = parser.parse_args()
    per_chunk = args.batches * args.records
    sets = [
        record_set(c * per_chunk, args.batches, args.records, args.value_size)
        for c in range(args.chunks)
    ]
    rates = [
        asyncio.run(read_once(sets, per_chunk, args.mode, args.max_records))
        for _ in range(args.repeats)
    ]
    print(
        f"{args.mode}: {per_chunk * args.chunks:,} records x {args.repeats}: median "
        f"{statistics.median(rates) / 1e6:.3f} M rec/s (min {min(rates) / 1e6:.3f}, "
        f"max {max(rates) / 1e6:.3f})"
    )


if __name__ == "__main__":
    main()
