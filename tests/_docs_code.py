"""Runs the Python blocks of README.md and docs/*.md against the test kit's session clusters.

A pytest plugin (loaded by the root ``conftest.py``) on top of pytest-markdown-docs: its
Markdown parser, fence options (``fixture:<name>``, ``notest``) and block runner do the work;
this module collects README.md and docs/*.md without the tool's ``--markdown-docs`` switch
(which would also collect every docstring of every ``.py`` file), reports a ``notest`` block
as a skipped test with its reason (:data:`NOT_RUN`), and gives the blocks what they need:

- ``fixture:payments``: the ZooKeeper-mode session cluster with a fresh topic (4 partitions,
  5 records each) standing for ``"payments"``, a fresh group standing for ``"billing"``; the
  block's ``127.0.0.1:2181``-like ZooKeeper and ``127.0.0.1:9092`` broker addresses are
  pointed at the cluster (the page keeps them). A block that reads the topic is stopped the
  way a service is (``connector.shutdown()``) once it has consumed every partition to its
  log end; one that is still running :data:`DEADLINE_S` after its connector started fails,
  and so does one (auto-commit on) whose group has not committed every partition's log end
  when it ends.
  ``fixture:payments_kraft`` is the same on the KRaft session cluster.
- ``fixture:config``, ``fixture:connector``, ``fixture:stream``, ``fixture:sink``: the
  objects fragments take as given (a config for that cluster, a started connector with
  ``client.id`` ``billing``, one stream of it, a sink recording what is written).
- ``fixture:borrowed_cluster``: ``LocalCluster()`` gives the session cluster (not started
  nor stopped by the block), ``"payments"``/``"billing"`` are fresh names.
- Every block runs with the names of ``aiozkconsumer`` and ``asyncio``, ``anyio``, ``json``,
  ``os`` imported (a fragment continues its page), and with ``handle``, ``process``,
  ``consume`` and ``print`` standing for the user's code (they record, print nothing).
- A block that defines ``async def test_...`` functions (docs/testing.md) has them run with
  the kit's fixtures (``any_cluster`` as ``zk_kafka_cluster``).
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import inspect
import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
import pytest_asyncio
from pytest_markdown_docs._runners import get_runner
from pytest_markdown_docs.definitions import FenceTestDefinition
from pytest_markdown_docs.plugin import (
    FenceSyntax,
    MarkdownInlinePythonItem,
    extract_fence_tests,
    parse_superfences_block_info,
)

import aiozkconsumer
import aiozkconsumer.testing
from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector
from aiozkconsumer.base_connector import ConsumerConnector
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.testing import LocalCluster

ROOT = Path(__file__).resolve().parents[1]
PARTITIONS = 4
RECORDS_PER_PARTITION = 5
DEADLINE_S = 20.0
"""How long a block's connector may run before the block counts as hung (it should have
consumed the 20 records of ``payments`` within a second or two)."""

_SCHEMA_REGISTRY = (
    "needs a Schema Registry; tests/integration/test_schema_registry.py makes the same calls "
    "against a real one"
)

NOT_RUN: dict[tuple[str, str], str] = {
    # (page, the block's first line) -> why it is not run; shown as the skip reason.
    (
        "docs/schema-registry.md",
        "from aiozkconsumer.schema_registry import SchemaRegistryClient, SchemaRegistryDecoder",
    ): _SCHEMA_REGISTRY,
    (
        "docs/schema-registry.md",
        "async for batch in stream.batches(max_records=1000):",
    ): _SCHEMA_REGISTRY,
    (
        "docs/schema-registry.md",
        'decoder = SchemaRegistryDecoder(registry, "avro", reader_schema=payment_v2)',
    ): _SCHEMA_REGISTRY,
    (
        "docs/schema-registry.md",
        "def dead_letter(msg: MessageAndMetadata, error: RecordDecodeError) -> None:",
    ): _SCHEMA_REGISTRY,
    (
        "docs/schema-registry.md",
        'decoder = SchemaRegistryDecoder(registry, "avro")',
    ): _SCHEMA_REGISTRY,
    (
        "docs/schema-registry.md",
        "registry = SchemaRegistryClient.from_properties({",
    ): _SCHEMA_REGISTRY,
    (
        "docs/schema-registry.md",
        "from aiozkconsumer.spark.schema_registry import avro_schemas, from_confluent_avro",
    ): _SCHEMA_REGISTRY,
    ("docs/schema-registry.md", "import pytest"): _SCHEMA_REGISTRY,
    ("docs/rebalancing.md", "RebalanceRecord(..., attempts=1, succeeded=True,"): (
        "the repr of a RebalanceRecord, output rather than code"
    ),
    ("docs/metrics.md", "from prometheus_client import REGISTRY, start_http_server"): (
        "binds port 9100 and registers into the process-wide default registry; "
        "collector() is exported by the run block of service.md and tests/unit/test_metrics.py"
    ),
    (
        "docs/service.md",
        "async def consumer_lifespan(app: web.Application) -> AsyncIterator[None]:",
    ): ("an excerpt of examples/service.py, which tests/integration/test_service_example.py runs"),
    ("docs/service.md", '--8<-- "examples/service.py"'): (
        "includes examples/service.py, which tests/integration/test_service_example.py runs"
    ),
    (
        "docs/testing.md",
        "async def test_my_handler_over_scram(secure_cluster, unique_group_id, unique_topic):",
    ): ("a sketch (its body is elided with ...); tests/integration/test_security_e2e.py runs it"),
    ("docs/testing.md", "produced = await produce_checkable(cluster, topic, 4, 2000, seed=7)"): (
        "a sketch of a fault run (members are started elsewhere); "
        "tests/integration/test_verifiable.py and test_chaos.py run it"
    ),
    ("docs/security.md", '(spark.readStream.format("zkkafka")'): (
        "Spark, elided with ...; tests/integration/test_spark_security.py runs it"
    ),
    ("docs/spark.md", "from aiozkconsumer import spark as zkspark"): (
        "Spark (needs a SparkSession of its own); tests/integration/test_spark.py runs it"
    ),
    ("docs/spark.md", "from aiozkconsumer.spark.source import commit_batch"): (
        "Spark (needs a SparkSession of its own); tests/integration/test_spark_batch_read.py"
    ),
    ("docs/spark.md", "from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector"): (
        "Spark (a SparkSession of its own); tests/integration/test_spark.py runs foreach_batch"
    ),
    ("docs/spark.md", "df = ("): (
        "Spark (needs a SparkSession of its own); tests/integration/test_spark_kafka_groups.py"
    ),
    ("docs/spark.md", "import asyncio"): (
        "Spark (a SparkSession and a cluster of its own, ~30 s); "
        "tests/integration/test_demo_spark.py runs the same pull and push modes"
    ),
}

_ZK_ADDRESSES = re.compile(r"(127\.0\.0\.1|localhost|zk\d?):2181(,zk\d:2181)*(/kafka)?")
_BROKER_ADDRESSES = re.compile(r"(127\.0\.0\.1|localhost):9092")
_T = TypeVar("_T")
RUN_KEY = pytest.StashKey["DocsRun"]()
"""The item's :class:`DocsRun`, set by the fixture that made it."""
REWRITE_KEY = pytest.StashKey[dict[str, str]]()
"""Text of the item's block -> what it is replaced with before it runs (a path)."""


def _run_private(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` in an event loop of its own (the test's loop may be in use)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


class DocsCheckError(AssertionError):
    """A block ran but did not do what its page says."""


@dataclasses.dataclass(eq=False)
class DocsRun:
    """What one block runs against, what its connectors did, and the checks of its run."""

    cluster: LocalCluster
    topic: str
    group: str
    log_end: dict[int, int]
    deadline_s: float = DEADLINE_S
    connectors: list[ConsumerConnector] = dataclasses.field(default_factory=list)
    output: list[str] = dataclasses.field(default_factory=list)
    consumed: dict[int, int] = dataclasses.field(default_factory=dict)
    """What the connectors had consumed (handed out) when the block last handled records."""
    completed: bool = False
    hung: bool = False
    _timers: list[asyncio.TimerHandle] = dataclasses.field(default_factory=list)
    _stops: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)

    def rewrite(self, source: str) -> str:
        """The block's source, pointed at the cluster and the fresh topic and group."""
        source = _ZK_ADDRESSES.sub(self.cluster.zookeeper_connect, source)
        source = _BROKER_ADDRESSES.sub(self.cluster.bootstrap_servers, source)
        source = source.replace('"payments"', repr(self.topic))
        return source.replace('"billing"', repr(self.group))

    def user_code(self) -> dict[str, Any]:
        """The names standing for the reader's own code in the blocks."""

        def print(*args: Any, **kwargs: Any) -> None:
            if "file" in kwargs:
                builtins.print(*args, **kwargs)  # noqa: T201
                return
            self.output.append(kwargs.get("sep", " ").join(map(str, args)))
            self.poke()

        async def handle(*args: Any) -> None:
            self.poke()

        async def consume(stream: KafkaStream) -> None:
            async for _ in stream:
                self.poke()

        return {"print": print, "handle": handle, "process": handle, "consume": consume}

    def started(self, connector: ConsumerConnector) -> None:
        """A connector of the block started: watch it, and give the block its deadline."""
        self.connectors.append(connector)
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(self.deadline_s, self._deadline))

    def poke(self) -> None:
        """The block handled records: stop its connectors once every partition is consumed."""
        if self.completed or not self.log_end:
            return
        consumed: dict[int, int] = {}
        for connector in self.connectors:
            for tp, offset in connector.statistics().consumed_offsets.items():
                if tp.topic == self.topic:
                    consumed[tp.partition] = max(offset, consumed.get(tp.partition, 0))
        self.consumed = consumed
        if all(consumed.get(p, 0) >= end for p, end in self.log_end.items()):
            self.completed = True
            self._stop_all()

    def _deadline(self) -> None:
        if not self.completed:
            self.hung = True
            self._stop_all()

    def _stop_all(self) -> None:
        for connector in self.connectors:
            task = asyncio.get_running_loop().create_task(connector.shutdown())
            self._stops.add(task)
            task.add_done_callback(self._stops.discard)

    def close(self, asyncio_runner: asyncio.Runner | None) -> None:
        """Cancel the deadlines; finish the shutdowns begun in the test's event loop (those
        of the block's own event loop were awaited by the block, leaving its ``async with``).
        """
        for timer in self._timers:
            timer.cancel()
        pending = [task for task in self._stops if not task.done()]
        if pending and asyncio_runner is not None:

            async def settle() -> None:
                await asyncio.wait(pending)

            asyncio_runner.run(settle())

    def verify(self) -> None:
        """Fail unless the block read the topic to its end and its group committed it."""
        if self.hung:
            raise DocsCheckError(
                f"the block still ran {self.deadline_s:.0f} s after its connector started "
                f"without having consumed every partition of {self.topic!r} to its log end "
                f"{self.log_end} (consumed: {self.consumed}): does it read every stream it "
                "creates? "
                f"(last lines it printed: {self.output[-3:]})"
            )
        if not self.completed:
            return  # the block ended by itself without reading the topic: nothing to check
        if not all(c.config.auto_commit_enable for c in self.connectors):
            return  # with auto-commit off, committing is the block's reader's own business
        committed = _run_private(self._committed())
        missing = {
            p: (committed.get(p), end) for p, end in self.log_end.items() if committed.get(p) != end
        }
        if missing:
            raise DocsCheckError(
                f"group {self.group!r} did not commit the log end of every partition: "
                f"{{partition: (committed, log end)}} = {missing}"
            )

    async def _committed(self) -> dict[int, int]:
        config = self.connectors[0].config
        if config.group_coordinator == "kafka" or config.offsets_storage != "zookeeper":
            from aiokafka.admin import AIOKafkaAdminClient

            admin = AIOKafkaAdminClient(bootstrap_servers=self.cluster.bootstrap_servers)
            await admin.start()
            try:
                got = await admin.list_consumer_group_offsets(self.group)
            finally:
                await admin.close()
            return {tp.partition: meta.offset for tp, meta in got.items() if tp.topic == self.topic}
        from aiozk import ZKClient
        from aiozk import exc as zk_exc

        client = ZKClient(self.cluster.zookeeper_connect)
        await client.start()
        try:
            offsets = {}
            for p in self.log_end:
                try:
                    raw = await client.get_data(f"/consumers/{self.group}/offsets/{self.topic}/{p}")
                except zk_exc.NoNode:
                    continue
                offsets[p] = int(raw)
            return offsets
        finally:
            await client.close()


def block_globals(run: DocsRun | None) -> dict[str, Any]:
    """The names every block runs with (a fragment continues its page's imports)."""
    names: dict[str, Any] = {n: getattr(aiozkconsumer, n) for n in aiozkconsumer.__all__}
    names.update(asyncio=asyncio, anyio=anyio, json=json, os=os)
    if run is not None:
        names.update(run.user_code())
    return names


def run_block(
    definition: FenceTestDefinition,
    names: dict[str, Any],
    run: DocsRun | None,
    asyncio_runner: asyncio.Runner | None,
    rewrites: dict[str, str] | None = None,
) -> None:
    """Run one block as pytest-markdown-docs does, then its run's checks."""
    source = definition.source
    for old, new in (rewrites or {}).items():
        source = source.replace(old, new)
    if run is not None:
        source = run.rewrite(source)
    definition = dataclasses.replace(definition, source=source)
    try:
        get_runner(definition.runner_name).runtest(definition, names, asyncio_runner=asyncio_runner)
    finally:
        if run is not None:
            run.close(asyncio_runner)
    if run is not None:
        run.verify()


def _new_run(cluster: LocalCluster, request: pytest.FixtureRequest, *, topic: bool) -> DocsRun:
    name = re.sub(r"[^a-zA-Z0-9-]+", "-", request.node.name).strip("-")[-30:]
    unique = uuid.uuid4().hex[:10]
    run = DocsRun(cluster, f"docs-{name}-{unique}", f"docs-{name}-{unique}", {})
    request.node.stash[RUN_KEY] = run
    if topic:
        records = {
            p: [(b"k%d" % i, b"v%d-%d" % (p, i)) for i in range(RECORDS_PER_PARTITION)]
            for p in range(PARTITIONS)
        }

        async def fill() -> dict[int, int]:
            await cluster.create_topic(run.topic, PARTITIONS)
            await cluster.produce_to_partitions(run.topic, records)
            return await cluster.log_end_offsets(run.topic)

        run.log_end = _run_private(fill())
    return run


def _watch_connectors(run: DocsRun, monkeypatch: pytest.MonkeyPatch) -> None:
    start = ConsumerConnector.start

    async def watched_start(connector: ConsumerConnector) -> None:
        await start(connector)
        run.started(connector)

    monkeypatch.setattr(ConsumerConnector, "start", watched_start)


@pytest.fixture
def payments(
    zk_kafka_cluster: LocalCluster, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> DocsRun:
    """The ZooKeeper-mode cluster with a fresh ``payments`` topic of 20 records."""
    run = _new_run(zk_kafka_cluster, request, topic=True)
    _watch_connectors(run, monkeypatch)
    return run


@pytest.fixture
def payments_kraft(
    kraft_cluster: LocalCluster, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> DocsRun:
    """The KRaft cluster with a fresh ``payments`` topic of 20 records."""
    run = _new_run(kraft_cluster, request, topic=True)
    _watch_connectors(run, monkeypatch)
    return run


class _Borrowed:
    """``LocalCluster(...)`` in a block: the session cluster, neither started nor stopped."""

    cluster: LocalCluster

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def __aenter__(self) -> LocalCluster:
        return self.cluster

    async def __aexit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def borrowed_cluster(
    zk_kafka_cluster: LocalCluster, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> DocsRun:
    """``LocalCluster()`` gives the session cluster; fresh names for payments and billing."""
    run = _new_run(zk_kafka_cluster, request, topic=False)
    borrowed = type("LocalCluster", (_Borrowed,), {"cluster": zk_kafka_cluster})
    monkeypatch.setattr(aiozkconsumer.testing, "LocalCluster", borrowed)
    _watch_connectors(run, monkeypatch)
    return run


@pytest.fixture
def config(payments: DocsRun) -> ConsumerConfig:
    """A config of group ``billing`` for ``payments``' cluster, from the beginning."""
    return ConsumerConfig(
        group_id=payments.group,
        zookeeper_connect=payments.cluster.zookeeper_connect,
        auto_offset_reset="smallest",
    )


@pytest_asyncio.fixture
async def connector(payments: DocsRun) -> AsyncIterator[ZookeeperConsumerConnector]:
    """A started connector (``client.id`` ``billing``), no streams yet; closed afterwards.

    Entered and left in a task of its own: a connector is left in the task that entered it.
    """
    config = ConsumerConfig(
        group_id=payments.group,
        client_id="billing",
        zookeeper_connect=payments.cluster.zookeeper_connect,
        auto_offset_reset="smallest",
    )
    entered: asyncio.Future[ZookeeperConsumerConnector] = asyncio.get_running_loop().create_future()
    leave = asyncio.Event()

    async def hold() -> None:
        async with ZookeeperConsumerConnector(config) as held:
            entered.set_result(held)
            await leave.wait()

    task = asyncio.create_task(hold())
    try:
        with anyio.fail_after(30):
            held = await asyncio.shield(entered)
        yield held
    finally:
        leave.set()
        await task


@pytest_asyncio.fixture
async def stream(connector: ZookeeperConsumerConnector, payments: DocsRun) -> KafkaStream:
    """The one stream of ``connector`` over ``payments``."""
    streams = await connector.create_message_streams({payments.topic: 1})
    return streams[payments.topic][0]


class Sink:
    """Where the blocks write what they read: counts, and lets the run see progress."""

    def __init__(self, run: DocsRun) -> None:
        self.run = run
        self.records = 0

    async def write_many(self, batch: list[Any]) -> None:
        self.records += len(batch)
        self.run.poke()

    async def write_arrow(self, batch: Any) -> None:
        self.records += batch.num_rows
        self.run.poke()


@pytest.fixture
def sink(payments: DocsRun) -> Sink:
    return Sink(payments)


@pytest.fixture
def client_properties(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A client.properties (the Java client's file) in the block's working directory."""
    path = tmp_path / "client.properties"
    path.write_text(
        "bootstrap.servers=127.0.0.1:9092\nsecurity.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\nsasl.username=billing\nsasl.password=secret\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    return path


@pytest.fixture
def kafka_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Path:
    """``KAFKA_PASSWORD`` set, and a CA file standing for ``/etc/kafka/ca.pem``."""
    import trustme

    monkeypatch.setenv("KAFKA_PASSWORD", "secret")
    ca = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca))
    request.node.stash.setdefault(REWRITE_KEY, {})["/etc/kafka/ca.pem"] = str(ca)
    return ca


_CLUSTER_FIXTURES = {
    "payments",
    "payments_kraft",
    "borrowed_cluster",
    "config",
    "connector",
    "stream",
    "sink",
}
_FIXTURE_ALIASES = {"any_cluster": "zk_kafka_cluster", "any_zk_client": "zk_client"}
_DEFINES_TESTS = re.compile(r"^async def test_\w+\(", re.MULTILINE)


class DocsFenceItem(MarkdownInlinePythonItem):
    """A Python block of a page, run with :func:`block_globals` and its run's checks."""

    def runtest(self) -> None:
        request = self.fixture_request
        given = {n: request.getfixturevalue(n) for n in self.test_definition.fixture_names}
        run = self.stash.get(RUN_KEY, None)
        names = block_globals(run)
        names.update(given)
        asyncio_runner = request.getfixturevalue("_function_scoped_runner")
        before = set(names)
        rewrites = self.stash.get(REWRITE_KEY, None)
        run_block(self.test_definition, names, run, asyncio_runner, rewrites)
        for name in sorted(set(names) - before):
            test = names[name]
            if name.startswith("test_") and inspect.iscoroutinefunction(test):
                kwargs = {
                    p: request.getfixturevalue(_FIXTURE_ALIASES.get(p, p))
                    for p in inspect.signature(test).parameters
                }
                asyncio_runner.run(test(**kwargs))


class NotRunFence(pytest.Item):
    """A ``notest`` block: reported as skipped, with its reason from :data:`NOT_RUN`."""

    def __init__(self, *, line: int, reason: str | None, first_line: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.line = line
        self.reason = reason
        self.first_line = first_line

    def runtest(self) -> None:
        if self.reason is None:
            pytest.fail(
                f"{self.name}: a block marked notest needs its reason in NOT_RUN "
                f"(tests/_docs_code.py), keyed by its first line {self.first_line!r}"
            )
        pytest.skip(f"not run (notest): {self.reason}")

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.line - 1, self.name


def page_key(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def fences(text: str) -> Iterator[tuple[int, list[str], str]]:
    """``(line, options, source)`` of each Python block, ``notest`` ones too."""
    from markdown_it import MarkdownIt

    for token in MarkdownIt("commonmark").parse(text):
        if token.type != "fence" or not token.map:
            continue
        info = parse_superfences_block_info(token.info)
        if info and info[0] in ("py", "python", "python3"):
            yield token.map[0] + 1, info[1:], token.content


_RAW_FENCE = re.compile(r"^(?P<indent>[ \t]*)```+\s*\{?\s*\.?(?:py|python|python3)\b.*$")


def nested_fences(text: str) -> Iterator[tuple[int, str]]:
    """``(line, first line)`` of the Python blocks inside another block (an admonition's),
    which Markdown parsers other than MkDocs' see as plain text: never run here."""
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        match = _RAW_FENCE.match(line)
        if match and match.group("indent"):
            body = (raw.strip() for raw in lines[number:])
            yield number, next((b for b in body if b), "")


def first_line(source: str) -> str:
    return next((line.strip() for line in source.splitlines() if line.strip()), "")


class DocsPage(pytest.File):
    """README.md or a page of docs/: one item per Python block."""

    def collect(self) -> Iterator[pytest.Item]:
        text = self.path.read_text("utf-8")
        definitions = iter(
            extract_fence_tests(
                self.config.hook.pytest_markdown_docs_markdown_it(),
                text,
                0,
                self.path,
                fence_syntax=FenceSyntax.superfences,
            )
        )
        page = page_key(self.path)
        seen = {line for line, _, _ in fences(text)}
        for line, first in nested_fences(text):
            if line in seen:
                continue
            yield self._not_run(f"[line:{line}]", line, page, first)
        for line, options, source in fences(text):
            name = f"[line:{line}]"
            if "notest" in options:
                first = first_line(source)
                yield self._not_run(name, line, page, first)
                continue
            definition = next(definitions)
            item = DocsFenceItem.from_parent(self, name=name, test_definition=definition)
            fixtures = set(definition.fixture_names)
            if fixtures & _CLUSTER_FIXTURES or _DEFINES_TESTS.search(definition.source):
                item.add_marker(pytest.mark.integration)
            yield item

    def _not_run(self, name: str, line: int, page: str, first: str) -> NotRunFence:
        reason = NOT_RUN.get((page, first))
        item = NotRunFence.from_parent(self, name=name, line=line, reason=reason, first_line=first)
        if reason is not None:  # skipped at setup, reported at the block's line
            item.add_marker(pytest.mark.skip(reason=f"line {line} not run (notest): {reason}"))
        return item


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> DocsPage | None:
    try:
        page = page_key(file_path)
    except ValueError:
        return None
    if page == "README.md" or (page.startswith("docs/") and file_path.suffix == ".md"):
        text = file_path.read_text("utf-8")
        if any(True for _ in fences(text)) or any(True for _ in nested_fences(text)):
            return DocsPage.from_parent(parent, path=file_path)
    return None


def pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
