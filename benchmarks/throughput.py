"""Consume throughput: aiozkconsumer against aiokafka, confluent-kafka, kafka-python and Java.

Three topics of 8 partitions are loaded once (2,000,000 records of 100 B, 200,000 of 1 KiB and
30,000 of 10 KiB, no keys), read once to warm the broker's page cache, then each contender
reads a whole topic from the beginning with a fresh group, in a process of its own, 3 rounds,
contenders interleaved (the order rotates each round) so that machine load hits them alike.
Each run reports records/s and MiB/s (key + value bytes) over its consume window, the CPU
seconds of that window (``getrusage(RUSAGE_SELF)`` in the child) and of the whole process
(``wait4``), and the process's peak RSS (``VmHWM``); CPU seconds per million records are the consume
window's CPU over the records. Every contender touches the key and the value of every record
(their lengths are summed). Tables give the median of the rounds. Every aiozkconsumer and
aiokafka contender checks record CRCs (their default) unless its name ends in ``-nocrc``.

Contenders (``--contenders``):

- ``azk-iter-1``: aiozkconsumer, ``async for msg in stream``, 1 stream.
- ``azk-iter-4``: aiozkconsumer, 4 streams, one task each.
- ``azk-batch``: aiozkconsumer, ``stream.batches(max_records=--batch)``, 1 stream.
- ``azk-arrow``: aiozkconsumer, ``stream.arrow_batches(max_records=--batch)``, 1 stream
  (``pyarrow.RecordBatch``es; key and value bytes summed with ``pyarrow.compute``).
- ``azk-kafka-async-for`` / ``azk-kafka-batches``: the readers of ``azk-iter-1`` /
  ``azk-batch`` with a Kafka-coordinated connector (``group.coordinator=kafka``: JoinGroup /
  SyncGroup through the broker's group coordinator, session 10 s, heartbeat 1 s; no
  ZooKeeper). Next to the ZooKeeper-mode pair they show what Kafka coordination costs.
- ``azk-iter-yield``: as ``azk-iter-1`` but the loop awaits ``asyncio.sleep(0)`` every 1,000
  records (shows the effect of letting the fetcher run while records are buffered).
- ``azk-batch-nocrc`` / ``aiokafka-getmany-nocrc`` (and ``aiokafka-iter-nocrc``): the same
  readers with CRC checks off (``check.crcs=false`` / ``check_crcs=False``), for the cost of
  checking them (the ``CRC cost`` table).
- ``aiokafka-iter`` / ``aiokafka-getmany``: ``AIOKafkaConsumer`` with ``assign()``;
  ``async for`` / ``getmany(timeout_ms=1000, max_records=--batch)``.
- ``confluent-aio``: ``confluent_kafka.aio.AIOConsumer.consume(num_messages=--batch)``.
- ``confluent-sync``: ``confluent_kafka.Consumer.consume(num_messages=--batch)``, librdkafka's
  defaults.
- ``confluent-sync-tuned`` / ``confluent-aio-tuned``: the same with ``fetch.queue.backoff.ms=10``
  (librdkafka's default of 1000 ms leaves its fetcher idle once the local queue passed
  ``queued.min.messages``; a user who cares about speed sets it), the reference of the targets.
- ``kafka-python``: ``KafkaConsumer.poll(max_records=--batch)`` with ``assign()``.
- ``java``: Kafka's ``org.apache.kafka.tools.ConsumerPerformance`` (kafka-consumer-perf-test)
  from Kafka 3.9.1; its ``fetch.*`` figures (group join excluded).

The client is imported before the consume window opens (its import time is reported on its
own). The consume window of a Python contender runs from just before the consumer is constructed
(so it includes connecting, and for aiozkconsumer the ZooKeeper registration or the group
join, and the first rebalance) to the last record; "first record" is the time from the start
of the window to the first record, and the steady-state rate is the records after the first
over the time after it (start-up and join excluded). Not a test: nothing here asserts on
speed.

Codecs and isolation levels (``--codec none,lz4,zstd --isolation-level
read_uncommitted,read_committed``): each dataset size is written again once per codec into
topics of its own, with values half random and half constant (about 2:1 compressible), and
read at each isolation level; for ``read_committed`` the topic is written in transactions of
``--transaction-records`` records of which one in ``--abort-every`` is aborted, so the readers
drop the aborted ones (the run counts the committed records only). The "Codecs and isolation"
table gives each variant's steady rate and CPU per million records as ratios to the same
contender on the ``none`` / ``read_uncommitted`` variant of the same size: the cost of
decompression and of aborted-batch filtering. ``kafka-python`` and ``java`` run on the
``read_uncommitted`` variants only.

Security (``--security plaintext,ssl,sasl_ssl``): every contender reads each size over each
listener named, the modes of one contender run back to back (the mode order rotating each
round). ``ssl`` is TLS with the server checked against the cluster's CA (host name checked
too: the test kit's certificates name ``127.0.0.1`` and ``localhost``); ``sasl_ssl`` is
SCRAM-SHA-512 over TLS. The LocalCluster then gets the test kit's secured listeners
(``ClusterSecurity``, its request log off); a running cluster takes
``--client-properties ssl=FILE --client-properties sasl_ssl=FILE``, properties files with that
listener's ``bootstrap.servers`` and the consumer config's security keys (``security.protocol``,
``ssl.cafile``, ``ssl.certfile``, ``ssl.keyfile``, ``ssl.endpoint.identification.algorithm``,
``sasl.mechanism``, ``sasl.username``, ``sasl.password``). Topics are loaded and warmed over
the plaintext listener either way. Each client gets the same settings in its own names:
aiozkconsumer the config keys (its ZooKeeper-coordinated contenders find the broker in
``/brokers/ids`` at the first endpoint of that security protocol), confluent-kafka
``security.protocol``, ``ssl.ca.location``, ``sasl.mechanisms``, ``sasl.username``,
``sasl.password``, aiokafka and kafka-python ``security_protocol``, an ``ssl_context`` /
``ssl_cafile`` and ``sasl_plain_username``/``password``, Java a ``--consumer.config`` with a
PEM truststore and a ``ScramLoginModule`` JAAS entry. The "Security" tables give each
contender's steady rate and CPU per million records as ratios to the same contender over
plaintext, and ours as ratios to tuned confluent-kafka over the same listener.
``--security`` does not combine with the codec/isolation variants.

Usage::

    .venv/bin/python benchmarks/throughput.py [--quick] [--zookeeper H:P --bootstrap-server H:P]
    .venv/bin/python benchmarks/throughput.py --quick --security plaintext,ssl,sasl_ssl \
        --contenders azk-arrow,azk-batch,confluent-sync-tuned,confluent-sync,aiokafka-getmany
    .venv/bin/python benchmarks/throughput.py --quick --codec none,lz4,zstd \
        --isolation-level read_uncommitted,read_committed --contenders azk-batch,azk-arrow
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    CACHE_DIR,
    RESULTS_DIR,
    ClusterInfo,
    add_cluster_args,
    add_security_args,
    cluster_from_args,
    cpu_now,
    emit,
    ensure_topic,
    fmt,
    machine,
    md_table,
    median,
    process_cpu_s,
    read_client_properties,
    run_child,
    say,
    security_modes,
    this_python,
    uptime,
    versions,
    write_client_properties,
    write_results,
)

ALL_CONTENDERS = (
    "azk-iter-1",
    "azk-iter-4",
    "azk-batch",
    "azk-arrow",
    "azk-batch-tuned",
    "azk-arrow-tuned",
    "azk-kafka-async-for",
    "azk-kafka-batches",
    "aiokafka-iter",
    "aiokafka-getmany",
    "confluent-aio",
    "confluent-aio-tuned",
    "confluent-sync",
    "confluent-sync-tuned",
    "kafka-python",
    "java",
    "azk-batch-nocrc",
    "aiokafka-getmany-nocrc",
)
EXTRA_CONTENDERS = (
    "azk-iter-yield",
    "aiokafka-iter-nocrc",
    "azk-batch-chunks2",
    "azk-arrow-chunks2",
    "azk-iter-1-chunks2",
    "azk-batch-iothread",
    "azk-arrow-iothread",
    "azk-iter-1-iothread",
)
KAFKA_VERSION = "3.9.1"
POM = Path(__file__).with_name("java-perf-pom.xml")
MIB = 1024 * 1024

# (target name, contender, reference, ratio it must reach), on the steady-state rate
TARGETS = (
    ("arrow_batches >= 1.0x tuned confluent-kafka", "azk-arrow", "confluent-sync-tuned", 1.0),
    (
        "arrow_batches (tuned) >= 1.0x tuned confluent-kafka",
        "azk-arrow-tuned",
        "confluent-sync-tuned",
        1.0,
    ),
    ("batches() >= 0.8x tuned confluent-kafka", "azk-batch", "confluent-sync-tuned", 0.8),
    (
        "batches() (tuned) >= 0.8x tuned confluent-kafka",
        "azk-batch-tuned",
        "confluent-sync-tuned",
        0.8,
    ),
    ("async for >= 0.5x batches()", "azk-iter-1", "azk-batch", 0.5),
    ("batches() >= 1.5x aiokafka getmany", "azk-batch", "aiokafka-getmany", 1.5),
    ("async for >= 2.0x aiokafka async for", "azk-iter-1", "aiokafka-iter", 2.0),
)
# (checking contender, the same with CRC checks off): the cost of checking CRCs
CRC_PAIRS = (
    ("azk-batch", "azk-batch-nocrc"),
    ("aiokafka-getmany", "aiokafka-getmany-nocrc"),
)
# (Kafka-coordinated contender, its ZooKeeper-mode twin): the same reader, the other coordinator
KAFKA_MODE_PAIRS = (
    ("azk-kafka-async-for", "azk-iter-1"),
    ("azk-kafka-batches", "azk-batch"),
)
# The azk-*-tuned contenders: what a speed-minded user sets (docs/configuration.md,
# "Throughput"): room for 16 fetched chunks per stream instead of the original's 2, so that
# the fetcher runs ahead of the reader (librdkafka queues up to 64 MiB by default).
AZK_TUNED = {"queued_max_message_chunks": 16}
# The azk-*-chunks2 contenders: the original's queue of 2 chunks per stream (its default, and
# ours before queued.max.messages.kbytes): how much the byte budget's read-ahead brings.
AZK_CHUNKS2 = {"queued_max_message_chunks": 2}
# The azk-*-iothread contenders: the fetch connections receive in a worker thread of their own
# (fetch.io.thread.enable) instead of on the event loop's thread.
AZK_IOTHREAD = {"fetch_io_thread_enable": True}
# Kafka-coordinated group timeouts of the azk-kafka-* contenders
KAFKA_SESSION_TIMEOUT_MS = 10_000
KAFKA_HEARTBEAT_INTERVAL_MS = 1_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
# Contenders that cannot read at read_committed here (no isolation setting passed through)
UNCOMMITTED_ONLY = ("kafka-python", "java")
# The reference of the "Security" table's "ours over confluent-kafka on the same listener"
SECURITY_REFERENCE = "confluent-sync-tuned"


# -- the children ----------------------------------------------------------------------------


class Counter:
    """Records and bytes handed out, and when the last one came."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.records = 0
        self.bytes = 0
        self.first: float | None = None
        # records handed out at ``first`` (the first record, or the first batch call's)
        self.first_n = 0


def _size(key: bytes | None, value: bytes | None) -> int:
    return (len(key) if key is not None else 0) + (len(value) if value is not None else 0)


# -- security settings in each client's names --------------------------------------------------
# ``props`` is a client properties file's content (``_common.CLIENT_PROPERTY_KEYS``): empty
# for plaintext, so that the plaintext contenders are built exactly as without --security.


def _check_hostname(props: dict[str, str]) -> bool:
    return props.get("ssl.endpoint.identification.algorithm", "https").lower() == "https"


def _azk_security(props: dict[str, str]) -> dict[str, Any]:
    """ConsumerConfig keyword arguments (docs/security.md)."""
    names = {k: k.replace(".", "_") for k in props if k != "bootstrap.servers"}
    return {field: props[key] for key, field in names.items()}


def _ssl_context(props: dict[str, str]) -> Any:
    import ssl

    context = ssl.create_default_context(cafile=props.get("ssl.cafile"))
    context.check_hostname = _check_hostname(props)
    if props.get("ssl.certfile"):
        context.load_cert_chain(props["ssl.certfile"], props.get("ssl.keyfile"))
    return context


def _aiokafka_security(props: dict[str, str]) -> dict[str, Any]:
    """AIOKafkaConsumer keyword arguments."""
    if not props:
        return {}
    protocol = props["security.protocol"]
    kw: dict[str, Any] = {"security_protocol": protocol}
    if protocol.endswith("SSL"):
        kw["ssl_context"] = _ssl_context(props)
    if protocol.startswith("SASL_"):
        kw["sasl_mechanism"] = props["sasl.mechanism"]
        kw["sasl_plain_username"] = props.get("sasl.username")
        kw["sasl_plain_password"] = props.get("sasl.password")
    return kw


def _kafka_python_security(props: dict[str, str]) -> dict[str, Any]:
    """kafka-python ``KafkaConsumer`` keyword arguments."""
    if not props:
        return {}
    protocol = props["security.protocol"]
    kw: dict[str, Any] = {"security_protocol": protocol}
    if protocol.endswith("SSL"):
        kw["ssl_cafile"] = props.get("ssl.cafile")
        kw["ssl_check_hostname"] = _check_hostname(props)
        kw["ssl_certfile"] = props.get("ssl.certfile")
        kw["ssl_keyfile"] = props.get("ssl.keyfile")
    if protocol.startswith("SASL_"):
        kw["sasl_mechanism"] = props["sasl.mechanism"]
        kw["sasl_plain_username"] = props.get("sasl.username")
        kw["sasl_plain_password"] = props.get("sasl.password")
    return kw


def _confluent_security(props: dict[str, str]) -> dict[str, Any]:
    """librdkafka properties (CONFIGURATION.md). librdkafka checks the broker's host name
    (``ssl.endpoint.identification.algorithm=https``, its default since 2.0) against the
    certificate's names, IP addresses included."""
    if not props:
        return {}
    protocol = props["security.protocol"]
    conf: dict[str, Any] = {"security.protocol": protocol}
    if protocol.endswith("SSL"):
        if props.get("ssl.cafile"):
            conf["ssl.ca.location"] = props["ssl.cafile"]
        if props.get("ssl.certfile"):
            conf["ssl.certificate.location"] = props["ssl.certfile"]
            conf["ssl.key.location"] = props.get("ssl.keyfile") or props["ssl.certfile"]
        conf["ssl.endpoint.identification.algorithm"] = (
            "https" if _check_hostname(props) else "none"
        )
    if protocol.startswith("SASL_"):
        conf["sasl.mechanisms"] = props["sasl.mechanism"]
        conf["sasl.username"] = props.get("sasl.username", "")
        conf["sasl.password"] = props.get("sasl.password", "")
    return conf


def _java_security(props: dict[str, str]) -> dict[str, str]:
    """Java client properties: a PEM truststore (KIP-651) and a JAAS login module."""
    if not props:
        return {}
    protocol = props["security.protocol"]
    conf = {"security.protocol": protocol}
    if protocol.endswith("SSL"):
        if props.get("ssl.certfile"):
            raise SystemExit("java: a client certificate (ssl.certfile) is not passed through")
        if props.get("ssl.cafile"):
            conf["ssl.truststore.type"] = "PEM"
            conf["ssl.truststore.location"] = props["ssl.cafile"]
        conf["ssl.endpoint.identification.algorithm"] = "https" if _check_hostname(props) else ""
    if protocol.startswith("SASL_"):
        mechanism = props["sasl.mechanism"]
        module = (
            "scram.ScramLoginModule" if mechanism.startswith("SCRAM-") else "plain.PlainLoginModule"
        )
        conf["sasl.mechanism"] = mechanism
        conf["sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.{module} required "
            f'username="{props.get("sasl.username", "")}" '
            f'password="{props.get("sasl.password", "")}";'
        )
    return conf


def _bootstrap(args: argparse.Namespace) -> str:
    """The bootstrap servers of the listener this child reads over."""
    return str(args.security_props.get("bootstrap.servers", args.bootstrap_server))


async def _azk(args: argparse.Namespace, c: Counter, t0: float) -> None:
    import anyio

    from aiozkconsumer import ConsumerConfig, create_connector

    mode = args.contender
    tuned: dict[str, Any] = (
        AZK_TUNED if mode.endswith("-tuned") else AZK_CHUNKS2 if mode.endswith("-chunks2") else {}
    )
    if args.queue_kbytes and not tuned:
        tuned = {"queued_max_messages_kbytes": args.queue_kbytes}
    if mode.endswith("-iothread"):
        tuned = {**tuned, **AZK_IOTHREAD}
    mode = mode.removesuffix("-tuned").removesuffix("-chunks2").removesuffix("-iothread")
    n_streams = 4 if mode == "azk-iter-4" else 1
    if mode.startswith("azk-kafka-"):
        config = ConsumerConfig(
            group_id=f"bench-{uuid.uuid4().hex[:10]}",
            group_coordinator="kafka",
            bootstrap_servers=_bootstrap(args),
            auto_offset_reset="earliest",
            auto_commit_enable=False,
            session_timeout_ms=KAFKA_SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=KAFKA_HEARTBEAT_INTERVAL_MS,
            isolation_level=args.isolation_level,
            **_azk_security(args.security_props),
            **tuned,
        )
    else:
        config = ConsumerConfig(
            group_id=f"bench-{uuid.uuid4().hex[:10]}",
            zookeeper_connect=args.zookeeper,
            auto_offset_reset="smallest",
            auto_commit_enable=False,
            check_crcs=not mode.endswith("-nocrc"),
            isolation_level=args.isolation_level,
            # brokers found in ZooKeeper at their endpoint of this security.protocol
            **_azk_security(args.security_props),
            **tuned,
        )
    batch_mode = mode in ("azk-batch", "azk-batch-nocrc", "azk-kafka-batches")
    async with create_connector(config) as connector:
        streams = (await connector.create_message_streams({args.topic: n_streams}))[args.topic]

        async def iterate(stream: Any) -> None:
            n = 0
            async for msg in stream:
                c.records += 1
                c.bytes += _size(msg.key, msg.value)
                if c.first is None:
                    c.first = time.perf_counter() - t0
                    c.first_n = 1
                if c.records >= c.total:
                    break
                if mode == "azk-iter-yield":
                    n += 1
                    if n % 1000 == 0:
                        await asyncio.sleep(0)
            tg.cancel_scope.cancel()

        async def batches(stream: Any) -> None:
            async for batch in stream.batches(max_records=args.batch):
                if c.first is None:
                    c.first = time.perf_counter() - t0
                    c.first_n = len(batch)
                c.records += len(batch)
                c.bytes += sum([_size(m.key, m.value) for m in batch])
                if c.records >= c.total:
                    break
            tg.cancel_scope.cancel()

        async def arrow_batches(stream: Any) -> None:
            import pyarrow.compute as pc

            def nbytes(column: Any) -> int:
                return int(pc.sum(pc.binary_length(column)).as_py() or 0)

            async for rb in stream.arrow_batches(max_records=args.batch):
                if c.first is None:
                    c.first = time.perf_counter() - t0
                    c.first_n = rb.num_rows
                c.records += rb.num_rows
                c.bytes += nbytes(rb.column("key")) + nbytes(rb.column("value"))
                if c.records >= c.total:
                    break
            tg.cancel_scope.cancel()

        reader = arrow_batches if mode == "azk-arrow" else batches if batch_mode else iterate
        async with anyio.create_task_group() as tg:
            for stream in streams:
                tg.start_soon(reader, stream)


async def _aiokafka(args: argparse.Namespace, c: Counter, t0: float) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=_bootstrap(args),
        group_id=f"bench-{uuid.uuid4().hex[:10]}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        # The -nocrc variants show the cost of CRC checks (as azk-batch-nocrc does for ours).
        check_crcs=not args.contender.endswith("-nocrc"),
        isolation_level=args.isolation_level,
        **_aiokafka_security(args.security_props),
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(args.topic, p) for p in range(args.partitions)])
        if args.contender.startswith("aiokafka-iter"):
            async for msg in consumer:
                c.records += 1
                c.bytes += _size(msg.key, msg.value)
                if c.first is None:
                    c.first = time.perf_counter() - t0
                    c.first_n = 1
                if c.records >= c.total:
                    break
        else:
            while c.records < c.total:
                got = await consumer.getmany(timeout_ms=1000, max_records=args.batch)
                for msgs in got.values():
                    if c.first is None:
                        c.first = time.perf_counter() - t0
                        c.first_n = len(msgs)
                    c.records += len(msgs)
                    c.bytes += sum([_size(m.key, m.value) for m in msgs])
    finally:
        await consumer.stop()


def _confluent_conf(args: argparse.Namespace) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": _bootstrap(args),
        "group.id": f"bench-{uuid.uuid4().hex[:10]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": args.isolation_level,
        **_confluent_security(args.security_props),
    }
    if args.contender.endswith("-tuned"):
        # librdkafka's throughput setting: refetch after 10 ms instead of 1000 ms once the
        # local queue is above queued.min.messages (CONFIGURATION.md, fetch.queue.backoff.ms)
        conf["fetch.queue.backoff.ms"] = 10
    return conf


def _confluent_sync(args: argparse.Namespace, c: Counter, t0: float) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(_confluent_conf(args))
    try:
        consumer.assign(
            [TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in range(args.partitions)]
        )
        while c.records < c.total:
            for m in consumer.consume(num_messages=args.batch, timeout=1.0):
                if m.error() is not None:
                    continue
                if c.first is None:
                    c.first = time.perf_counter() - t0
                    c.first_n = 1
                c.records += 1
                c.bytes += _size(m.key(), m.value())
    finally:
        consumer.close()


async def _confluent_aio(args: argparse.Namespace, c: Counter, t0: float) -> None:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition
    from confluent_kafka.aio import AIOConsumer

    consumer = AIOConsumer(_confluent_conf(args))
    try:
        await consumer.assign(
            [TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in range(args.partitions)]
        )
        while c.records < c.total:
            for m in await consumer.consume(num_messages=args.batch, timeout=1.0):
                if m.error() is not None:
                    continue
                if c.first is None:
                    c.first = time.perf_counter() - t0
                    c.first_n = 1
                c.records += 1
                c.bytes += _size(m.key(), m.value())
    finally:
        await consumer.close()


def _kafka_python(args: argparse.Namespace, c: Counter, t0: float) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=_bootstrap(args),
        group_id=f"bench-{uuid.uuid4().hex[:10]}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **_kafka_python_security(args.security_props),
    )
    try:
        consumer.assign([TopicPartition(args.topic, p) for p in range(args.partitions)])
        while c.records < c.total:
            for msgs in consumer.poll(timeout_ms=1000, max_records=args.batch).values():
                if c.first is None:
                    c.first = time.perf_counter() - t0
                    c.first_n = len(msgs)
                c.records += len(msgs)
                c.bytes += sum([_size(m.key, m.value) for m in msgs])
    finally:
        consumer.close()


def _import_client(mode: str) -> float:
    """Import the contender's client (and pyarrow for ``azk-arrow``); return the seconds.

    Done before the consume window opens, so the window holds no import and the import time
    is reported on its own.
    """
    import importlib

    modules = {
        "azk-": ["anyio", "aiozkconsumer"],
        "aiokafka-": ["aiokafka"],
        "confluent-": ["confluent_kafka", "confluent_kafka.aio"],
        "kafka-python": ["kafka"],
    }
    names = next((m for prefix, m in modules.items() if mode.startswith(prefix)), [])
    if mode.startswith("azk-arrow"):
        names += ["pyarrow", "pyarrow.compute", "aiozkconsumer.columns"]
    t = time.perf_counter()
    for name in names:
        importlib.import_module(name)
    return time.perf_counter() - t


def child(args: argparse.Namespace) -> None:
    """Consume ``--records`` records of ``--topic`` with one contender; print the report."""
    args.security_props = (
        read_client_properties(args.client_properties) if args.client_properties else {}
    )
    if args.profile:
        from pyinstrument import Profiler

        profiler: Any = Profiler(interval=0.001, async_mode="enabled")
        profiler.start()
    import_s = _import_client(args.contender)
    if args.switch_interval_ms:
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    counter = Counter(args.records)
    cpu0 = cpu_now()
    t0 = time.perf_counter()
    mode = args.contender
    if mode.startswith("azk-"):
        asyncio.run(_azk(args, counter, t0))
    elif mode.startswith("aiokafka-"):
        asyncio.run(_aiokafka(args, counter, t0))
    elif mode in ("confluent-aio", "confluent-aio-tuned"):
        asyncio.run(_confluent_aio(args, counter, t0))
    elif mode in ("confluent-sync", "confluent-sync-tuned"):
        _confluent_sync(args, counter, t0)
    elif mode == "kafka-python":
        _kafka_python(args, counter, t0)
    else:
        raise SystemExit(f"unknown contender {mode}")
    seconds = time.perf_counter() - t0
    cpu = cpu_now() - cpu0
    if args.profile:
        profiler.stop()
        Path(args.profile).write_text(profiler.output_text(unicode=False, color=False))
    emit(
        {
            "contender": mode,
            "records": counter.records,
            "bytes": counter.bytes,
            "seconds": seconds,
            "first_record_s": counter.first,
            "first_records": counter.first_n,
            "window_cpu_s": cpu,
            "import_s": import_s,
        }
    )


# -- Kafka's ConsumerPerformance -------------------------------------------------------------


def java_classpath() -> str | None:
    """Resolve kafka-tools (ConsumerPerformance) into the cache once; ``None`` if impossible."""
    target = CACHE_DIR / f"kafka-tools-{KAFKA_VERSION}"
    libs = target / "libs"
    marker = target / ".complete"
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()
    if not (marker.exists() and marker.read_text().strip() == digest):
        mvn = shutil.which("mvn")
        if mvn is None or shutil.which("java") is None:
            say("mvn or java missing: the Java ConsumerPerformance reference is skipped")
            return None
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=CACHE_DIR))
        cmd = [
            mvn,
            "-q",
            "-f",
            str(POM),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]
        say("resolving kafka-tools (ConsumerPerformance) with Maven ...")
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            say(f"mvn failed, the Java reference is skipped:\n{done.stdout[-2000:]}")
            shutil.rmtree(staging, ignore_errors=True)
            return None
        shutil.rmtree(libs, ignore_errors=True)
        libs.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(libs)
        marker.write_text(digest + "\n")
    return f"{libs}/*"


_JAVA_LINE = re.compile(r"^\d{4}-\d\d-\d\d .*,.*")


def java_cmd(
    classpath: str,
    info: ClusterInfo,
    topic: str,
    records: int,
    security: str = "plaintext",
    config_dir: Path | None = None,
) -> list[str]:
    """The ConsumerPerformance command line (earliest offset, fresh group).

    A secured ``security`` mode reads over that listener with a ``--consumer.config``
    written into ``config_dir``.
    """
    log4j = Path(tempfile.gettempdir()) / "aiozkconsumer-bench-log4j.properties"
    if not log4j.exists():
        log4j.write_text(
            "log4j.rootLogger=WARN, stderr\n"
            "log4j.appender.stderr=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.stderr.Target=System.err\n"
            "log4j.appender.stderr.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.stderr.layout.ConversionPattern=%p %m%n\n"
        )
    props = dict(info.client_properties.get(security, {}))
    extra: list[str] = []
    if props:
        assert config_dir is not None
        config = config_dir / f"java-{security}.properties"
        write_client_properties(config, _java_security(props))
        extra = ["--consumer.config", str(config)]
    return [
        "java",
        "-Xms256m",
        "-Xmx512m",
        "-XX:+UseG1GC",
        "-XX:-UsePerfData",
        f"-Dlog4j.configuration=file:{log4j}",
        "-cp",
        classpath,
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        props["bootstrap.servers"] if props else info.bootstrap_servers,
        "--topic",
        topic,
        "--messages",
        str(records),
        "--group",
        f"bench-{uuid.uuid4().hex[:10]}",
        "--timeout",
        "60000",
        *extra,
    ]


def parse_java(stdout: str) -> dict[str, Any]:
    """ConsumerPerformance's result line -> a report like the Python children's."""
    for line in stdout.splitlines():
        if _JAVA_LINE.match(line.strip()):
            cols = [c.strip() for c in line.split(",")]
            # start, end, MB, MB.sec, nMsg, nMsg.sec, rebalance.ms, fetch.ms, fetch.MB.sec,
            # fetch.nMsg.sec
            mb, n_msg, fetch_ms = float(cols[2]), int(float(cols[4])), float(cols[7])
            return {
                "contender": "java",
                "records": n_msg,
                "bytes": int(mb * MIB),
                "seconds": fetch_ms / 1000,
                "first_record_s": None,
                "window_cpu_s": None,
                "rebalance_ms": float(cols[6]),
                "total_nmsg_sec": float(cols[5]),
            }
    return {}


# -- the codec and isolation variants ---------------------------------------------------------


def ensure_variant_topic(
    info: ClusterInfo,
    topic: str,
    partitions: int,
    records: int,
    value_size: int,
    codec: str,
    transactional: bool,
    args: argparse.Namespace,
) -> int:
    """Create and fill a codec variant topic unless it holds its records already.

    Returns:
        The records a run reads: all of them, or for a transactional topic the committed ones.
    """
    return asyncio.run(
        _ensure_variant_topic(
            info, topic, partitions, records, value_size, codec, transactional, args
        )
    )


def _committed_records(records: int, args: argparse.Namespace) -> int:
    per, every = args.transaction_records, args.abort_every
    return sum(
        min(per, records - start)
        for i, start in enumerate(range(0, records, per))
        if i % every != every - 1
    )


async def _ensure_variant_topic(
    info: ClusterInfo,
    topic: str,
    partitions: int,
    records: int,
    value_size: int,
    codec: str,
    transactional: bool,
    args: argparse.Namespace,
) -> int:
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from aiozkconsumer.cli.demo import ExistingCluster

    expected = _committed_records(records, args) if transactional else records
    admin = AIOKafkaAdminClient(bootstrap_servers=info.bootstrap_servers)
    await admin.start()
    try:
        if topic not in await admin.list_topics():
            await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    cluster = ExistingCluster(info.zookeeper_connect, info.bootstrap_servers)
    have = sum((await cluster.log_end_offsets(topic)).values())
    if have >= records:
        return expected  # written before (the log end counts the markers too)
    if have > 0:
        raise SystemExit(f"topic {topic} holds {have} records, expected {records}: delete it")
    rng = random.Random(value_size)
    half = value_size // 2
    values = [rng.randbytes(half) + b"v" * (value_size - half) for _ in range(64)]
    producer = AIOKafkaProducer(
        bootstrap_servers=info.bootstrap_servers,
        acks="all",
        compression_type=None if codec == "none" else codec,
        linger_ms=20,
        max_batch_size=512 * 1024,
        max_request_size=8 * 1024 * 1024,
        transactional_id=f"bench-{topic}" if transactional else None,
        enable_idempotence=transactional,
    )
    await producer.start()
    t0 = time.monotonic()
    try:
        if transactional:
            per, every = args.transaction_records, args.abort_every
            for i, start in enumerate(range(0, records, per)):
                await producer.begin_transaction()
                futures = [
                    await producer.send(topic, values[k % 64], partition=k % partitions)
                    for k in range(start, min(records, start + per))
                ]
                if i % every == every - 1:
                    await producer.abort_transaction()
                else:
                    await producer.commit_transaction()
                for f in futures:
                    if not f.cancelled():
                        f.exception()  # an aborted transaction's sends may have failed
        else:
            k = 0
            while k < records:
                futures = []
                for p in range(partitions):
                    batch = producer.create_batch()
                    while k < records and batch.append(
                        key=None, value=values[k % 64], timestamp=None
                    ):
                        k += 1
                    futures.append(await producer.send_batch(batch, topic, partition=p))
                await asyncio.gather(*futures)
    finally:
        await producer.stop()
    say(
        f"produced {records:,} x {value_size} B ({codec}"
        f"{', in transactions' if transactional else ''}) into {topic} in "
        f"{time.monotonic() - t0:.1f} s"
    )
    return expected


# -- the orchestrator ------------------------------------------------------------------------


def run_one(
    contender: str,
    info: ClusterInfo,
    topic: str,
    records: int,
    args: argparse.Namespace,
    java_cp: str | None,
    isolation_level: str = "read_uncommitted",
    security: str = "plaintext",
) -> dict[str, Any]:
    """One run of one contender over one topic, in a child process.

    ``security``: the listener it reads over (a key of ``info.client_properties``, whose
    properties file ``args.client_properties_dir`` holds; ``plaintext``: the plain one).
    """
    timeout = max(120.0, records / 5_000)
    config_dir = getattr(args, "client_properties_dir", None)
    broker_cpu0 = process_cpu_s(info.broker_pids)
    if contender == "java":
        assert java_cp is not None
        cmd = java_cmd(java_cp, info, topic, records, security, config_dir)
        res = run_child(cmd, timeout_s=timeout)
        res.report = parse_java(res.stdout)
    else:
        cmd = [
            this_python(),
            str(Path(__file__).resolve()),
            "child",
            "--contender",
            contender,
            "--topic",
            topic,
            "--records",
            str(records),
            "--partitions",
            str(args.partitions),
            "--batch",
            str(args.batch),
            "--zookeeper",
            info.zookeeper_connect,
            "--bootstrap-server",
            info.bootstrap_servers,
            "--isolation-level",
            isolation_level,
        ]
        if args.azk_queue_kbytes:
            cmd += ["--queue-kbytes", str(args.azk_queue_kbytes)]
        if args.switch_interval_ms:
            cmd += ["--switch-interval-ms", str(args.switch_interval_ms)]
        if security != "plaintext":
            assert config_dir is not None
            cmd += ["--client-properties", str(config_dir / f"{security}.properties")]
        res = run_child(cmd, timeout_s=timeout)
    broker_cpu1 = process_cpu_s(info.broker_pids)
    rep = res.report
    ok = res.ok and rep.get("records", 0) >= records
    if not ok:
        say(f"  {contender} FAILED (rc={res.returncode}): {res.stderr_tail[-1500:]}")
        return {"contender": contender, "ok": False, "rc": res.returncode, "security": security}
    seconds = rep["seconds"]
    first = rep.get("first_record_s")
    steady = None
    if first is not None and seconds > first:
        # after the first record: start-up, connecting and the group join excluded
        steady = (rep["records"] - rep.get("first_records", 1)) / (seconds - first)
    return {
        "contender": contender,
        "ok": True,
        "security": security,
        "records": rep["records"],
        "bytes": rep["bytes"],
        "seconds": seconds,
        "records_per_s": rep["records"] / seconds,
        "mib_per_s": rep["bytes"] / MIB / seconds,
        "window_cpu_s": rep.get("window_cpu_s"),
        "process_cpu_s": res.cpu_s,
        # the brokers' CPU over the child's whole run (start-up included), when on this host
        "broker_cpu_s": (
            broker_cpu1 - broker_cpu0
            if broker_cpu0 is not None and broker_cpu1 is not None
            else None
        ),
        "maxrss_mib": res.maxrss_mb,
        "wall_s": res.wall_s,
        "first_record_s": first,
        "import_s": rep.get("import_s"),
        "steady_records_per_s": steady,
        "extra": {k: v for k, v in rep.items() if k in ("rebalance_ms", "total_nmsg_sec")},
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the successful runs of one contender on one topic."""
    good = [r for r in runs if r.get("ok")]

    def med(key: str) -> float | None:
        vals = [r[key] for r in good if r.get(key) is not None]
        return median(vals) if vals else None

    return {
        "runs": len(runs),
        "ok_runs": len(good),
        "records": med("records"),
        "records_per_s": med("records_per_s"),
        "mib_per_s": med("mib_per_s"),
        "window_cpu_s": med("window_cpu_s"),
        "process_cpu_s": med("process_cpu_s"),
        "broker_cpu_s": med("broker_cpu_s"),
        "maxrss_mib": med("maxrss_mib"),
        "first_record_s": med("first_record_s"),
        "import_s": med("import_s"),
        "steady_records_per_s": med("steady_records_per_s"),
        "all_records_per_s": [round(r["records_per_s"]) for r in good],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Contenders: " + ", ".join(ALL_CONTENDERS + EXTRA_CONTENDERS),
    )
    sub = parser.add_subparsers(dest="command")
    c = sub.add_parser("child", help="(internal) run one contender and print its report")
    c.add_argument("--contender", required=True, choices=ALL_CONTENDERS + EXTRA_CONTENDERS)
    c.add_argument("--topic", required=True)
    c.add_argument("--records", type=int, required=True)
    c.add_argument("--partitions", type=int, required=True)
    c.add_argument("--batch", type=int, default=1000)
    c.add_argument("--zookeeper", required=True)
    c.add_argument("--bootstrap-server", required=True)
    c.add_argument("--profile", help="write a pyinstrument profile (text) to this file")
    c.add_argument("--isolation-level", default="read_uncommitted", choices=ISOLATION_LEVELS)
    c.add_argument("--queue-kbytes", type=int, default=0)
    c.add_argument("--switch-interval-ms", type=float, default=0.0)
    c.add_argument(
        "--client-properties",
        help="read over a secured listener: a properties file with its bootstrap.servers and "
        "the security keys (see --security)",
    )

    parser.add_argument("--quick", action="store_true", help="smoke size: 10x fewer records")
    parser.add_argument("--small-records", type=int, default=2_000_000, help="100 B records")
    parser.add_argument("--large-records", type=int, default=200_000, help="1 KiB records")
    parser.add_argument(
        "--huge-records", type=int, default=30_000, help="10 KiB records (0: skip the dataset)"
    )
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="rounds (median reported)")
    parser.add_argument("--batch", type=int, default=1000, help="records per batch call")
    parser.add_argument(
        "--contenders",
        default=",".join(ALL_CONTENDERS),
        help="comma-separated subset (default: all but the extras)",
    )
    parser.add_argument(
        "--codec",
        default="none",
        help="comma-separated compression.type values of the datasets (none, gzip, snappy, "
        "lz4, zstd); anything but none alone writes the codec variants (see above)",
    )
    parser.add_argument(
        "--isolation-level",
        default="read_uncommitted",
        help="comma-separated isolation levels to read at (read_uncommitted, read_committed)",
    )
    parser.add_argument(
        "--transaction-records",
        type=int,
        default=500,
        help="records per transaction of the read_committed variants",
    )
    parser.add_argument(
        "--abort-every",
        type=int,
        default=2,
        help="one transaction in this many is aborted (read_committed variants)",
    )
    parser.add_argument(
        "--azk-queue-kbytes",
        type=int,
        default=0,
        help="queued.max.messages.kbytes of the aiozkconsumer contenders without a queue "
        "setting of their own (default 0: the library's default)",
    )
    parser.add_argument(
        "--switch-interval-ms",
        type=float,
        default=0.0,
        help="sys.setswitchinterval of the Python contenders, in ms (default 0: Python's, 5 "
        "ms): how long a thread that wants the GIL waits before the holder is asked to drop "
        "it (the -iothread contenders' receive thread takes it back once per buffer)",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--name", default="throughput", help="result file stem (<name>.json, <name>.md)"
    )
    add_cluster_args(parser)
    add_security_args(parser)
    args = parser.parse_args(argv)
    if args.command == "child":
        child(args)
        return
    if args.quick:
        args.small_records //= 10
        args.large_records //= 10
        args.huge_records //= 10
    contenders = [x for x in args.contenders.split(",") if x]
    args.codecs = [x for x in args.codec.split(",") if x]
    args.isolation_levels = [x for x in args.isolation_level.split(",") if x]
    for value, allowed, name in (
        (args.codecs, CODECS, "--codec"),
        (args.isolation_levels, ISOLATION_LEVELS, "--isolation-level"),
    ):
        wrong = [v for v in value if v not in allowed]
        if wrong or not value:
            parser.error(f"{name}: {', '.join(wrong) or 'nothing'} (choose from {allowed})")
    if args.transaction_records < 1 or args.abort_every < 1:
        parser.error("--transaction-records and --abort-every must be >= 1")
    args.securities = security_modes(args)
    if args.securities != ["plaintext"] and (
        args.codecs != ["none"] or args.isolation_levels != ["read_uncommitted"]
    ):
        parser.error("--security does not combine with the --codec/--isolation-level variants")
    with cluster_from_args(args, security=args.securities) as info:
        with tempfile.TemporaryDirectory(prefix="bench-security-") as config_dir:
            # the children's client properties files (passwords: 0600 in a 0700 directory)
            args.client_properties_dir = Path(config_dir)
            for mode, props in info.client_properties.items():
                write_client_properties(Path(config_dir) / f"{mode}.properties", props)
            run(info, args, contenders)


def run(info: ClusterInfo, args: argparse.Namespace, contenders: list[str]) -> None:
    """Load the topics, warm the page cache, run every contender ``--repeats`` times."""
    java_cp = java_classpath() if "java" in contenders else None
    if "java" in contenders and java_cp is None:
        contenders.remove("java")
    datasets = [
        ("100B", args.small_records, 100),
        ("1KiB", args.large_records, 1024),
        ("10KiB", args.huge_records, 10 * 1024),
    ]
    datasets = [d for d in datasets if d[1] > 0]
    topics: dict[str, str] = {}
    # label -> (records a run reads, isolation level, contenders that run on it)
    reads: dict[str, tuple[int, str, list[str]]] = {}
    securities: list[str] = getattr(args, "securities", ["plaintext"])
    variants = args.codecs != ["none"] or args.isolation_levels != ["read_uncommitted"]
    sized = datasets
    if variants:
        datasets, sized = [], datasets
        for size_label, n, size in sized:
            for codec in dict.fromkeys(["none", *args.codecs]):
                for iso in dict.fromkeys(["read_uncommitted", *args.isolation_levels]):
                    datasets.append((f"{size_label} {codec} {iso}", n, size))
    for label, n, size in datasets:
        if variants:
            size_label, codec, iso = label.split()
            transactional = iso == "read_committed"
            topic = f"bench-tp-{size_label}-{n}-{args.partitions}-{codec}" + (
                f"-txn{args.transaction_records}-{args.abort_every}" if transactional else ""
            )
            expected = ensure_variant_topic(
                info, topic, args.partitions, n, size, codec, transactional, args
            )
            runs_on = [
                c for c in contenders if iso == "read_uncommitted" or c not in UNCOMMITTED_ONLY
            ]
        else:
            topic = f"bench-tp-{label}-{n}-{args.partitions}"
            ensure_topic(info, topic, args.partitions, n, size)
            expected, iso, runs_on = n, "read_uncommitted", contenders
        topics[label] = topic
        reads[label] = (expected, iso, runs_on)
        say(f"warming the page cache: reading {topic} once (not measured)")
        run_one("confluent-sync", info, topic, expected, args, None, iso)
    # With --security, each dataset is read over every mode: "<size> <mode>" labels, the modes
    # of one dataset and contender run back to back (load drifts alike for the x plaintext
    # ratios), their order rotating each round.
    modes_of: dict[str, list[tuple[str, str]]] = {}  # dataset label -> [(label, mode)]
    security_of: dict[str, str] = {}
    for label, _, _ in datasets:
        if securities == ["plaintext"]:
            modes_of[label] = [(label, "plaintext")]
        else:
            modes_of[label] = [(f"{label} {mode}", mode) for mode in securities]
        for lbl, mode in modes_of[label]:
            topics[lbl], reads[lbl], security_of[lbl] = topics[label], reads[label], mode
    labels = [lbl for label, _, _ in datasets for lbl, _ in modes_of[label]]
    sizes = {lbl: size for label, _, size in datasets for lbl, _ in modes_of[label]}
    before = machine()
    say(f"machine before: {before['uptime']}; {before['java_processes']} java processes")
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {lbl: {} for lbl in labels}
    loads: list[str] = []
    for rnd in range(args.repeats):
        order = contenders[rnd % len(contenders) :] + contenders[: rnd % len(contenders)]
        for label, _, _ in datasets:
            expected, iso, runs_on = reads[label]
            over = modes_of[label]
            over = over[rnd % len(over) :] + over[: rnd % len(over)]
            for contender in order:
                if contender not in runs_on:
                    continue
                for lbl, mode in over:
                    r = run_one(contender, info, topics[lbl], expected, args, java_cp, iso, mode)
                    runs[lbl].setdefault(contender, []).append(r)
                    if r["ok"]:
                        say(
                            f"round {rnd + 1} {lbl:>4} {contender:<16} "
                            f"{r['records_per_s']:>10,.0f} rec/s {r['mib_per_s']:7.1f} MiB/s "
                            f"cpu {r['process_cpu_s']:5.1f} s rss {r['maxrss_mib']:6.0f} MiB"
                        )
        loads.append(uptime())
    after = machine()
    summary = {lbl: {c: summarize(rs) for c, rs in per.items()} for lbl, per in runs.items()}
    ratios = []
    for name, mine, ref, need in TARGETS:
        for lbl in summary:
            a = summary[lbl].get(mine, {}).get("steady_records_per_s")
            b = summary[lbl].get(ref, {}).get("steady_records_per_s")
            wa = summary[lbl].get(mine, {}).get("records_per_s")
            wb = summary[lbl].get(ref, {}).get("records_per_s")
            ratio = a / b if a and b else None
            ratios.append(
                {
                    "target": name,
                    "dataset": lbl,
                    "ratio": ratio,
                    "window_ratio": wa / wb if wa and wb else None,
                    "needed": need,
                    "met": None if ratio is None else ratio >= need,
                }
            )
    crc_costs = []
    for checking, unchecked in CRC_PAIRS:
        for lbl, per in summary.items():
            on = per.get(checking, {}).get("window_cpu_s")
            off = per.get(unchecked, {}).get("window_cpu_s")
            ron = per.get(checking, {}).get("steady_records_per_s")
            roff = per.get(unchecked, {}).get("steady_records_per_s")
            if on and off:
                crc_costs.append(
                    {
                        "contender": checking,
                        "dataset": lbl,
                        "cpu_cost": on / off - 1,
                        "rate_cost": 1 - ron / roff if ron and roff else None,
                    }
                )
    data = {
        "benchmark": "throughput",
        "settings": {
            "partitions": args.partitions,
            "repeats": args.repeats,
            "batch": args.batch,
            "switch_interval_ms": args.switch_interval_ms or sys.getswitchinterval() * 1000,
            "datasets": {
                lbl: {
                    "records": reads[lbl][0],
                    "value_size": sizes[lbl],
                    "isolation_level": reads[lbl][1],
                    "security": security_of[lbl],
                }
                for lbl in labels
            },
            "security": securities,
            "security_listeners": {
                mode: {
                    k: v
                    for k, v in props.items()
                    if k in ("bootstrap.servers", "security.protocol", "sasl.mechanism")
                }
                for mode, props in info.client_properties.items()
            },
            "quick": args.quick,
            "codecs": args.codecs,
            "isolation_levels": args.isolation_levels,
            "transaction_records": args.transaction_records,
            "abort_every": args.abort_every,
        },
        "machine_before": before,
        "machine_after": after,
        "uptime_per_round": loads,
        "versions": versions(
            "aiozkconsumer", "aiokafka", "confluent-kafka", "kafka-python", "aiozk"
        ),
        "summary": summary,
        "targets": ratios,
        "crc_costs": crc_costs,
        "kafka_mode": kafka_mode_ratios(summary),
        "variants": variant_ratios(summary) if variants else [],
        "security": security_ratios(summary, security_of, contenders)
        if securities != ["plaintext"]
        else [],
        "runs": runs,
    }
    write_results(args.out_dir, args.name, data, markdown(data))


def _cpu_per_m(x: dict[str, Any], key: str = "window_cpu_s") -> float | None:
    cpu, n = x.get(key), x.get("records")
    return cpu / n * 1e6 if cpu and n else None


def security_ratios(
    summary: dict[str, dict[str, Any]], security_of: dict[str, str], contenders: list[str]
) -> list[dict[str, Any]]:
    """Each contender over each listener against itself over plaintext (steady rate, CPU per
    million records), and against tuned confluent-kafka over the same listener."""
    rows = []
    for lbl, per in summary.items():
        mode = security_of[lbl]
        base = summary.get(lbl.rsplit(" ", 1)[0] + " plaintext", {})
        for contender in contenders:
            v = per.get(contender)
            if not v:
                continue
            b, ref = base.get(contender, {}), per.get(SECURITY_REFERENCE, {})
            rate = v.get("steady_records_per_s")
            base_rate = b.get("steady_records_per_s")
            ref_rate = ref.get("steady_records_per_s")
            cpu, base_cpu = _cpu_per_m(v), _cpu_per_m(b)
            rows.append(
                {
                    "dataset": lbl.rsplit(" ", 1)[0],
                    "security": mode,
                    "contender": contender,
                    "steady_records_per_s": rate,
                    "x_plaintext": rate / base_rate if rate and base_rate else None,
                    "cpu_per_m": cpu,
                    "cpu_x_plaintext": cpu / base_cpu if cpu and base_cpu else None,
                    "broker_cpu_per_m": _cpu_per_m(v, "broker_cpu_s"),
                    "x_reference": rate / ref_rate if rate and ref_rate else None,
                    "first_record_s": v.get("first_record_s"),
                }
            )
    return rows


def variant_ratios(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each codec / isolation variant against ``none`` / ``read_uncommitted`` of its size."""
    rows = []
    for lbl, per in summary.items():
        size_label, codec, iso = lbl.split()
        base = summary.get(f"{size_label} none read_uncommitted", {})
        for contender, v in per.items():
            b = base.get(contender)
            if not b:
                continue

            def per_m(x: dict[str, Any]) -> float | None:
                cpu, n = x.get("window_cpu_s"), x.get("records")
                return cpu / n * 1e6 if cpu and n else None

            rate, base_rate = v.get("steady_records_per_s"), b.get("steady_records_per_s")
            cpu, base_cpu = per_m(v), per_m(b)
            rows.append(
                {
                    "dataset": lbl,
                    "contender": contender,
                    "steady_records_per_s": rate,
                    "rate_ratio": rate / base_rate if rate and base_rate else None,
                    "cpu_per_m": cpu,
                    "cpu_ratio": cpu / base_cpu if cpu and base_cpu else None,
                }
            )
    return rows


def kafka_mode_ratios(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each Kafka-coordinated contender against its ZooKeeper-mode twin, per dataset."""
    rows = []
    for kafka, zk in KAFKA_MODE_PAIRS:
        for lbl, per in summary.items():
            k, z = per.get(kafka), per.get(zk)
            if not k or not z:
                continue

            def ratio(key: str, k: dict[str, Any] = k, z: dict[str, Any] = z) -> float | None:
                a, b = k.get(key), z.get(key)
                return a / b if a and b else None

            rows.append(
                {
                    "kafka": kafka,
                    "zookeeper": zk,
                    "dataset": lbl,
                    "ratio": ratio("records_per_s"),
                    "steady_ratio": ratio("steady_records_per_s"),
                    "window_cpu_ratio": ratio("window_cpu_s"),
                    "kafka_first_record_s": k.get("first_record_s"),
                    "zookeeper_first_record_s": z.get("first_record_s"),
                }
            )
    return rows


def security_markdown(data: dict[str, Any]) -> list[str]:
    """The "Security" tables: over plaintext, and ours over tuned confluent-kafka."""
    rows = data["security"]
    modes = list(dict.fromkeys(r["security"] for r in rows))
    listeners = data["settings"].get("security_listeners", {})
    described = "; ".join(
        f"{m}: `{p.get('security.protocol')}`"
        + (f" `{p['sasl.mechanism']}`" if p.get("sasl.mechanism") else "")
        + f" at {p.get('bootstrap.servers')}"
        for m, p in listeners.items()
    )
    out = [
        "## Security",
        "",
        "Steady records/s (start-up, TLS handshake and SASL exchange excluded) and CPU seconds "
        "per million records (consume window) of each contender over each listener, as ratios "
        "to the same contender over plaintext; and the broker's CPU seconds per million "
        "records over the consumer's whole run (when the broker runs on this machine: it "
        "shares the cores, and encrypts what it sends over TLS where it sends files as they "
        f"are over plaintext). Listeners: {described}.",
        "",
        md_table(
            ["dataset", "contender"]
            + [f"{m} steady rec/s" for m in modes]
            + [f"{m} x plaintext" for m in modes if m != "plaintext"]
            + [f"{m} CPU x plaintext" for m in modes if m != "plaintext"]
            + [f"{m} broker CPU s/M" for m in modes]
            + [f"{m} first record s" for m in modes],
            [
                [ds, contender]
                + [fmt(by.get(m, {}).get("steady_records_per_s")) for m in modes]
                + [fmt(by.get(m, {}).get("x_plaintext"), 2) for m in modes if m != "plaintext"]
                + [fmt(by.get(m, {}).get("cpu_x_plaintext"), 2) for m in modes if m != "plaintext"]
                + [fmt(by.get(m, {}).get("broker_cpu_per_m"), 2) for m in modes]
                + [fmt(by.get(m, {}).get("first_record_s"), 2) for m in modes]
                for (ds, contender), by in _by_dataset_contender(rows).items()
            ],
        ),
        "",
        f"Ours over `{SECURITY_REFERENCE}` on the same listener (steady rates):",
        "",
        md_table(
            ["dataset", "contender"] + [f"x {SECURITY_REFERENCE} ({m})" for m in modes],
            [
                [ds, contender] + [fmt(by.get(m, {}).get("x_reference"), 2) for m in modes]
                for (ds, contender), by in _by_dataset_contender(rows).items()
                if contender.startswith("azk-")
            ],
        ),
        "",
    ]
    return out


def _by_dataset_contender(
    rows: list[dict[str, Any]],
) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    grouped: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        grouped.setdefault((r["dataset"], r["contender"]), {})[r["security"]] = r
    return grouped


def markdown(data: dict[str, Any]) -> str:
    """The result tables."""
    s = data["settings"]
    out = [
        "# Throughput",
        "",
        f"Median of {s['repeats']} interleaved rounds; {s['partitions']} partitions, one "
        f"consumer process, warm page cache, batch calls of {s['batch']} records. "
        "CPU (consume) is the child's own CPU time over the consume window; CPU (process) "
        "the whole process's (start-up included), peak RSS the process's `VmHWM` (followed "
        "while it runs); broker CPU: the brokers' over the child's whole run, per million "
        "records (when they run on this machine; they share its cores); first "
        "record: seconds from the start of the window to the first record (connect, "
        "subscribe, group join, first fetch); steady records/s: the records after the first "
        "over the time after it (start-up and join excluded). `azk-kafka-*` are the "
        "`azk-iter-1` / `azk-batch` readers with a Kafka-coordinated group "
        "(`group.coordinator=kafka`). The "
        "Java line is ConsumerPerformance's `fetch.*` rate (group join excluded).",
        "",
        f"Machine: {data['machine_before']['cpus']} CPUs ({data['machine_before']['cpu_model']}); "
        f"load before: `{data['machine_before']['uptime']}`; after: "
        f"`{data['machine_after']['uptime']}`; java processes running: "
        f"{data['machine_before']['java_processes']}.",
        "",
    ]
    for lbl, per in data["summary"].items():
        ds = s["datasets"][lbl]
        over = f", {ds['security']}" if s.get("security", ["plaintext"]) != ["plaintext"] else ""
        out += [f"## {ds['records']:,} records of {ds['value_size']} B{over}", ""]
        ref = per.get("aiokafka-iter", {}).get("records_per_s")
        rows = []
        for contender, v in sorted(per.items(), key=lambda kv: -(kv[1]["records_per_s"] or 0)):
            rate = v["records_per_s"]
            rows.append(
                [
                    contender,
                    fmt(rate),
                    fmt(v["mib_per_s"], 1),
                    fmt(rate / ref, 2) if rate and ref else "-",
                    fmt(v.get("steady_records_per_s")),
                    fmt(v["window_cpu_s"], 2),
                    fmt(v["window_cpu_s"] / v["records"] * 1e6, 2)
                    if v.get("window_cpu_s") and v.get("records")
                    else "-",
                    fmt(v["process_cpu_s"], 2),
                    fmt(_cpu_per_m(v, "broker_cpu_s"), 2),
                    fmt(v["maxrss_mib"]),
                    fmt(v.get("import_s"), 2),
                    fmt(v.get("first_record_s"), 2),
                    f"{v['ok_runs']}/{v['runs']}",
                    " / ".join(f"{x:,}" for x in v["all_records_per_s"]),
                ]
            )
        out += [
            md_table(
                [
                    "contender",
                    "records/s",
                    "MiB/s",
                    "x aiokafka-iter",
                    "steady records/s",
                    "CPU s (consume)",
                    "CPU s / M records",
                    "CPU s (process)",
                    "broker CPU s / M records",
                    "peak RSS MiB",
                    "import s",
                    "first record s",
                    "ok",
                    "each run (records/s)",
                ],
                rows,
            ),
            "",
        ]
    if data.get("kafka_mode"):
        out += [
            "## Kafka-coordinated against ZooKeeper-coordinated",
            "",
            "The same reader with `group.coordinator=kafka` over `zookeeper` (ratios of the "
            "medians; CPU: consume window).",
            "",
            md_table(
                [
                    "Kafka mode",
                    "ZooKeeper mode",
                    "dataset",
                    "records/s ratio",
                    "steady ratio",
                    "CPU ratio",
                    "first record s (Kafka / ZooKeeper)",
                ],
                [
                    [
                        r["kafka"],
                        r["zookeeper"],
                        r["dataset"],
                        fmt(r["ratio"], 3),
                        fmt(r["steady_ratio"], 3),
                        fmt(r["window_cpu_ratio"], 3),
                        f"{fmt(r['kafka_first_record_s'], 3)} / "
                        f"{fmt(r['zookeeper_first_record_s'], 3)}",
                    ]
                    for r in data["kafka_mode"]
                ],
            ),
            "",
        ]
    if data.get("variants"):
        out += [
            "## Codecs and isolation",
            "",
            "Each variant over the same contender on the `none` / `read_uncommitted` variant "
            f"of its size (values half random). read_committed variants: transactions of "
            f"{s['transaction_records']} records, one in {s['abort_every']} aborted; records/s "
            "count the committed records delivered.",
            "",
            md_table(
                ["dataset", "contender", "steady records/s", "x baseline", "CPU s / M", "x CPU"],
                [
                    [
                        r["dataset"],
                        r["contender"],
                        fmt(r["steady_records_per_s"]),
                        fmt(r["rate_ratio"], 2),
                        fmt(r["cpu_per_m"], 2),
                        fmt(r["cpu_ratio"], 2),
                    ]
                    for r in data["variants"]
                ],
            ),
            "",
        ]
    if data.get("security"):
        out += security_markdown(data)
    if data.get("crc_costs"):
        out += [
            "## CRC cost",
            "",
            "The same reader with CRC checks on over off: extra CPU seconds of the consume "
            "window, and the steady-state rate lost.",
            "",
            md_table(
                ["contender", "dataset", "CPU cost", "rate cost"],
                [
                    [
                        c["contender"],
                        c["dataset"],
                        f"{c['cpu_cost'] * 100:+.1f}%",
                        "-" if c["rate_cost"] is None else f"{c['rate_cost'] * 100:+.1f}%",
                    ]
                    for c in data["crc_costs"]
                ],
            ),
            "",
        ]
    out += [
        "## Targets",
        "",
        "Ratios of the steady-state rates (start-up and join excluded); the whole-window ratio "
        "next to it.",
        "",
    ]
    out.append(
        md_table(
            ["target", "dataset", "steady ratio", "window ratio", "needed", "met"],
            [
                [
                    t["target"],
                    t["dataset"],
                    fmt(t["ratio"], 2),
                    fmt(t.get("window_ratio"), 2),
                    t["needed"],
                    "-" if t["met"] is None else "yes" if t["met"] else "NO",
                ]
                for t in data["targets"]
            ],
        )
    )
    out += ["", "Load after each round: " + "; ".join(f"`{u}`" for u in data["uptime_per_round"])]
    return "\n".join(out)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
