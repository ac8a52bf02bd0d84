"""pytest plugin: a real ZooKeeper + Kafka cluster and helpers for pytest-asyncio suites.

Registered through the ``pytest11`` entry point ``aiozkconsumer`` (active once the package is
installed; otherwise pass ``-p aiozkconsumer.testing.plugin``). Fixtures:

- ``zk_kafka_cluster`` (session): a started :class:`~aiozkconsumer.testing.LocalCluster` of
  the ZooKeeper flavour (Kafka 3.9 brokers registered under ``/brokers`` in ZooKeeper).
- ``kraft_cluster`` (session): a started ``LocalCluster`` of the KRaft flavour (Kafka 4.x
  brokers; ZooKeeper runs for the consumers only, there is no ``/brokers`` tree).
- ``any_cluster`` (function, parametrized ``zk`` / ``kraft``): runs the test once on each of
  the two session clusters. Narrow it with
  ``@pytest.mark.parametrize("any_cluster", ["kraft"], indirect=True)``.
- ``secure_cluster`` / ``secure_kraft_cluster`` (session): a started ``LocalCluster`` of each
  flavour with secured listeners (``SSL``, ``MTLS``, ``SASL_SSL``, ``SASL_PLAINTEXT``,
  ``SSL_WRONG_HOST``); ``secure_cluster``'s ZooKeeper also has a TLS port
  (:data:`SECURE_CLUSTER_SECURITY`); see :mod:`aiozkconsumer.testing.security`.
  ``any_secure_cluster`` (function, parametrized ``zk`` / ``kraft``) runs a test on each,
  like ``any_cluster``. Need ``trustme``.
- ``zk_client`` (function, async): a started aiozk ``ZKClient`` on ``zk_kafka_cluster``'s
  ZooKeeper; ``any_zk_client`` the same on ``any_cluster``'s. Closed afterwards within a time
  limit. Need pytest-asyncio.
- ``unique_group_id`` / ``unique_topic`` (function): fresh legal names derived from the test.
- ``spark_standalone_cluster`` (session, opt-in: started only for a test that asks for it): a
  started :class:`~aiozkconsumer.testing.spark_cluster.SparkStandaloneCluster`, a Spark
  standalone master and two workers (1 core, 512 MiB each) from the installed PySpark;
  applications connect with its ``master_url`` and ``app_conf()``. Needs PySpark and Java.

The session clusters are started lazily, when a test first needs one (a KRaft-free run never
starts Kafka 4, a run without security tests no secured cluster), and stopped at the end of
the session; the secured ones are clusters of their own, next to the plain ones. They are
synchronous fixtures (started and stopped in private event loops), so they work with any
``loop_scope`` the tests use. ``AIOZKCONSUMER_BROKERS`` sets their broker count (default 1).

When a test that uses a cluster fails, its server logs are appended to the failure report
(section "aiozkconsumer server logs", "aiozkconsumer server logs (kraft)", "... (secure)" or
"... (secure kraft)") and the cluster's work directory is kept.

The fixtures need pytest-asyncio to run the tests that use them (``asyncio_mode = "auto"``
in the suite's ``pyproject.toml``; see ``docs/testing.md``). A test that uses one of them
and that pytest-asyncio would not run (not installed or disabled; or ``strict`` mode and no
``@pytest.mark.asyncio``) fails at setup with :data:`ASYNCIO_HINT`, before any server starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import re
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterator
from typing import Any, TypeVar

import pytest
from aiozk import ZKClient

from aiozkconsumer._loops import close_loop
from aiozkconsumer.testing.cluster import LocalCluster, LocalClusterError
from aiozkconsumer.testing.provision import FLAVOURS
from aiozkconsumer.testing.security import ClusterSecurity
from aiozkconsumer.testing.spark_cluster import SparkStandaloneCluster
from aiozkconsumer.zk.client import close_raw

__all__ = [
    "ASYNCIO_HINT",
    "BROKERS_ENV",
    "LOG_SECTION",
    "SECURE_CLUSTER_SECURITY",
    "SECURE_KRAFT_CLUSTER_SECURITY",
    "SPARK_LOG_SECTION",
    "any_cluster",
    "any_secure_cluster",
    "any_zk_client",
    "kraft_cluster",
    "pytest_runtest_makereport",
    "pytest_runtest_setup",
    "secure_cluster",
    "secure_kraft_cluster",
    "spark_standalone_cluster",
    "unique_group_id",
    "unique_topic",
    "zk_client",
    "zk_kafka_cluster",
]

BROKERS_ENV = "AIOZKCONSUMER_BROKERS"
"""Environment variable: number of brokers of the session cluster (default 1)."""

LOG_SECTION = "aiozkconsumer server logs"
"""Title of the report section holding the server log tails of a failed test."""
SPARK_LOG_SECTION = "aiozkconsumer Spark cluster logs"
"""Title of the report section holding the Spark daemons' (and executors') log tails."""

ASYNCIO_HINT = """\
aiozkconsumer's pytest fixtures need pytest-asyncio to run this test: {reason}.
Install pytest-asyncio (pip install pytest-asyncio) and put in the suite's pyproject.toml:

    [tool.pytest.ini_options]
    asyncio_mode = "auto"
    asyncio_default_fixture_loop_scope = "function"

(see "pytest fixtures" in aiozkconsumer's docs/testing.md)."""
"""The failure message of a test whose fixtures cannot work; ``{reason}`` says why."""

SECURE_CLUSTER_SECURITY = ClusterSecurity(zookeeper_tls=True)
"""The options of ``secure_cluster``: every secured listener, ZooKeeper's TLS port (client
certificate wanted, not needed), the request log."""
SECURE_KRAFT_CLUSTER_SECURITY = ClusterSecurity()
"""The options of ``secure_kraft_cluster``: as :data:`SECURE_CLUSTER_SECURITY` without
ZooKeeper's TLS port. ZooKeeper is the same server in both flavours, so ZooKeeper TLS is
tested on ``secure_cluster``; leaving it out here spares the KRaft cluster's start the Netty
server and a cold TLS handshake (about a second of CPU)."""

_CLUSTER_FIXTURES = {"zookeeper": "zk_kafka_cluster", "kraft": "kraft_cluster"}
"""Flavour -> the session fixture holding that flavour's cluster."""
_SECURE_FIXTURES = {"zookeeper": "secure_cluster", "kraft": "secure_kraft_cluster"}
"""Flavour -> the session fixture holding that flavour's secured cluster."""
_ANY_CLUSTER_FIXTURE = "any_cluster"
_ANY_SECURE_FIXTURE = "any_secure_cluster"
_ANY_FIXTURES = {_ANY_CLUSTER_FIXTURE: _CLUSTER_FIXTURES, _ANY_SECURE_FIXTURE: _SECURE_FIXTURES}
"""Parametrized fixture -> flavour -> the session fixture it stands for."""
_CLUSTERS_KEY = pytest.StashKey[dict[str, LocalCluster]]()
"""Session fixture name -> the cluster it started."""
_SPARK_FIXTURE = "spark_standalone_cluster"
_SPARK_KEY = pytest.StashKey[SparkStandaloneCluster]()
_ZK_CLIENT_START_S = 30.0
_ZK_CLIENT_CLOSE_S = 10.0
_T = TypeVar("_T")

_async_fixture: Callable[..., Any]
try:
    import pytest_asyncio

    _async_fixture = pytest_asyncio.fixture
except ImportError:  # pragma: no cover - pytest then reports the async fixture as unsupported
    _async_fixture = pytest.fixture


def _run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to completion in a private event loop (like ``asyncio.run``).

    Unlike ``asyncio.run`` it never touches the thread's current event loop, which a
    session-scoped pytest-asyncio loop may be using.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        close_loop(loop, shutdown_executor=True)


def _broker_count() -> int:
    raw = os.environ.get(BROKERS_ENV, "").strip()
    if not raw:
        return 1
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count < 1:
        raise pytest.UsageError(f"{BROKERS_ENV} must be a positive integer, got {raw!r}")
    return count


def _legal_name(prefix: str, request: pytest.FixtureRequest) -> str:
    """``<prefix>-<test name, sanitized>-<12 hex digits>``: a legal, unique Kafka name.

    Only ``[a-zA-Z0-9-]`` is used: legal for topics (no ``.``/``_`` metric collisions),
    group ids and ZooKeeper path components.
    """
    test = re.sub(r"[^a-zA-Z0-9-]+", "-", request.node.name).strip("-")[:40]
    return f"{prefix}-{test}-{uuid.uuid4().hex[:12]}"


def _session_cluster(
    request: pytest.FixtureRequest,
    flavour: str,
    fixture: str,
    security: ClusterSecurity | None = None,
) -> Iterator[LocalCluster]:
    """Start a cluster of ``flavour``, record it (under the name of the session ``fixture``
    holding it) for failure reports, stop it afterwards."""
    cluster = LocalCluster(brokers=_broker_count(), flavour=flavour, security=security)
    request.config.stash.setdefault(_CLUSTERS_KEY, {})[fixture] = cluster
    try:
        _run(cluster.start())
        yield cluster
    finally:
        _run(cluster.stop())


@pytest.fixture(scope="session")
def zk_kafka_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A running local ZooKeeper + Kafka 3.9 (ZooKeeper mode) cluster for the whole session.

    Started on first use (the jars are provisioned if needed) and stopped at the end of
    the session. Synchronous on purpose: it starts and stops the cluster in private event
    loops, so tests with any ``loop_scope`` can use it.

    Yields:
        The started :class:`~aiozkconsumer.testing.LocalCluster` (``flavour="zookeeper"``).

    Raises:
        ProvisioningError: if Java or Maven is missing or the jars cannot be fetched.
        ClusterStartError: if a server does not come up.
    """
    yield from _session_cluster(request, "zookeeper", _CLUSTER_FIXTURES["zookeeper"])


@pytest.fixture(scope="session")
def kraft_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A running local ZooKeeper + Kafka 4.x (KRaft) cluster for the whole session.

    The brokers do not use ZooKeeper (brokers, leaders and partitions are known from Kafka
    metadata only); ZooKeeper runs for the consumers (``zookeeper_connect``). Started on
    first use (the jars of both Kafka versions are provisioned if needed: ZooKeeper runs
    from the 3.9 ones) and stopped at the end of the session; synchronous, like
    ``zk_kafka_cluster``.

    Yields:
        The started :class:`~aiozkconsumer.testing.LocalCluster` (``flavour="kraft"``).

    Raises:
        ProvisioningError: if Java or Maven is missing or the jars cannot be fetched.
        ClusterStartError: if a server does not come up.
    """
    yield from _session_cluster(request, "kraft", _CLUSTER_FIXTURES["kraft"])


@pytest.fixture(scope="session")
def secure_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A running Kafka 3.9 (ZooKeeper mode) cluster with secured listeners, for the session.

    A cluster of its own (not ``zk_kafka_cluster``), with :data:`SECURE_CLUSTER_SECURITY`:
    next to ``PLAINTEXT``, the listeners ``SSL``, ``MTLS``, ``SASL_SSL`` and
    ``SASL_PLAINTEXT`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER) and
    ``SSL_WRONG_HOST``; users ``alice`` and ``admin``; ZooKeeper's TLS port
    (``zookeeper_secure_connect``); the brokers' request logs (``principals_seen``).
    Started on first use, stopped at the end of the session; synchronous, like
    ``zk_kafka_cluster``.

    Yields:
        The started :class:`~aiozkconsumer.testing.LocalCluster`; its ``security``,
        ``bootstrap_servers_for(listener)``, ``client_properties(listener, mechanism)`` and
        ``zookeeper_client_properties()`` give what clients need.

    Raises:
        ProvisioningError: if Java or Maven is missing or the jars cannot be fetched.
        ClusterStartError: if a server does not come up.
    """
    yield from _session_cluster(
        request, "zookeeper", _SECURE_FIXTURES["zookeeper"], SECURE_CLUSTER_SECURITY
    )


@pytest.fixture(scope="session")
def secure_kraft_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A running Kafka 4.x (KRaft) cluster with secured listeners, for the session.

    As ``secure_cluster``, in the KRaft flavour (SCRAM users formatted into the metadata),
    with :data:`SECURE_KRAFT_CLUSTER_SECURITY`: ZooKeeper, which runs for the consumers, has
    no TLS port here (use ``secure_cluster`` for ZooKeeper TLS).

    Yields:
        The started :class:`~aiozkconsumer.testing.LocalCluster` (``flavour="kraft"``).

    Raises:
        ProvisioningError: if Java or Maven is missing or the jars cannot be fetched.
        ClusterStartError: if a server does not come up.
    """
    yield from _session_cluster(
        request, "kraft", _SECURE_FIXTURES["kraft"], SECURE_KRAFT_CLUSTER_SECURITY
    )


@pytest.fixture(scope="session")
def spark_standalone_cluster(request: pytest.FixtureRequest) -> Iterator[SparkStandaloneCluster]:
    """A running Spark standalone cluster (a master and two workers) for the whole session.

    Opt-in: started the first time a test asks for it, stopped at the end of the session
    (no process left behind, as with the Kafka clusters). Each worker offers 1 core and
    512 MiB, so an application gets two executors, each a JVM of its own on a worker, running
    this interpreter's Python (``spark.pyspark.python``). Synchronous, like
    ``zk_kafka_cluster``.

    Yields:
        The started :class:`~aiozkconsumer.testing.spark_cluster.SparkStandaloneCluster`.

    Raises:
        LocalClusterError: if PySpark or Java is missing.
        ClusterStartError: if the master or a worker does not come up.
    """
    cluster = SparkStandaloneCluster(workers=2, worker_cores=1, worker_memory="512m")
    request.config.stash[_SPARK_KEY] = cluster
    try:
        _run(cluster.start())
        yield cluster
    finally:
        _run(cluster.stop())


@pytest.fixture(params=list(FLAVOURS), ids=["zk", "kraft"])
def any_cluster(request: pytest.FixtureRequest) -> LocalCluster:
    """Each session cluster in turn: the test runs once per flavour (ids ``zk``, ``kraft``).

    Only the cluster of the running parameter is started (lazily, as the session fixture
    ``zk_kafka_cluster`` or ``kraft_cluster``). To run on one flavour only, use
    ``@pytest.mark.parametrize("any_cluster", ["kraft"], indirect=True)``.

    Returns:
        The started :class:`~aiozkconsumer.testing.LocalCluster` of the flavour
        ``request.param`` (``"zookeeper"`` or ``"kraft"``).

    Raises:
        pytest.UsageError: if parametrized indirectly with an unknown flavour.
    """
    flavour = request.param
    if flavour not in _CLUSTER_FIXTURES:
        raise pytest.UsageError(
            f"any_cluster: unknown flavour {flavour!r}; expected one of {', '.join(FLAVOURS)}"
        )
    cluster: LocalCluster = request.getfixturevalue(_CLUSTER_FIXTURES[flavour])
    return cluster


@pytest.fixture(params=list(FLAVOURS), ids=["zk", "kraft"])
def any_secure_cluster(request: pytest.FixtureRequest) -> LocalCluster:
    """Each secured session cluster in turn (ids ``zk``, ``kraft``), as ``any_cluster``.

    Only the cluster of the running parameter is started (``secure_cluster`` or
    ``secure_kraft_cluster``). Narrow it with
    ``@pytest.mark.parametrize("any_secure_cluster", ["kraft"], indirect=True)``.

    Returns:
        The started secured :class:`~aiozkconsumer.testing.LocalCluster` of the flavour
        ``request.param``.

    Raises:
        pytest.UsageError: if parametrized indirectly with an unknown flavour.
    """
    flavour = request.param
    if flavour not in _SECURE_FIXTURES:
        raise pytest.UsageError(
            f"any_secure_cluster: unknown flavour {flavour!r}; expected one of "
            f"{', '.join(FLAVOURS)}"
        )
    cluster: LocalCluster = request.getfixturevalue(_SECURE_FIXTURES[flavour])
    return cluster


@pytest.fixture
def unique_group_id(request: pytest.FixtureRequest) -> str:
    """A fresh consumer group id, e.g. ``"test-test-rebalance-3f2a9c0d41e7"``."""
    return _legal_name("test", request)


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    """A fresh, legal topic name (not created), e.g. ``"topic-test-fetch-9b1c2d3e4f50"``."""
    return _legal_name("topic", request)


@contextlib.asynccontextmanager
async def _open_zk_client(cluster: LocalCluster) -> AsyncIterator[Any]:
    """Yield a started aiozk client on the cluster's ZooKeeper; close it (bounded) after."""
    zk = ZKClient(cluster.zookeeper_connect, session_timeout=10)
    try:
        async with asyncio.timeout(_ZK_CLIENT_START_S):
            await zk.start()
        yield zk
    finally:
        await close_raw(zk, _ZK_CLIENT_CLOSE_S)


async def _zk_client(zk_kafka_cluster: LocalCluster) -> AsyncIterator[Any]:
    """A started aiozk ``ZKClient`` on ``zk_kafka_cluster``'s ZooKeeper, closed after the test.

    Created in the event loop of pytest-asyncio's default fixture loop scope
    (``asyncio_default_fixture_loop_scope``, normally the test's own loop); a test running
    in another loop scope should open its own client. Closing is bounded (10 s) and forced
    if the session is not connected (e.g. ZooKeeper was stopped).

    Yields:
        The connected ``aiozk.ZKClient`` (session timeout 10 s).
    """
    async with _open_zk_client(zk_kafka_cluster) as zk:
        yield zk


async def _any_zk_client(any_cluster: LocalCluster) -> AsyncIterator[Any]:
    """A started aiozk ``ZKClient`` on ``any_cluster``'s ZooKeeper, closed after the test.

    As ``zk_client``, for tests parametrized over both flavours; in the KRaft flavour this
    ZooKeeper holds the consumer groups only (no ``/brokers`` tree).

    Yields:
        The connected ``aiozk.ZKClient`` (session timeout 10 s).
    """
    async with _open_zk_client(any_cluster) as zk:
        yield zk


zk_client = _async_fixture(_zk_client, name="zk_client")
any_zk_client = _async_fixture(_any_zk_client, name="any_zk_client")


_FIXTURES = frozenset({*_CLUSTER_FIXTURES.values(), *_SECURE_FIXTURES.values(), *_ANY_FIXTURES})
_ASYNC_FIXTURES = frozenset({"zk_client", "any_zk_client"})


def _asyncio_problem(item: pytest.Item) -> str | None:
    """Why pytest-asyncio will not run ``item`` with this plugin's fixtures, or ``None``."""
    names = set(getattr(item, "fixturenames", ()))
    if not names & (_FIXTURES | _ASYNC_FIXTURES):
        return None
    obj = getattr(item, "obj", None)
    is_async = inspect.iscoroutinefunction(obj) or inspect.isasyncgenfunction(obj)
    if not is_async and not names & _ASYNC_FIXTURES:
        return None  # a plain test of the synchronous cluster fixtures needs no event loop
    if is_async and item.get_closest_marker("anyio") is not None:
        return None  # anyio's pytest plugin runs it
    config = item.config
    if not config.pluginmanager.hasplugin("asyncio"):
        return "pytest-asyncio is not installed (or is disabled with -p no:asyncio)"
    if not is_async or item.get_closest_marker("asyncio") is not None:
        return None
    mode = config.getoption("asyncio_mode", None) or config.getini("asyncio_mode")
    if str(mode) != "auto":
        return (
            f"asyncio_mode is {str(mode)!r}, and {item.name} is not marked "
            "@pytest.mark.asyncio, so pytest-asyncio would not run it"
        )
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a test whose aiozkconsumer fixtures cannot work, with :data:`ASYNCIO_HINT`.

    Runs before the test's fixtures are set up, so no server is started for it.
    """
    reason = _asyncio_problem(item)
    if reason is not None:
        pytest.fail(ASYNCIO_HINT.format(reason=reason), pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the server logs to the report of a failed test that used a session cluster.

    Also records the failure on the cluster, so its work directory (logs, data) is kept.
    """
    report = yield
    if report.failed:
        for cluster in _clusters_used(item):
            cluster.mark_failed()
            try:
                header = f"work dir (kept): {cluster.work_dir}\n"
            except LocalClusterError:  # never started: nothing to show
                continue
            report.sections.append((_log_section(cluster), header + cluster.log_tail()))
        spark_cluster = item.config.stash.get(_SPARK_KEY, None)
        if spark_cluster is not None and _SPARK_FIXTURE in getattr(item, "fixturenames", ()):
            spark_cluster.mark_failed()
            with contextlib.suppress(LocalClusterError):
                header = f"work dir (kept): {spark_cluster.work_dir}\n"
                report.sections.append((SPARK_LOG_SECTION, header + spark_cluster.log_tail(40)))
    return report


def _log_section(cluster: LocalCluster) -> str:
    """The report section title of a cluster's logs."""
    qualifiers = " ".join(
        word for word, applies in (("secure", cluster.secured), ("kraft", cluster.kraft)) if applies
    )
    return f"{LOG_SECTION} ({qualifiers})" if qualifiers else LOG_SECTION


def _clusters_used(item: pytest.Item) -> list[LocalCluster]:
    """The session clusters a test requested (directly, or through ``any_cluster`` or
    ``any_secure_cluster``)."""
    names = set(getattr(item, "fixturenames", ()))
    wanted = set(names)
    callspec = getattr(item, "callspec", None)
    for any_fixture, by_flavour in _ANY_FIXTURES.items():
        if any_fixture in names and callspec is not None:
            param = callspec.params.get(any_fixture)
            if isinstance(param, str) and param in by_flavour:
                wanted.add(by_flavour[param])
    started = item.config.stash.get(_CLUSTERS_KEY, {})
    return [cluster for fixture, cluster in started.items() if fixture in wanted]
