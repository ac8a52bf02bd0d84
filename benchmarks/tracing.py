"""The cost of tracing per record: records/s of one topic read without and with tracing.

One topic (``--records`` records of ``--value-size`` bytes over ``--partitions`` partitions,
each record with a W3C ``traceparent`` header, as a traced producer writes them) is read to
its end by a fresh group, in turn in three modes, ``--repeats`` times each:

- ``off``: no interceptor (tracing not enabled; OpenTelemetry not used);
- ``noop``: a ``TracingInterceptor`` on OpenTelemetry's API alone (no SDK set up: spans are
  non-recording, the headers are still read);
- ``sdk``: a ``TracingInterceptor`` on the SDK's ``TracerProvider`` with a
  ``BatchSpanProcessor`` and an exporter that drops what it gets (recording, sampling every
  span, no network).

The rate is timed from the first record handed out to the last, in ``async for`` (``iter``)
or ``batches()``; the per-record cost is ``1/rate - 1/rate(off)``. Run::

    .venv/bin/python benchmarks/tracing.py [--mode iter|batches] [--zookeeper H:P ...]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Sequence

from _common import ClusterInfo, add_cluster_args, cluster_from_args, fmt, md_table, say
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector
from aiozkconsumer.interceptors import ConsumerInterceptor
from aiozkconsumer.tracing import TracingInterceptor

TRACEPARENT = ("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


class _Drop(SpanExporter):
    """Takes the spans and drops them: the cost of recording, not of shipping."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def fill(info: ClusterInfo, topic: str, partitions: int, records: int, size: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=info.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    value = b"v" * size
    t0 = time.monotonic()
    async with AIOKafkaProducer(
        bootstrap_servers=info.bootstrap_servers, acks=1, max_batch_size=1 << 20
    ) as producer:
        pending = []
        for p in range(partitions):
            batch = producer.create_batch()
            for _ in range(records // partitions):
                if batch.append(key=None, value=value, timestamp=None, headers=[TRACEPARENT]):
                    continue
                pending.append(await producer.send_batch(batch, topic, partition=p))
                batch = producer.create_batch()
                batch.append(key=None, value=value, timestamp=None, headers=[TRACEPARENT])
            pending.append(await producer.send_batch(batch, topic, partition=p))
        await asyncio.gather(*pending)
    say(f"produced {records:,} x {size} B with a traceparent in {time.monotonic() - t0:.1f} s")


async def read(info: ClusterInfo, topic: str, total: int, mode: str, how: str) -> float:
    """Read ``topic`` to its end with a fresh group; records/s."""
    interceptors: list[ConsumerInterceptor] = []
    provider = None
    if mode == "noop":
        interceptors.append(TracingInterceptor())
    elif mode == "sdk":
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(_Drop()))
        interceptors.append(TracingInterceptor(tracer_provider=provider))
    config = ConsumerConfig(
        group_id=f"bench-tracing-{uuid.uuid4().hex[:8]}",
        zookeeper_connect=info.zookeeper_connect,
        auto_offset_reset="smallest",
        auto_commit_enable=False,
    )
    n = 0
    async with ZookeeperConsumerConnector(config, interceptors=interceptors) as connector:
        stream = (await connector.create_message_streams({topic: 1}))[topic][0]
        started = 0.0
        if how == "iter":
            async for _ in stream:
                if n == 0:
                    started = time.perf_counter()
                n += 1
                if n == total:
                    break
        else:
            async for batch in stream.batches(max_records=500):
                if n == 0:
                    started = time.perf_counter()
                n += len(batch)
                if n >= total:
                    break
        elapsed = time.perf_counter() - started
    if provider is not None:
        provider.shutdown()
    return (total - 1) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["iter", "batches"], default="iter")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    add_cluster_args(parser)
    args = parser.parse_args()
    with cluster_from_args(args) as info:
        topic = f"bench-tracing-{uuid.uuid4().hex[:8]}"
        total = args.records // args.partitions * args.partitions
        asyncio.run(fill(info, topic, args.partitions, total, args.value_size))
        rates: dict[str, list[float]] = {"off": [], "noop": [], "sdk": []}
        for r in range(args.repeats):
            for mode in rates:  # interleaved, so drift hits every mode alike
                rate = asyncio.run(read(info, topic, total, mode, args.mode))
                rates[mode].append(rate)
                say(f"  run {r + 1} {mode:>4}: {rate:,.0f} records/s")
    base = statistics.median(rates["off"])
    rows = []
    for mode, values in rates.items():
        med = statistics.median(values)
        cost = (1 / med - 1 / base) * 1e6
        rows.append([mode, fmt(med), fmt(min(values)), fmt(max(values)), fmt(cost, 2)])
    print(f"\n{total:,} records x {args.value_size} B, {args.mode}, {args.repeats} runs each\n")
    print(md_table(["mode", "median rec/s", "min", "max", "cost us/record"], rows))


if __name__ == "__main__":
    main()
