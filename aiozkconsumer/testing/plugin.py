"""pytest plugin: a real ZooKeeper + Kafka cluster and helpers for pytest-asyncio suites.

Registered through the ``pytest11`` entry point ``aiozkconsumer`` (active once the package is
installed; otherwise pass ``-p aiozkconsumer.testing.plugin``). Fixtures:

- ``zk_kafka_cluster`` (session): a started :class:`~aiozkconsumer.testing.LocalCluster`.
  Synchronous (started and stopped in private event loops), so it works with any
  ``loop_scope`` the tests use. ``AIOZKCONSUMER_BROKERS`` sets the broker count (default 1).
- ``zk_client`` (function, async): a started aiozk ``ZKClient`` on the cluster, closed
  afterwards within a time limit. Needs pytest-asyncio.
- ``unique_group_id`` / ``unique_topic`` (function): fresh legal names derived from the test.

When a test that uses the cluster fails, its server logs are appended to the failure report
(section "aiozkconsumer server logs") and the cluster's work directory is kept.
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterator
from typing import Any, TypeVar

import pytest
from aiozk import ZKClient

from aiozkconsumer.testing.cluster import LocalCluster, LocalClusterError, _close_zk

__all__ = [
    "BROKERS_ENV",
    "LOG_SECTION",
    "pytest_runtest_makereport",
    "unique_group_id",
    "unique_topic",
    "zk_client",
    "zk_kafka_cluster",
]

BROKERS_ENV = "AIOZKCONSUMER_BROKERS"
"""Environment variable: number of brokers of the session cluster (default 1)."""

LOG_SECTION = "aiozkconsumer server logs"
"""Title of the report section holding the server log tails of a failed test."""

_CLUSTER_FIXTURE = "zk_kafka_cluster"
_CLUSTER_KEY = pytest.StashKey[LocalCluster]()
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
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


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


@pytest.fixture(scope="session")
def zk_kafka_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A running local ZooKeeper + Kafka 3.9 cluster shared by the whole session.

    Started on first use (the jars are provisioned if needed) and stopped at the end of
    the session. Synchronous on purpose: it starts and stops the cluster in private event
    loops, so tests with any ``loop_scope`` can use it.

    Yields:
        The started :class:`~aiozkconsumer.testing.LocalCluster`.

    Raises:
        ProvisioningError: if Java or Maven is missing or the jars cannot be fetched.
        ClusterStartError: if a server does not come up.
    """
    cluster = LocalCluster(brokers=_broker_count())
    request.config.stash[_CLUSTER_KEY] = cluster
    try:
        _run(cluster.start())
        yield cluster
    finally:
        _run(cluster.stop())


@pytest.fixture
def unique_group_id(request: pytest.FixtureRequest) -> str:
    """A fresh consumer group id, e.g. ``"test-test-rebalance-3f2a9c0d41e7"``."""
    return _legal_name("test", request)


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    """A fresh, legal topic name (not created), e.g. ``"topic-test-fetch-9b1c2d3e4f50"``."""
    return _legal_name("topic", request)


async def _zk_client(zk_kafka_cluster: LocalCluster) -> AsyncIterator[Any]:
    """A started aiozk ``ZKClient`` on the session cluster, closed after the test.

    Created in the event loop of pytest-asyncio's default fixture loop scope
    (``asyncio_default_fixture_loop_scope``, normally the test's own loop); a test running
    in another loop scope should open its own client. Closing is bounded (10 s) and forced
    if the session is not connected (e.g. ZooKeeper was stopped).

    Yields:
        The connected ``aiozk.ZKClient`` (session timeout 10 s).
    """
    zk = ZKClient(zk_kafka_cluster.zookeeper_connect, session_timeout=10)
    try:
        async with asyncio.timeout(_ZK_CLIENT_START_S):
            await zk.start()
        yield zk
    finally:
        await _close_zk(zk, _ZK_CLIENT_CLOSE_S)


zk_client = _async_fixture(_zk_client, name="zk_client")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the server logs to the report of a failed test that used the cluster.

    Also records the failure on the cluster, so its work directory (logs, data) is kept.
    """
    report = yield
    if report.failed and _CLUSTER_FIXTURE in getattr(item, "fixturenames", ()):
        cluster = item.config.stash.get(_CLUSTER_KEY, None)
        if cluster is not None:
            cluster.mark_failed()
            try:
                header = f"work dir (kept): {cluster.work_dir}\n"
            except LocalClusterError:  # never started: nothing to show
                return report
            report.sections.append((LOG_SECTION, header + cluster.log_tail()))
    return report
