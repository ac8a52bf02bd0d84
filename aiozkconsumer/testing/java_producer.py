"""A real Java ``KafkaProducer`` writing what modern producers write, for tests.

Records nobody tuned for us: :class:`JavaProducer` runs ``org.apache.kafka.clients.producer.
KafkaProducer`` (from the jars the kit provisions, :func:`~aiozkconsumer.testing.provision_kafka`)
in a ``java`` child process, driven line by line over its stdin, and reports every record it
wrote as the broker acknowledged it (:class:`ProducedRecord`: partition, offset, timestamp,
key, a digest of the value, headers), so tests compare what a reader delivers exactly::

    async with JavaProducer(cluster) as producer:
        written = await producer.produce_codec(topic, "zstd", 200, partitions=2)
        txns = await producer.produce_transactions(
            topic2, committed=3, aborted=3, records_per_transaction=6, plain=4, partitions=2
        )
        still_open = await producer.open_transaction(topic2, records=4, plain_after=3,
                                                     partitions=2)
        ...
        committed = await producer.commit_open()

What it writes:

- :meth:`JavaProducer.produce_codec`: one producer with ``compression.type`` set to the codec
  (``none``, ``gzip``, ``snappy``, ``lz4``, ``zstd``; idempotent, the Java client's default,
  so batches carry a producer id without being transactional) writes a seeded corpus: values
  of 0 B to 20 KiB (random bytes or compressible text), null keys, null values, no / one /
  several headers (a null header value and an empty one among them), spread over partitions.
- :meth:`JavaProducer.produce_transactions`: a transactional producer runs committed and
  aborted transactions, alternating while both are left, interleaved with plain
  (non-transactional) records from a second producer, written before each transaction and
  while it is open (so plain records sit inside the transactions' offset ranges).
- :meth:`JavaProducer.open_transaction`: a transaction left open (its records are in the
  log, the partition's last stable offset stays at its first offset), with plain records
  after it; :meth:`JavaProducer.commit_open` / :meth:`JavaProducer.abort_open` end it.

The class, :data:`JAVA_SOURCE`, is compiled once per ``kafka-clients`` version with ``javac``
into ``<cache>/java-producer/<kafka-clients jar>-<source digest>/``. The process answers each
command with tab-separated lines: ``RECORD <kind> <topic> <partition> <offset> <timestamp ms>
<key base64 | -> <value SHA-256 hex | -> <value size> <headers | ->`` (headers as
``base64(name):base64(value)|-`` joined by ``,``) and then ``DONE <command>``, or ``ERROR
<exception>`` (the process then exits). The producer's own log goes to
:attr:`JavaProducer.log_file`. Like the cluster's servers, the process gets SIGKILL when the
test process dies.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from aiozkconsumer._resource import AsyncService
from aiozkconsumer.testing._errors import LocalClusterError
from aiozkconsumer.testing._javac import compile_java_class
from aiozkconsumer.testing._processes import _live_lock, _live_processes, make_preexec, tail
from aiozkconsumer.testing.provision import (
    FLAVOURS,
    provision_kafka,
    require_tools,
)

if TYPE_CHECKING:
    from aiozkconsumer.testing.cluster import LocalCluster

__all__ = [
    "CODECS",
    "JAVA_PRODUCER_CLASS",
    "JAVA_SOURCE",
    "JavaProducer",
    "JavaProducerError",
    "ProducedRecord",
    "build_java_producer",
    "record_identity",
    "value_digest",
]

log = logging.getLogger(__name__)

JAVA_PRODUCER_CLASS = "AiozkJavaProducer"
"""The main class of the producer process (in the default package)."""

CODECS: tuple[str, ...] = ("none", "gzip", "snappy", "lz4", "zstd")
"""The Java producer's ``compression.type`` values."""

_JVM_OPTIONS = [
    "-Xms64m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
]
_LINE_LIMIT = 64 * 1024 * 1024
_STOP_GRACE_S = 20.0
_KILL_WAIT_S = 10.0
_TAIL_LINES = 60

JAVA_SOURCE = r"""
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** Writes records on command (stdin) and reports each one the broker acknowledged (stdout). */
public final class AiozkJavaProducer {
    private static final PrintStream OUT = new PrintStream(
            new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
    private static final Base64.Encoder B64 = Base64.getEncoder();
    private static final int[] SIZES = {0, 1, 17, 100, 1000, 4096, 12000, 20480};
    private static final Properties BASE = new Properties();
    private static KafkaProducer<byte[], byte[]> openProducer;
    private static KafkaProducer<byte[], byte[]> openPlain;

    private static void emit(String line) {
        OUT.print(line);
        OUT.print('\n');
        OUT.flush();
    }

    private static String b64(byte[] data) {
        return data == null ? "-" : B64.encodeToString(data);
    }

    private static String digest(byte[] data) throws Exception {
        if (data == null) {
            return "-";
        }
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(data));
    }

    private static String headers(Iterable<Header> all) {
        List<String> parts = new ArrayList<>();
        for (Header h : all) {
            parts.add(b64(h.key().getBytes(StandardCharsets.UTF_8)) + ":" + b64(h.value()));
        }
        return parts.isEmpty() ? "-" : String.join(",", parts);
    }

    private static KafkaProducer<byte[], byte[]> producer(Map<String, String> extra) {
        Properties props = new Properties();
        props.putAll(BASE);
        props.putAll(extra);
        return new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
    }

    /** The i-th record of the seeded corpus: mixed sizes, null keys/values, headers. */
    private static ProducerRecord<byte[], byte[]> corpus(
            String topic, int partition, int i, Random rng, String tag) {
        byte[] key = (i % 7 == 3) ? null : (tag + "-key-" + i).getBytes(StandardCharsets.UTF_8);
        byte[] value = null;
        int size = SIZES[rng.nextInt(SIZES.length)];
        boolean random = rng.nextBoolean();
        if (i % 11 != 5) {
            value = new byte[size];
            if (random) {
                rng.nextBytes(value);
            } else {
                byte[] text = (tag + " record " + i + " of the corpus; ")
                        .getBytes(StandardCharsets.UTF_8);
                for (int j = 0; j < size; j++) {
                    value[j] = text[j % text.length];
                }
            }
        }
        List<Header> hs = new ArrayList<>();
        if (i % 3 >= 1) {
            hs.add(new RecordHeader("h-" + i, (tag + "-" + i).getBytes(StandardCharsets.UTF_8)));
        }
        if (i % 3 == 2) {
            hs.add(new RecordHeader("nul", (byte[]) null));
        }
        if (i % 5 == 4) {
            hs.add(new RecordHeader("empty", new byte[0]));
        }
        return new ProducerRecord<>(topic, partition, null, key, value, hs);
    }

    private static final class Sent {
        final String kind;
        final ProducerRecord<byte[], byte[]> record;
        final Future<RecordMetadata> future;

        Sent(String kind, ProducerRecord<byte[], byte[]> record, Future<RecordMetadata> future) {
            this.kind = kind;
            this.record = record;
            this.future = future;
        }
    }

    private static void report(List<Sent> sent, String kind, int txn) throws Exception {
        for (Sent s : sent) {
            RecordMetadata md = s.future.get();
            ProducerRecord<byte[], byte[]> r = s.record;
            emit(String.join("\t", "RECORD", kind == null ? s.kind : kind, md.topic(),
                    Integer.toString(md.partition()), Long.toString(md.offset()),
                    Long.toString(md.timestamp()), b64(r.key()), digest(r.value()),
                    Integer.toString(r.value() == null ? -1 : r.value().length),
                    headers(r.headers()), Integer.toString(txn)));
        }
    }

    private static List<Sent> send(KafkaProducer<byte[], byte[]> p, String kind, String topic,
            int partitions, int count, int[] counter, Random rng, String tag) {
        List<Sent> sent = new ArrayList<>();
        for (int n = 0; n < count; n++) {
            int i = counter[0]++;
            ProducerRecord<byte[], byte[]> r = corpus(topic, i % partitions, i, rng, tag);
            sent.add(new Sent(kind, r, p.send(r)));
        }
        return sent;
    }

    private static void codec(String[] a) throws Exception {
        // CODEC topic codec count partitions seed
        String topic = a[1];
        int count = Integer.parseInt(a[3]);
        int partitions = Integer.parseInt(a[4]);
        Random rng = new Random(Long.parseLong(a[5]));
        Map<String, String> extra = new HashMap<>();
        extra.put("compression.type", a[2]);
        try (KafkaProducer<byte[], byte[]> p = producer(extra)) {
            List<Sent> sent = send(p, "PLAIN", topic, partitions, count, new int[] {0}, rng, a[2]);
            p.flush();
            report(sent, null, -1);
        }
    }

    private static void transactions(String[] a) throws Exception {
        // TXN topic committed aborted perTxn plain partitions transactionalId seed codec
        String topic = a[1];
        int committed = Integer.parseInt(a[2]);
        int aborted = Integer.parseInt(a[3]);
        int perTxn = Integer.parseInt(a[4]);
        int plain = Integer.parseInt(a[5]);
        int partitions = Integer.parseInt(a[6]);
        Random rng = new Random(Long.parseLong(a[8]));
        Map<String, String> tx = new HashMap<>();
        tx.put("transactional.id", a[7]);
        tx.put("compression.type", a[9]);
        Map<String, String> pl = new HashMap<>();
        pl.put("compression.type", a[9]);
        int[] counter = {0};
        try (KafkaProducer<byte[], byte[]> txp = producer(tx);
                KafkaProducer<byte[], byte[]> plp = producer(pl)) {
            txp.initTransactions();
            int c = 0;
            int ab = 0;
            for (int t = 0; t < committed + aborted; t++) {
                List<Sent> before = send(plp, "PLAIN", topic, partitions, plain, counter, rng,
                        "plain");
                plp.flush();
                report(before, null, -1);
                boolean commit = c < committed && (ab >= aborted || t % 2 == 0);
                txp.beginTransaction();
                List<Sent> first = send(txp, "TXN", topic, partitions, (perTxn + 1) / 2, counter,
                        rng, "txn" + t);
                txp.flush();
                // Plain records written while the transaction is open: inside its range.
                List<Sent> inside = send(plp, "PLAIN", topic, partitions, plain, counter, rng,
                        "in" + t);
                plp.flush();
                List<Sent> second = send(txp, "TXN", topic, partitions, perTxn / 2, counter, rng,
                        "txn" + t);
                txp.flush();
                if (commit) {
                    txp.commitTransaction();
                    c++;
                } else {
                    txp.abortTransaction();
                    ab++;
                }
                String kind = commit ? "COMMITTED" : "ABORTED";
                report(first, kind, t);
                report(inside, null, -1);
                report(second, kind, t);
            }
            List<Sent> after = send(plp, "PLAIN", topic, partitions, plain, counter, rng, "after");
            plp.flush();
            report(after, null, -1);
        }
    }

    private static void open(String[] a) throws Exception {
        // OPEN topic records plainAfter partitions transactionalId seed codec
        if (openProducer != null) {
            throw new IllegalStateException("a transaction is open already");
        }
        String topic = a[1];
        int records = Integer.parseInt(a[2]);
        int plainAfter = Integer.parseInt(a[3]);
        int partitions = Integer.parseInt(a[4]);
        Random rng = new Random(Long.parseLong(a[6]));
        Map<String, String> tx = new HashMap<>();
        tx.put("transactional.id", a[5]);
        tx.put("compression.type", a[7]);
        tx.put("transaction.timeout.ms", "600000");
        Map<String, String> pl = new HashMap<>();
        pl.put("compression.type", a[7]);
        openProducer = producer(tx);
        openPlain = producer(pl);
        openProducer.initTransactions();
        openProducer.beginTransaction();
        int[] counter = {100000};
        List<Sent> txn = send(openProducer, "OPEN", topic, partitions, records, counter, rng,
                "open");
        openProducer.flush();
        report(txn, null, 0);
        List<Sent> after = send(openPlain, "PLAIN", topic, partitions, plainAfter, counter, rng,
                "past-open");
        openPlain.flush();
        report(after, null, -1);
    }

    private static void end(boolean commit) {
        if (openProducer == null) {
            throw new IllegalStateException("no transaction is open");
        }
        if (commit) {
            openProducer.commitTransaction();
        } else {
            openProducer.abortTransaction();
        }
        openProducer.close();
        openPlain.close();
        openProducer = null;
        openPlain = null;
    }

    public static void main(String[] args) throws Exception {
        try (FileInputStream in = new FileInputStream(args[0])) {
            BASE.load(in);
        }
        BufferedReader commands = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8));
        emit("STARTED");
        String line;
        while ((line = commands.readLine()) != null) {
            String[] a = line.split("\t", -1);
            try {
                switch (a[0]) {
                    case "CODEC": codec(a); break;
                    case "TXN": transactions(a); break;
                    case "OPEN": open(a); break;
                    case "COMMIT": end(true); break;
                    case "ABORT": end(false); break;
                    case "QUIT":
                        // QUIT KEEP: exit with the transaction still open (as a producer that
                        // died mid-transaction; the broker aborts it after its timeout).
                        if (openProducer != null && !(a.length > 1 && a[1].equals("KEEP"))) {
                            end(false);
                        }
                        emit("DONE\tQUIT");
                        System.exit(0);
                        return;
                    default: throw new IllegalArgumentException("unknown command " + a[0]);
                }
                emit("DONE\t" + a[0]);
            } catch (Exception e) {
                StringBuilder text = new StringBuilder();
                for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
                    if (text.length() > 0) {
                        text.append("; caused by ");
                    }
                    text.append(t.getClass().getName()).append(": ").append(t.getMessage());
                }
                emit("ERROR\t" + text.toString().replace('\n', ' ').replace('\t', ' '));
                e.printStackTrace();
                System.exit(1);
            }
        }
        if (openProducer != null) {
            end(false);
        }
    }
}
"""
"""The producer process's Java source (compiled by :func:`build_java_producer`)."""

_LOG4J_PROPERTIES = """\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""

_LOG4J2_PROPERTIES = """\
status=warn
shutdownHook=disable
appender.err.type=Console
appender.err.name=STDERR
appender.err.target=SYSTEM_ERR
appender.err.layout.type=PatternLayout
appender.err.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=WARN
rootLogger.appenderRef.err.ref=STDERR
"""


class JavaProducerError(LocalClusterError):
    """The Java producer could not be built or started, a command failed, or its process
    exited unexpectedly. The message ends with the tail of the producer's log."""


def value_digest(value: bytes | bytearray | memoryview | None) -> str | None:
    """The SHA-256 hex digest of a value as :class:`ProducedRecord` reports it (``None``
    for a null value)."""
    return None if value is None else hashlib.sha256(value).hexdigest()


RecordIdentity = tuple[
    int, int, bytes | None, str | None, tuple[tuple[str, bytes | None], ...], int
]
"""``(partition, offset, key, value digest, headers, timestamp ms)``: what a delivered record
must equal."""


def record_identity(
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | bytearray | memoryview | None,
    headers: object,
    timestamp_ms: int,
) -> RecordIdentity:
    """A delivered record in the form :attr:`ProducedRecord.identity` takes.

    Args:
        partition: the record's partition.
        offset: its offset.
        key: its key (``None`` when null).
        value: its value (``None`` when null); compared through :func:`value_digest`.
        headers: its headers, ``(name, value)`` pairs (a list, a tuple, or ``None`` / empty
            for none).
        timestamp_ms: its timestamp.
    """
    pairs = tuple(
        (str(k), None if v is None else bytes(v))
        for k, v in (headers or ())  # type: ignore[attr-defined]
    )
    return (partition, offset, key, value_digest(value), pairs, timestamp_ms)


@dataclass(frozen=True)
class ProducedRecord:
    """One record the Java producer wrote, as the broker acknowledged it.

    Attributes:
        kind: ``"plain"`` (non-transactional), ``"committed"`` / ``"aborted"`` (of a
            transaction that ended so), or ``"open"`` (of the transaction left open).
        topic: the topic.
        partition: the partition.
        offset: its offset.
        timestamp_ms: its timestamp (CreateTime: the producer's; LogAppendTime: the broker's).
        key: the key bytes, or ``None``.
        value_digest: the SHA-256 hex digest of the value, or ``None`` for a null value.
        value_size: the value's length (``-1`` for a null value).
        headers: ``(name, value)`` pairs in order (a value may be ``None``).
        transaction: the index of its transaction in the command that wrote it (``-1`` for
            plain records).
    """

    kind: str
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value_digest: str | None
    value_size: int
    headers: tuple[tuple[str, bytes | None], ...]
    transaction: int = -1

    @property
    def identity(self) -> RecordIdentity:
        """``(partition, offset, key, value digest, headers, timestamp)``, as
        :func:`record_identity` gives it for a delivered record."""
        return (
            self.partition,
            self.offset,
            self.key,
            self.value_digest,
            self.headers,
            self.timestamp_ms,
        )


def _b64(text: str) -> bytes | None:
    return None if text == "-" else base64.b64decode(text)


def _parse_record(fields: list[str]) -> ProducedRecord:
    kind, topic, partition, offset, ts, key, digest, size, headers, txn = fields
    pairs: list[tuple[str, bytes | None]] = []
    if headers != "-":
        for item in headers.split(","):
            name, _, value = item.partition(":")
            pairs.append(((_b64(name) or b"").decode("utf-8"), _b64(value)))
    return ProducedRecord(
        kind.lower(),
        topic,
        int(partition),
        int(offset),
        int(ts),
        _b64(key),
        None if digest == "-" else digest,
        int(size),
        tuple(pairs),
        int(txn),
    )


def build_java_producer(libs: Path, cache_dir: Path | None = None) -> Path:
    """Compile the producer class against the ``kafka-clients`` jar in ``libs`` (cached).

    As :func:`~aiozkconsumer.testing.java_member.build_java_member`: the classes go to
    ``<cache>/java-producer/<kafka-clients jar name>-<source digest>/``, renamed into place
    once complete (concurrent builds are safe). Blocking (javac takes ~2 s).

    Args:
        libs: a provisioned ``libs`` directory (``provision_kafka(...) / "libs"``).
        cache_dir: the kit's cache; default ``$AIOZKCONSUMER_CACHE`` or
            ``~/.cache/aiozkconsumer``.

    Returns:
        The class directory, to put on the class path before ``<libs>/*``.

    Raises:
        ProvisioningError: if ``javac`` is not on ``PATH``.
        JavaProducerError: if ``libs`` holds no single ``kafka-clients-*.jar`` or javac fails
            (the message carries javac's output).
    """
    return compile_java_class(
        libs,
        cache_dir,
        kind="java-producer",
        class_name=JAVA_PRODUCER_CLASS,
        source=JAVA_SOURCE,
        error=JavaProducerError,
    )


class JavaProducer(AsyncService):
    """A real Java ``KafkaProducer`` in a child process, writing on command (see the module
    docstring).

    Commands run one at a time; each returns the records written, in the order the process
    reported them (per partition, offset order). Every wait is bounded.

    Args:
        cluster_or_bootstrap: a running :class:`~aiozkconsumer.testing.LocalCluster` (its
            ``bootstrap_servers``), or a ``bootstrap.servers`` string.
        flavour: whose jars run the producer: ``"zookeeper"`` (kafka-clients 3.9) or
            ``"kraft"`` (4.x). Default: the cluster's, or ``"zookeeper"``.
        libs: a ``libs`` directory to run from instead (overrides ``flavour``).
        cache_dir: the kit's jar cache, also where the compiled class is kept.
        extra_properties: further producer properties (override ``acks=all`` and the rest).
        start_timeout_s: how long :meth:`start` waits for the JVM (default 60 s).
        command_timeout_s: how long a command may take (default 120 s).

    Raises:
        ValueError: ``flavour`` is not one of :data:`~aiozkconsumer.testing.provision.FLAVOURS`.
    """

    _instances = 0

    def __init__(
        self,
        cluster_or_bootstrap: LocalCluster | str,
        *,
        flavour: str | None = None,
        libs: Path | None = None,
        cache_dir: Path | None = None,
        extra_properties: Mapping[str, str] | None = None,
        start_timeout_s: float = 60.0,
        command_timeout_s: float = 120.0,
    ) -> None:
        if isinstance(cluster_or_bootstrap, str):
            self._bootstrap = cluster_or_bootstrap
            default_flavour = "zookeeper"
        else:
            self._bootstrap = cluster_or_bootstrap.bootstrap_servers
            default_flavour = cluster_or_bootstrap.flavour
        self._flavour = flavour or default_flavour
        if self._flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {', '.join(FLAVOURS)}, got {flavour!r}")
        JavaProducer._instances += 1
        self.client_id = f"java-producer-{os.getpid()}-{JavaProducer._instances}"
        self._libs = libs
        self._cache_dir = cache_dir
        self._extra = dict(extra_properties or {})
        self._start_timeout_s = start_timeout_s
        self._command_timeout_s = command_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._transport: asyncio.ReadTransport | None = None
        self._work_dir: Path | None = None
        self._lock = asyncio.Lock()
        self._failed = False
        self._open: list[ProducedRecord] = []
        self._transactions = 0

    def __repr__(self) -> str:
        state = "new" if self._proc is None else f"pid {self._proc.pid}"
        if self._proc is not None and self._proc.returncode is not None:
            state += f", exited {self._proc.returncode}"
        return f"<JavaProducer [{state}, {self._flavour}, {self._bootstrap}]>"

    @property
    def log_file(self) -> Path:
        """The process's stderr: the Java client's log (WARN) and stack traces.

        Raises:
            JavaProducerError: if the producer was never started.
        """
        if self._work_dir is None:
            raise JavaProducerError("the Java producer was not started")
        return self._work_dir / "producer.log"

    def log_tail(self, lines: int = _TAIL_LINES) -> str:
        """The last ``lines`` lines of :attr:`log_file` ("" before start)."""
        return tail(self.log_file, lines) if self._work_dir is not None else ""

    def _block_failed(self, exc: BaseException) -> None:
        self._failed = True

    async def aclose(self) -> None:
        """Leaving ``async with``: :meth:`stop`."""
        await self.stop()

    async def start(self) -> None:
        """Provision and build if needed, start the process and wait until it is ready.

        Raises:
            JavaProducerError: already started, the class cannot be built, or the process
                exits or does not start within ``start_timeout_s``.
            ProvisioningError: if ``java``/``javac`` is missing or the jars cannot be fetched.
        """
        if self._proc is not None:
            raise JavaProducerError(f"the Java producer was already started: {self!r}")
        java = require_tools(("java",))["java"]
        libs = self._libs
        if libs is None:
            home = await asyncio.to_thread(
                provision_kafka, self._cache_dir, flavour=self._flavour, quiet=True
            )
            libs = home / "libs"
        classes = await asyncio.to_thread(build_java_producer, libs, self._cache_dir)
        work = self._work_dir = Path(tempfile.mkdtemp(prefix="aiozkconsumer-java-producer-"))
        props = {
            "bootstrap.servers": self._bootstrap,
            "client.id": self.client_id,
            "acks": "all",
            "linger.ms": "5",
            "max.block.ms": "60000",
            "delivery.timeout.ms": "120000",
            **self._extra,
        }
        (work / "producer.properties").write_text(
            "".join(f"{k}={v.replace(chr(92), chr(92) * 2)}\n" for k, v in props.items())
        )
        (work / "log4j.properties").write_text(_LOG4J_PROPERTIES)
        (work / "log4j2.properties").write_text(_LOG4J2_PROPERTIES)
        cmd = [
            java,
            *_JVM_OPTIONS,
            f"-Dlog4j.configuration=file:{work / 'log4j.properties'}",
            f"-Dlog4j2.configurationFile={work / 'log4j2.properties'}",
            "-cp",
            f"{classes}{os.pathsep}{libs}/*",
            JAVA_PRODUCER_CLASS,
            str(work / "producer.properties"),
        ]
        proc = self._proc = self._spawn(cmd, work)
        self._reader = asyncio.get_running_loop().create_task(
            self._read(proc), name=f"{self.client_id} stdout"
        )
        try:
            line = await self._next_line(self._start_timeout_s, "STARTED")
            if line != "STARTED":
                raise JavaProducerError(f"unexpected first line {line!r}{self._tail()}")
        except BaseException:
            self._failed = True
            await self.stop()
            raise

    async def stop(self, *, keep_open: bool = False) -> None:
        """Stop the process (SIGKILL after a time limit) and remove the work directory (kept
        when something failed). Idempotent; never raises.

        Args:
            keep_open: leave a transaction :meth:`open_transaction` left open as it is, as a
                producer that died mid-transaction (the broker aborts it after
                ``transaction.timeout.ms``, 10 minutes here); by default it is aborted.
        """
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.poll() is None and proc.stdin is not None:
                with contextlib.suppress(OSError, ValueError):
                    proc.stdin.write(b"QUIT\tKEEP\n" if keep_open else b"QUIT\n")
                    proc.stdin.flush()
                    proc.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    await asyncio.to_thread(proc.wait, _STOP_GRACE_S)
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=_KILL_WAIT_S)
            with _live_lock:
                _live_processes.discard(proc)
            if self._reader is not None and not self._reader.done():
                self._reader.cancel()
            if self._transport is not None:
                self._transport.close()
            work = self._work_dir
            if work is not None:
                if self._failed:
                    log.warning(
                        "Java producer %s failed; work directory kept: %s\n%s",
                        self.client_id,
                        work,
                        self.log_tail(),
                    )
                else:
                    shutil.rmtree(work, ignore_errors=True)

    # ---- commands --------------------------------------------------------------------------

    async def produce_codec(
        self, topic: str, codec: str, count: int, *, partitions: int = 1, seed: int = 0
    ) -> list[ProducedRecord]:
        """Write ``count`` records of the seeded corpus with ``compression.type=codec``.

        Args:
            topic: an existing topic.
            codec: one of :data:`CODECS`.
            count: records to write.
            partitions: record ``i`` goes to partition ``i % partitions``.
            seed: the corpus's seed.

        Returns:
            The records written (kind ``"plain"``).

        Raises:
            ValueError: an unknown codec.
            JavaProducerError: the producer failed (the process exits).
        """
        if codec not in CODECS:
            raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {codec!r}")
        return await self._command(["CODEC", topic, codec, str(count), str(partitions), str(seed)])

    async def produce_transactions(
        self,
        topic: str,
        *,
        committed: int,
        aborted: int,
        records_per_transaction: int,
        plain: int,
        partitions: int = 1,
        seed: int = 0,
        codec: str = "none",
    ) -> list[ProducedRecord]:
        """Run ``committed`` committed and ``aborted`` aborted transactions, interleaved with
        plain records.

        Before each transaction ``plain`` plain records are written, and ``plain`` more while
        it is open (between its two halves); ``plain`` more after the last one. Transactions
        alternate commit / abort while both kinds are left.

        Args:
            topic: an existing topic.
            committed: transactions to commit.
            aborted: transactions to abort.
            records_per_transaction: records each transaction writes.
            plain: plain records per gap (see above).
            partitions: records go round-robin over partitions ``0 .. partitions - 1`` (a
                transaction spans all of them).
            seed: the corpus's seed.
            codec: ``compression.type`` of both producers.

        Returns:
            The records written: ``"committed"``, ``"aborted"`` and ``"plain"``.

        Raises:
            JavaProducerError: the producer failed.
        """
        self._transactions += 1
        return await self._command(
            [
                "TXN",
                topic,
                str(committed),
                str(aborted),
                str(records_per_transaction),
                str(plain),
                str(partitions),
                f"{self.client_id}-txn-{self._transactions}",
                str(seed),
                codec,
            ]
        )

    async def open_transaction(
        self,
        topic: str,
        *,
        records: int,
        plain_after: int,
        partitions: int = 1,
        seed: int = 0,
        codec: str = "none",
    ) -> list[ProducedRecord]:
        """Begin a transaction, write ``records`` records in it and leave it open, then write
        ``plain_after`` plain records (past the transaction's first offsets).

        Returns:
            The records written: ``"open"`` ones, then ``"plain"`` ones.

        Raises:
            JavaProducerError: a transaction is open already, or the producer failed.
        """
        self._transactions += 1
        written = await self._command(
            [
                "OPEN",
                topic,
                str(records),
                str(plain_after),
                str(partitions),
                f"{self.client_id}-open-{self._transactions}",
                str(seed),
                codec,
            ]
        )
        self._open = [r for r in written if r.kind == "open"]
        return written

    async def commit_open(self) -> list[ProducedRecord]:
        """Commit the transaction :meth:`open_transaction` left open.

        Returns:
            Its records, now of kind ``"committed"``.

        Raises:
            JavaProducerError: no transaction is open, or the producer failed.
        """
        await self._command(["COMMIT"])
        done, self._open = [replace(r, kind="committed") for r in self._open], []
        return done

    async def abort_open(self) -> list[ProducedRecord]:
        """Abort the transaction :meth:`open_transaction` left open.

        Returns:
            Its records, now of kind ``"aborted"``.

        Raises:
            JavaProducerError: no transaction is open, or the producer failed.
        """
        await self._command(["ABORT"])
        done, self._open = [replace(r, kind="aborted") for r in self._open], []
        return done

    # ---- internals -------------------------------------------------------------------------

    @staticmethod
    def _spawn(cmd: list[str], work: Path) -> subprocess.Popen[bytes]:
        """Start the process (stdin and stdout pipes, stderr to the log), registered so that
        it dies with the test run."""
        with (work / "producer.log").open("ab") as err:
            err.write(f"==== {time.strftime('%H:%M:%S')} starting {' '.join(cmd)}\n".encode())
            err.flush()
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=work,
                start_new_session=True,
                preexec_fn=make_preexec(),
            )
        with _live_lock:
            _live_processes.add(proc)
        return proc

    async def _command(self, fields: list[str]) -> list[ProducedRecord]:
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise JavaProducerError("the Java producer is not started")
        async with self._lock:
            try:
                proc.stdin.write(("\t".join(fields) + "\n").encode())
                proc.stdin.flush()
            except (OSError, ValueError) as e:
                self._failed = True
                raise JavaProducerError(f"cannot send {fields[0]}: {e!r}{self._tail()}") from e
            records: list[ProducedRecord] = []
            while True:
                line = await self._next_line(self._command_timeout_s, fields[0])
                kind, _, rest = line.partition("\t")
                if kind == "RECORD":
                    records.append(_parse_record(rest.split("\t")))
                elif kind == "DONE" and rest == fields[0]:
                    return records
                elif kind == "ERROR":
                    self._failed = True
                    raise JavaProducerError(f"{fields[0]} failed: {rest}{self._tail()}")
                else:
                    log.debug("%s: unexpected output %r", self.client_id, line)

    async def _next_line(self, timeout_s: float, what: str) -> str:
        try:
            async with asyncio.timeout(timeout_s):
                line = await self._lines.get()
        except TimeoutError:
            self._failed = True
            raise JavaProducerError(
                f"{what}: no answer within {timeout_s:.0f} s: {self!r}{self._tail()}"
            ) from None
        if line is None:
            self._failed = True
            raise JavaProducerError(f"{what}: the process exited: {self!r}{self._tail()}")
        return line

    def _tail(self) -> str:
        return f"\n--- last lines of the producer's log ---\n{self.log_tail()}"

    async def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_LINE_LIMIT)
        try:
            self._transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), proc.stdout
            )
            while line := await reader.readline():
                self._lines.put_nowait(line.decode("utf-8", "replace").rstrip("\n"))
        finally:
            self._lines.put_nowait(None)
