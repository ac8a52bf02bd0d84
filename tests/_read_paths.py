"""Every read path of the library, reading given partitions up to given ends (test helper).

The codec and read_committed tests compare what each path delivers with what the Java
producer reported writing (:func:`aiozkconsumer.testing.java_producer.record_identity`):

- ``records`` (``async for``), ``batches`` (``stream.batches()``), ``arrow``
  (``stream.arrow_batches()``): a connector of the group coordinator asked for, reading one
  stream until every partition's consumed offset reached its end;
- ``simple``: ``SimpleConsumer.fetch_range`` per partition;
- ``spark``: the Spark executors' ``read_offset_range`` (what a Spark task runs), in a worker
  thread;
- ``cli``: ``aiozkconsumer consume --partition ... --output json --exit-at-end`` as a
  subprocess, per partition.

``decoder`` ``"aiokafka"`` turns the native decoder off (in this process as
``AIOZKCONSUMER_NATIVE=0`` would: :func:`without_native`; the CLI subprocess gets the
variable itself).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa
import pytest

from aiozkconsumer import ConsumerConfig, SimpleConsumer, Whitelist, create_connector
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.errors import ConsumerTimeoutError
from aiozkconsumer.kafka import native
from aiozkconsumer.records import MessageAndMetadata, TopicPartition
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.java_producer import RecordIdentity, record_identity

CONNECTOR_PATHS = ("records", "batches", "arrow")
PATHS = (*CONNECTOR_PATHS, "simple", "spark", "cli")
CLI = str(Path(sys.executable).with_name("aiozkconsumer"))
READ_LIMIT_S = 90.0

Delivered = list[tuple[str, RecordIdentity]]
"""``(topic, identity)`` per record delivered."""


@contextlib.contextmanager
def without_native(monkeypatch: pytest.MonkeyPatch, decoder: str) -> Iterator[None]:
    """With ``decoder == "aiokafka"``: every path on aiokafka's parser, as without the
    extension (the module state ``AIOZKCONSUMER_NATIVE=0`` leaves)."""
    if decoder == "aiokafka":
        with monkeypatch.context() as m:
            m.setattr(native, "native", None)
            m.setattr(native, "AVAILABLE", False)
            yield
    else:
        if not native.AVAILABLE:
            pytest.skip("the native decoder is not built")
        yield


def message_identity(m: MessageAndMetadata) -> tuple[str, RecordIdentity]:
    return m.topic, record_identity(m.partition, m.offset, m.key, m.value, m.headers, m.timestamp)


def arrow_identities(rb: pa.RecordBatch) -> Delivered:
    millis = rb.column("timestamp").cast(pa.int64()).to_pylist()
    headers = rb.column("headers").to_pylist()
    out: Delivered = []
    for i, (key, value, topic, partition, offset) in enumerate(
        zip(
            rb.column("key").to_pylist(),
            rb.column("value").to_pylist(),
            rb.column("topic").to_pylist(),
            rb.column("partition").to_pylist(),
            rb.column("offset").to_pylist(),
            strict=True,
        )
    ):
        pairs = [(h["key"], h["value"]) for h in headers[i] or ()]
        out.append(
            (topic, record_identity(partition, offset, key, value, pairs, millis[i] // 1000))
        )
    return out


def config_for(
    cluster: LocalCluster, group: str, *, coordinator: str = "zookeeper", **kw: Any
) -> ConsumerConfig:
    kw.setdefault("auto_offset_reset", "smallest")
    kw.setdefault("auto_commit_enable", False)
    kw.setdefault("rebalance_backoff_ms", 500)
    kw.setdefault("consumer_timeout_ms", 200)
    if coordinator == "kafka":
        return ConsumerConfig(
            group_id=group,
            group_coordinator="kafka",
            bootstrap_servers=cluster.bootstrap_servers,
            **kw,
        )
    if cluster.kraft:
        kw.setdefault("bootstrap_servers", cluster.bootstrap_servers)
    return ConsumerConfig(group_id=group, zookeeper_connect=cluster.zookeeper_connect, **kw)


class ConnectorReader:
    """A started connector with one stream over ``pattern``, read through one path.

    Use as ``async with ConnectorReader(...) as reader: await reader.read_until(ends)``.
    """

    def __init__(self, config: ConsumerConfig, pattern: str, path: str) -> None:
        assert path in CONNECTOR_PATHS
        self.config = config
        self.pattern = pattern
        self.path = path
        self.delivered: Delivered = []
        self.connector: ConsumerConnector = create_connector(config)
        self._stream: KafkaStream | None = None
        self._gen: Any = None

    async def __aenter__(self) -> ConnectorReader:
        await self.connector.__aenter__()
        (self._stream,) = await self.connector.create_message_streams_by_filter(
            Whitelist(self.pattern)
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._gen is not None:
            with contextlib.suppress(Exception):
                await self._gen.aclose()
        await self.connector.__aexit__(None, None, None)

    def consumed(self) -> Mapping[TopicPartition, int]:
        return self.connector.statistics().consumed_offsets

    async def _read_once(self) -> None:
        """Read what one call of the path gives (``ConsumerTimeoutError`` when nothing)."""
        stream = self._stream
        assert stream is not None
        if self.path == "records":
            self.delivered.append(message_identity(await stream.__aiter__().__anext__()))
            return
        if self._gen is None:
            self._gen = (
                stream.batches(max_records=50)
                if self.path == "batches"
                else stream.arrow_batches(max_records=50, include_headers=True)
            )
        try:
            got = await anext(self._gen)
        except ConsumerTimeoutError:
            self._gen = None  # the generator ended with the error; the iterator goes on
            raise
        if self.path == "batches":
            self.delivered.extend(message_identity(m) for m in got)
        else:
            self.delivered.extend(arrow_identities(got))

    async def read_until(
        self, ends: Mapping[TopicPartition, int], limit_s: float = READ_LIMIT_S
    ) -> None:
        """Read until every partition of ``ends`` is owned and consumed up to its end."""

        def done() -> bool:
            consumed = self.consumed()
            return all(consumed.get(tp, -1) >= end for tp, end in ends.items())

        with anyio.fail_after(limit_s):
            while not done():
                with contextlib.suppress(ConsumerTimeoutError):
                    await self._read_once()

    async def read_records(self, count: int, limit_s: float = READ_LIMIT_S) -> None:
        """Read until ``count`` records in all were delivered (a call may bring more)."""
        with anyio.fail_after(limit_s):
            while len(self.delivered) < count:
                with contextlib.suppress(ConsumerTimeoutError):
                    await self._read_once()

    async def read_for(self, seconds: float) -> None:
        """Keep reading for ``seconds`` (whatever arrives is added to ``delivered``)."""
        with anyio.move_on_after(seconds):
            while True:
                with contextlib.suppress(ConsumerTimeoutError):
                    await self._read_once()


async def read_simple(
    cluster: LocalCluster, ends: Mapping[TopicPartition, int], isolation: str
) -> Delivered:
    out: Delivered = []
    async with SimpleConsumer(cluster.bootstrap_servers, isolation_level=isolation) as consumer:
        for tp, end in sorted(ends.items()):
            with anyio.fail_after(READ_LIMIT_S):
                async for m in consumer.fetch_range(tp, 0, end):
                    out.append(message_identity(m))
    return out


def _read_spark_ranges(
    bootstrap: str, ends: Mapping[TopicPartition, int], isolation: str
) -> Delivered:
    from aiozkconsumer.spark.executor import (
        ExecutorConsumers,
        ZkKafkaInputPartition,
        read_offset_range,
    )

    out: Delivered = []
    try:
        for tp, end in sorted(ends.items()):
            part = ZkKafkaInputPartition(
                tp.topic, tp.partition, 0, end, bootstrap, include_headers=True,
                isolation_level=isolation,
            )  # fmt: skip
            for rb in read_offset_range(part):
                out.extend(arrow_identities(rb))
    finally:
        ExecutorConsumers.for_this_thread().close()
    return out


async def read_spark(
    cluster: LocalCluster, ends: Mapping[TopicPartition, int], isolation: str
) -> Delivered:
    """The executors' reads, in a worker thread (a Spark task runs synchronously)."""
    return await asyncio.to_thread(_read_spark_ranges, cluster.bootstrap_servers, ends, isolation)


def _json_bytes(value: str | None, encoding: str | None) -> bytes | None:
    if value is None:
        return None
    return base64.b64decode(value) if encoding == "base64" else value.encode()


async def read_cli(
    cluster: LocalCluster,
    ends: Mapping[TopicPartition, int],
    isolation: str,
    decoder: str,
    pattern: str | None = None,
) -> Delivered:
    """``aiozkconsumer consume --partition P --offset earliest --exit-at-end --output json``
    per partition; with ``pattern``, one ``consume --whitelist PATTERN --from-beginning
    --exit-at-end`` (a generated group) instead."""
    env = {**os.environ}
    if decoder == "aiokafka":
        env["AIOZKCONSUMER_NATIVE"] = "0"
    common = [
        CLI, "consume", "--zookeeper", cluster.zookeeper_connect,
        "--bootstrap-server", cluster.bootstrap_servers, "--exit-at-end", "--output", "json",
        "--isolation-level", isolation,
    ]  # fmt: skip
    if pattern is not None:
        runs = [[*common, "--whitelist", pattern, "--from-beginning"]]
    else:
        runs = [
            [*common, "--topic", tp.topic, "--partition", str(tp.partition), "--offset", "earliest"]
            for tp in sorted(ends)
        ]
    out: Delivered = []
    for args in runs:
        with anyio.fail_after(READ_LIMIT_S):
            done = await anyio.run_process(args, env=env, check=False)
        assert done.returncode == 0, done.stderr.decode()
        for line in done.stdout.decode().splitlines():
            o = json.loads(line)
            headers = [
                (h["key"], _json_bytes(h["value"], h["value_encoding"])) for h in o["headers"]
            ]
            out.append(
                (
                    o["topic"],
                    record_identity(
                        o["partition"],
                        o["offset"],
                        _json_bytes(o["key"], o["key_encoding"]),
                        _json_bytes(o["value"], o["value_encoding"]),
                        headers,
                        o["timestamp"],
                    ),
                )
            )
    return out


async def read_path(
    path: str,
    cluster: LocalCluster,
    group: str,
    pattern: str,
    ends: Mapping[TopicPartition, int],
    *,
    isolation: str,
    decoder: str,
    coordinator: str = "zookeeper",
    on_reader: Callable[[ConnectorReader], Any] | None = None,
    cli_group: bool = False,
) -> Delivered:
    """What ``path`` delivers of the partitions of ``ends`` (from offset 0 up to each end).

    ``cli_group``: the CLI reads ``pattern`` as one group member rather than partition by
    partition.
    """
    if path in CONNECTOR_PATHS:
        config = config_for(cluster, group, coordinator=coordinator, isolation_level=isolation)
        async with ConnectorReader(config, pattern, path) as reader:
            await reader.read_until(ends)
            if on_reader is not None:
                await on_reader(reader)
            return reader.delivered
    if path == "simple":
        return await read_simple(cluster, ends, isolation)
    if path == "spark":
        return await read_spark(cluster, ends, isolation)
    assert path == "cli"
    return await read_cli(cluster, ends, isolation, decoder, pattern if cli_group else None)
