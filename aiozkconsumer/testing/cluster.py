"""A real local ZooKeeper 3.8 + Kafka cluster for tests and demos, in two flavours.

:class:`LocalCluster` provisions the jars (:mod:`aiozkconsumer.testing.provision`), starts one
ZooKeeper and ``brokers`` Kafka brokers as ``java`` child processes on free loopback ports,
waits until they really serve, and stops them without leaving a process behind. It also
carries the fault tools the reliability tests use: kill, pause and restart a broker, stop and
start ZooKeeper, and expire a ZooKeeper session for real.

Flavours (the ZooKeeper server, which the consumer group uses, runs in both):

- ``"zookeeper"`` (default): Kafka 3.9 brokers in ZooKeeper mode. They register under
  ``/brokers`` in ZooKeeper, exactly as the old consumer expects. Ready when ZooKeeper answers
  ``ruok`` and every broker is registered under ``/brokers/ids`` and answers a metadata
  request.
- ``"kraft"``: Kafka 4.x brokers in KRaft mode; they never talk to ZooKeeper (no ``/brokers``
  tree), so brokers, leaders and partitions are known only from Kafka metadata. Broker 0 is
  a combined ``broker,controller`` node (a single-voter, dynamic metadata quorum formatted
  with ``kafka-storage format --standalone``); the other brokers are broker-only nodes.
  Ready when every broker's metadata response lists all running brokers.

The cluster is usable across event loops: processes are plain :class:`subprocess.Popen`
objects and every aiokafka/aiozk client is created, used and closed within one call, so a
cluster started with ``asyncio.run(cluster.start())`` in a synchronous session fixture can
be used from each test's own loop. Nothing the instance keeps is bound to a loop.

Server logs go to ``<work_dir>/logs/<name>.log`` (log4j output and the JVM's own stdout/
stderr, both appended); :meth:`LocalCluster.log_tail` returns their tails for failure reports.

Proxied links (``proxy_links=n``): consumers may reach ZooKeeper and every broker through
fault-injecting :class:`~aiozkconsumer.testing.proxy.TcpProxy` instances, one set per
*link* (:class:`ProxyLink`), so that one consumer's links can be cut while the others' carry.
Brokers then have a direct ``INTERNAL`` listener (inter-broker and controller traffic, and
everything the cluster itself does: :attr:`LocalCluster.bootstrap_servers`, produce, topic
creation, readiness), a ``PLAINTEXT`` listener advertised at link 0's proxy (what a client
that finds brokers in ZooKeeper's ``/brokers/ids`` connects to), and a ``LINK<k>`` listener
per further link, advertised at link ``k``'s proxy (a client bootstrapped from
:attr:`ProxyLink.bootstrap_servers` is told the addresses of its own link's proxies). The
proxies run in an event loop of their own, in a daemon thread, so that they keep forwarding
whatever the caller's loop does, and can be driven from any loop.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import enum
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import TopicPartition as KafkaTopicPartition
from aiozk import ZKClient
from aiozk import exc as zk_exc
from aiozk.states import States

from aiozkconsumer._loops import close_loop
from aiozkconsumer.errors import (
    BrokerNotAvailableError,
    ConsumerError,
    UnknownTopicError,
    ZookeeperConnectionError,
    ZookeeperError,
    ZookeeperSessionExpiredError,
)
from aiozkconsumer.testing.provision import FLAVOURS, provision_kafka, require_tools
from aiozkconsumer.testing.proxy import (
    Direction,
    FaultMode,
    ProxyError,
    ProxyStatistics,
    TcpProxy,
)

__all__ = [
    "ClusterStartError",
    "ClusterState",
    "LinkTarget",
    "LocalCluster",
    "LocalClusterError",
    "ProduceError",
    "ProxyLink",
]

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"
_CREATE_TOPIC_ATTEMPTS = 4
_CREATE_TOPIC_BACKOFF_S = 1.0
_CLIENT_ID = "aiozkconsumer-testing"
_UNKNOWN_TOPIC_OR_PARTITION = 3
# aiokafka's producer sends one request per broker at a time, one batch per partition in
# it: big batches are what makes bulk produce fast. Kafka's default message.max.bytes
# (1 MiB + 12) bounds a batch.
_BATCH_BYTES = 512 * 1024
_REQUEST_TIMEOUT_S = 30.0
_CLOSE_TIMEOUT_S = 10.0
_POLL_INTERVAL_S = 0.1
_STOP_GRACE_S = 15.0
# The brokers' ZooKeeper session timeout. Kafka's default (18 s) is capped by ZooKeeper's
# maxSessionTimeout (20 x tickTime); 6 s keeps "restart a SIGKILLed broker" (which has to
# wait for the dead broker's registration to expire) short.
_BROKER_ZK_SESSION_TIMEOUT_MS = 6000
# KRaft's equivalent: the controller fences a broker that has not heartbeated for this long
# (default 9 s). A restarted broker cannot register again before its old session expires,
# even after a clean shutdown, and a controlled shutdown waits for a heartbeat round trip
# (default interval 2 s): short values keep restart_broker() and stop() short.
_KRAFT_BROKER_SESSION_TIMEOUT_MS = 4000
_KRAFT_BROKER_HEARTBEAT_INTERVAL_MS = 500
# KRaft: the node that is also the (single) metadata quorum controller.
_KRAFT_CONTROLLER_ID = 0

_ZK_JVM = ["-Xms64m", "-Xmx256m"]
_BROKER_JVM = ["-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]
_COMMON_JVM = ["-XX:-UsePerfData", "-Djava.awt.headless=true"]
# Short-lived tools (kafka-storage format): C1 only starts faster.
_TOOL_JVM = ["-Xms64m", "-Xmx256m", "-XX:TieredStopAtLevel=1"]


class LocalClusterError(ConsumerError):
    """An operation on a :class:`LocalCluster` failed (or it is not running)."""


class ClusterStartError(LocalClusterError):
    """A server of a :class:`LocalCluster` did not come up.

    Raised when a ``java`` process exits during startup or is not ready within
    ``startup_timeout_s``. The message names the server, the work directory (kept for
    inspection) and ends with the tail of that server's log.

    Attributes:
        server: the server's name (``"zookeeper"``, ``"broker-0"``).
        log_tail: the last lines of its log.
    """

    def __init__(self, server: str, reason: str, log_tail: str, work_dir: Path | None) -> None:
        where = f" (work dir kept: {work_dir})" if work_dir is not None else ""
        super().__init__(
            f"{server} did not start: {reason}{where}\n--- last lines of the {server} log ---\n"
            f"{log_tail}"
        )
        self.server = server
        self.log_tail = log_tail


class ProduceError(LocalClusterError):
    """Some records given to :meth:`LocalCluster.produce` were not acknowledged.

    Attributes:
        acknowledged: how many records the brokers did acknowledge.
    """

    def __init__(self, message: str, acknowledged: int) -> None:
        super().__init__(message)
        self.acknowledged = acknowledged


class ClusterState(enum.Enum):
    """Lifecycle of a :class:`LocalCluster`.

    - ``NEW``: built, nothing started; only :meth:`LocalCluster.start` is allowed.
    - ``STARTING``: processes are being launched; on failure everything started is killed
      and the state becomes ``STOPPED``.
    - ``RUNNING``: every server answered; all operations are allowed (individual servers
      may have been killed or paused with the fault tools).
    - ``STOPPING`` / ``STOPPED``: :meth:`LocalCluster.stop` is under way / done; no process
      is left. A stopped cluster cannot be started again.
    """

    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


# --------------------------------------------------------------------------------------------
# Child processes: die with us.

_PR_SET_PDEATHSIG = 1
_live_processes: set[subprocess.Popen[bytes]] = set()
_live_lock = threading.Lock()


def _load_libc() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:  # not Linux/glibc: rely on atexit alone
        return None


_libc = _load_libc()


def _make_preexec() -> Callable[[], None] | None:
    """Return a ``preexec_fn`` making the child get SIGKILL when this thread exits.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child exits, so it is only
    set for processes started from the main thread (a worker thread would take the servers
    down with it); the ``atexit`` handler covers the rest.
    """
    if _libc is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()
    libc = _libc

    def _die_with_parent() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died between fork() and prctl(): then nobody would kill us.
        if os.getppid() != parent:
            os._exit(1)

    return _die_with_parent


def _kill_leftovers() -> None:
    """``atexit`` hook: SIGKILL every server process still running."""
    with _live_lock:
        procs = list(_live_processes)
        _live_processes.clear()
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            proc.wait(timeout=5)


atexit.register(_kill_leftovers)


class _Server:
    """One ``java`` server process (ZooKeeper or a broker), restartable on the same port."""

    def __init__(self, name: str, port: int, cmd: list[str], log_file: Path) -> None:
        self.name = name
        self.port = port
        self.cmd = cmd
        self.log_file = log_file
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def address(self) -> str:
        return f"{_HOST}:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> str:
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        if code is not None:
            return f"exited {code}"
        return "paused" if self.paused else "up"

    def spawn(self) -> None:
        if self.alive():
            raise LocalClusterError(f"{self.name} is already running")
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as out:
            out.write(f"\n==== {time.strftime('%H:%M:%S')} starting {self.name}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                self.cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.log_file.parent,
                start_new_session=True,
                preexec_fn=_make_preexec(),
            )
        with _live_lock:
            _live_processes.add(proc)
        self.proc = proc
        self.paused = False
        log.debug("started %s (pid %d): %s", self.name, proc.pid, " ".join(self.cmd))

    def send_signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def kill_now(self) -> None:
        """SIGKILL and reap (a SIGKILLed process is gone within milliseconds)."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.paused = False
        with _live_lock:
            _live_processes.discard(proc)

    def reaped(self) -> bool:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            if proc is not None:
                with _live_lock:
                    _live_processes.discard(proc)
            self.paused = False
            return True
        return False


# --------------------------------------------------------------------------------------------
# Small async helpers; every client they create is closed before they return.


async def _bounded_close(closing: Awaitable[object], *, time_limit: float, what: str) -> None:
    """Await a library's close coroutine with a time limit, even under cancellation."""
    task = asyncio.ensure_future(closing)
    try:
        await asyncio.wait_for(asyncio.shield(task), time_limit)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, time_limit)
        raise
    except Exception as exc:  # a failed close must not hide the caller's outcome
        log.debug("closing %s failed: %r", what, exc)
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


async def _force_close_zk(zk: Any) -> None:
    """Tear an aiozk client down when its ``close()`` cannot (e.g. ZooKeeper is gone).

    ``Session.close`` first sends a CloseRequest, which waits for a connected state; with the
    server down it times out before cancelling the heartbeat and repair loop.
    """
    session = zk.session
    session.closing = True
    if session.heartbeat_handle is not None:
        session.heartbeat_handle.cancel()
        session.heartbeat_handle = None
    conn = session.conn
    tasks = [
        t
        for t in (
            session.repair_loop_task,
            session.heartbeat_task,
            getattr(conn, "read_loop_task", None),
        )
        if t is not None and not t.done()
    ]
    for task in tasks:
        task.cancel()
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.abort()
        writer = getattr(conn, "writer", None)
        if writer is not None:
            writer.close()
    if tasks:
        await asyncio.wait(tasks, timeout=_CLOSE_TIMEOUT_S)
    session.started = False


async def _close_zk(zk: Any, time_limit: float = _CLOSE_TIMEOUT_S) -> None:
    """Close an aiozk client within ``time_limit`` seconds, forcing it if need be."""
    session = zk.session
    if session.started and session.state.current_state != States.CONNECTED:
        # A graceful close would wait for a connection that may never come back.
        await _force_close_zk(zk)
        return
    try:
        await asyncio.wait_for(zk.close(), time_limit)
    except Exception as exc:  # ZooKeeper down or already gone
        log.debug("aiozk close failed (%r); forcing it", exc)
        await _force_close_zk(zk)
    except asyncio.CancelledError:
        await _force_close_zk(zk)
        raise


@contextlib.asynccontextmanager
async def _zk_session(
    connect: str, *, time_limit: float, session_timeout: float = 10.0
) -> AsyncIterator[Any]:
    """Yield a started aiozk ``ZKClient``; close it (bounded) afterwards."""
    zk = ZKClient(connect, session_timeout=session_timeout)
    try:
        try:
            async with asyncio.timeout(time_limit):
                await zk.start()
        except TimeoutError as exc:
            raise ZookeeperConnectionError(
                f"no ZooKeeper session with {connect} within {time_limit:.1f} s"
            ) from exc
        try:
            yield zk
        except zk_exc.ZKError as exc:  # translated at the boundary: no aiozk error escapes
            raise ZookeeperError(f"ZooKeeper request failed: {exc!r}") from exc
    finally:
        await _close_zk(zk)


@contextlib.asynccontextmanager
async def _kafka_client(bootstrap: str, *, time_limit: float) -> AsyncIterator[Any]:
    """Yield a bootstrapped ``AIOKafkaClient``; close it (bounded) afterwards."""
    client = AIOKafkaClient(
        bootstrap_servers=bootstrap,
        client_id=_CLIENT_ID,
        request_timeout_ms=max(1000, int(time_limit * 1000)),
    )
    try:
        try:
            await client.bootstrap()
        except kafka_errors.KafkaError as exc:
            raise BrokerNotAvailableError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
        yield client
    finally:
        await _bounded_close(client.close(), time_limit=_CLOSE_TIMEOUT_S, what="AIOKafkaClient")


async def _zk_four_letter_word(port: int, word: bytes, time_limit: float) -> bytes:
    """Send a ZooKeeper four-letter command; return the answer (b"" if unreachable)."""
    try:
        async with asyncio.timeout(time_limit):
            reader, writer = await asyncio.open_connection(_HOST, port)
            try:
                writer.write(word)
                await writer.drain()
                return await reader.read(4096)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return b""


async def _port_open(port: int, time_limit: float) -> bool:
    """True if something accepts TCP connections on the loopback port."""
    try:
        async with asyncio.timeout(time_limit):
            _, writer = await asyncio.open_connection(_HOST, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _topic_metadata(
    client: Any, node_id: int, topic: str, time_limit: float
) -> dict[str, Any]:
    """Ask one broker for a topic's metadata; return the topic's entry as a dict."""
    async with asyncio.timeout(time_limit):
        response = await client.send(node_id, MetadataRequest([topic], False))
    for entry in response.to_object()["topics"]:
        if entry["topic"] == topic:
            return dict(entry)
    return {"topic": topic, "error_code": _UNKNOWN_TOPIC_OR_PARTITION, "partitions": []}


_COMMON_BROKER_PROPERTIES: dict[str, object] = {
    "num.partitions": 1,
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 4,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 4,
    "group.initial.rebalance.delay.ms": 0,
    "auto.create.topics.enable": "false",
    # 2-core machines: fewer threads than the defaults (3 network, 8 I/O).
    "num.network.threads": 2,
    "num.io.threads": 4,
    "num.recovery.threads.per.data.dir": 1,
}
"""``server.properties`` entries shared by both flavours (a single-replica test cluster)."""


def _free_ports(count: int) -> list[int]:
    """Pick ``count`` distinct free loopback ports (bind to port 0, read, release)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((_HOST, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file (reads at most the last 1 MiB)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 1024 * 1024))
            data = f.read()
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:]) if lines > 0 else ""


def _properties(values: Mapping[str, object]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


def _log4j_properties(log_file: Path) -> str:
    return _properties(
        {
            "log4j.rootLogger": "INFO, file",
            "log4j.appender.file": "org.apache.log4j.FileAppender",
            "log4j.appender.file.File": log_file,
            "log4j.appender.file.Append": "true",
            "log4j.appender.file.layout": "org.apache.log4j.PatternLayout",
            "log4j.appender.file.layout.ConversionPattern": "[%d] %p %m (%c)%n",
            "log4j.logger.kafka.request.logger": "WARN",
            "log4j.logger.kafka.authorizer.logger": "WARN",
            "log4j.logger.org.apache.zookeeper.audit": "WARN",
        }
    )


def _log4j2_properties(log_file: Path) -> str:
    """A log4j2 configuration (Kafka 4.x) with the same output as :func:`_log4j_properties`."""
    return _properties(
        {
            "status": "warn",
            "appender.file.type": "File",
            "appender.file.name": "FILE",
            "appender.file.fileName": log_file,
            "appender.file.append": "true",
            "appender.file.layout.type": "PatternLayout",
            "appender.file.layout.pattern": "[%d] %p %m (%c)%n",
            "rootLogger.level": "INFO",
            "rootLogger.appenderRef.file.ref": "FILE",
            "logger.request.name": "kafka.request.logger",
            "logger.request.level": "WARN",
            "logger.authorizer.name": "kafka.authorizer.logger",
            "logger.authorizer.level": "WARN",
        }
    )


def _new_cluster_id() -> str:
    """A random KRaft cluster id: 16 bytes, URL-safe base64 without padding (Kafka's ``Uuid``).

    Never starts with ``-`` (the storage tool would read it as an option), as Kafka's own
    ``Uuid.randomUuid`` avoids.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def _read_cluster_id(meta_properties: Path) -> str | None:
    """The ``cluster.id`` of an already formatted log directory (None if not formatted)."""
    try:
        lines = meta_properties.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "cluster.id":
            return value.strip()
    return None


async def _all_or_cancel(coros: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run coroutines concurrently; on the first failure cancel the rest and raise it.

    (``asyncio.gather`` would leave the others running; a ``TaskGroup`` would wrap the
    error in an ``ExceptionGroup``.)
    """
    tasks = [asyncio.ensure_future(coro) for coro in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:
            if task.done() and not task.cancelled():
                exc = task.exception()
                if exc is not None:
                    raise exc
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# --------------------------------------------------------------------------------------------
# Proxied links: fault-injecting proxies between clients and the servers.

_T = TypeVar("_T")

LinkTarget = Literal["zookeeper", "brokers", "all"]
"""Which proxies of a :class:`ProxyLink` a fault applies to: the ZooKeeper one, the brokers'
ones, or all of them."""

_INTERNAL_LISTENER = "INTERNAL"
_PROXY_START_S = 10.0


def _link_listener(index: int) -> str:
    """The broker listener a link's proxies forward to: ``PLAINTEXT`` for link 0, then
    ``LINK1``, ``LINK2``, ..."""
    return "PLAINTEXT" if index == 0 else f"LINK{index}"


class _ProxyHost:
    """An event loop in a daemon thread that runs the proxies of a :class:`LocalCluster`.

    The proxies must keep forwarding while the caller's loop is busy (producing, checking a
    history) and whichever loop the caller runs in; coroutines are handed over with
    :func:`asyncio.run_coroutine_threadsafe`.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=self._main, args=(loop,), name="aiozkconsumer-proxies", daemon=True
        )
        self._loop, self._thread = loop, thread
        thread.start()

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            close_loop(loop)

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Schedule ``coro`` in the proxies' loop.

        Raises:
            ProxyError: if the loop is not running.
        """
        loop = self._loop
        if loop is None or loop.is_closed() or self._thread is None:
            coro.close()
            raise ProxyError("the proxies of this cluster are not running")
        return asyncio.run_coroutine_threadsafe(coro, loop)

    async def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` in the proxies' loop and wait for its result from the caller's loop."""
        return await asyncio.wrap_future(self.submit(coro))

    def run_sync(self, coro: Coroutine[Any, Any, _T], timeout_s: float) -> _T:
        """Run ``coro`` in the proxies' loop and block until it is done (at most ``timeout_s``)."""
        return self.submit(coro).result(timeout_s)

    def stop(self) -> None:
        """Stop the loop and join the thread (idempotent)."""
        loop, thread = self._loop, self._thread
        self._thread = None
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(_CLOSE_TIMEOUT_S)


async def _apply_mode(
    proxy: TcpProxy, mode: FaultMode, direction: Direction, delay_s: float
) -> None:
    if mode is FaultMode.BLACKHOLE:
        proxy.blackhole(direction)
    elif mode is FaultMode.DELAY:
        proxy.delay(delay_s, direction)
    elif mode is FaultMode.RESET:
        await proxy.reset()
    elif mode is FaultMode.REFUSE:
        await proxy.refuse()
    else:
        proxy.pass_through(direction)


class ProxyLink:
    """One client's way to the cluster: a proxy to ZooKeeper and one to each broker.

    Built by :class:`LocalCluster` (``proxy_links=n``), never directly. Give a client
    :attr:`zookeeper_connect` and :attr:`bootstrap_servers`: every byte it exchanges with the
    servers then crosses this link, and :meth:`cut` / :meth:`heal` cut and restore it without
    touching the other links. The proxies keep their ports for the cluster's lifetime (across
    server restarts). The methods may be awaited from any event loop.

    Attributes:
        index: the link's number, ``0 .. proxy_links - 1``.
    """

    def __init__(
        self, index: int, host: _ProxyHost, zookeeper: TcpProxy, brokers: Mapping[int, TcpProxy]
    ) -> None:
        self.index = index
        self._host = host
        self._zookeeper = zookeeper
        self._brokers = dict(brokers)

    def __repr__(self) -> str:
        modes = {name: _describe_stats(st) for name, st in self.statistics().items()}
        text = ", ".join(f"{name}={mode}" for name, mode in modes.items())
        return f"<ProxyLink {self.index} [{text}]>"

    @property
    def listener_name(self) -> str:
        """The broker listener behind this link (``PLAINTEXT`` for link 0, else ``LINK<k>``)."""
        return _link_listener(self.index)

    @property
    def zookeeper_connect(self) -> str:
        """``"127.0.0.1:<port>"`` of the link's ZooKeeper proxy (a ``zookeeper.connect``)."""
        return self._zookeeper.address

    @property
    def bootstrap_servers(self) -> str:
        """The link's broker proxies, ``"127.0.0.1:<port>,..."`` in broker id order.

        A Kafka client bootstrapped from these is told, in metadata, the addresses of this
        link's proxies: all its broker traffic crosses the link.
        """
        return ",".join(self._brokers[b].address for b in sorted(self._brokers))

    def broker_address(self, broker_id: int) -> str:
        """``"127.0.0.1:<port>"`` of the link's proxy to one broker.

        Raises:
            KeyError: if there is no such broker.
        """
        return self._brokers[broker_id].address

    def _proxies(self, target: LinkTarget) -> list[TcpProxy]:
        if target == "zookeeper":
            return [self._zookeeper]
        if target == "brokers":
            return list(self._brokers.values())
        if target == "all":
            return [self._zookeeper, *self._brokers.values()]
        raise ValueError(f"target must be 'zookeeper', 'brokers' or 'all', got {target!r}")

    async def cut(
        self,
        target: LinkTarget = "all",
        mode: FaultMode | str = FaultMode.BLACKHOLE,
        direction: Direction = "both",
        *,
        delay_s: float = 1.0,
    ) -> None:
        """Put a fault on the link (see :class:`~aiozkconsumer.testing.proxy.TcpProxy`).

        Args:
            target: ``"zookeeper"``, ``"brokers"`` or ``"all"`` (default).
            mode: ``blackhole`` (default: bytes dropped, connections stay open), ``delay``
                (``delay_s`` of latency), ``reset`` (every connection reset, new ones too) or
                ``refuse`` (connects refused); ``pass_through`` heals.
            direction: ``"up"`` (client to server), ``"down"`` or ``"both"`` (default);
                ``reset`` and ``refuse`` always cover both.
            delay_s: the latency for ``delay``, seconds.

        Raises:
            ValueError: if ``target``, ``mode``, ``direction`` or ``delay_s`` is invalid.
            ProxyError: if the cluster's proxies are not running.
        """
        fault = FaultMode(mode)
        if fault is FaultMode.DELAY and (not delay_s >= 0 or delay_s == float("inf")):
            raise ValueError(f"delay_s must be a finite number >= 0, got {delay_s!r}")
        proxies = self._proxies(target)

        async def apply() -> None:
            for proxy in proxies:
                await _apply_mode(proxy, fault, direction, delay_s)

        await self._host.run(apply())
        log.info("link %d: %s %s (%s)", self.index, target, fault.value, direction)

    async def heal(self, target: LinkTarget = "all") -> None:
        """Let bytes pass through again (both directions) and accept connections again.

        Args:
            target: ``"zookeeper"``, ``"brokers"`` or ``"all"`` (default).

        Raises:
            ValueError: if ``target`` is invalid.
            ProxyError: if the cluster's proxies are not running.
        """
        proxies = self._proxies(target)

        async def apply() -> None:
            for proxy in proxies:
                proxy.pass_through("both")

        await self._host.run(apply())
        log.info("link %d: %s healed", self.index, target)

    def statistics(self) -> dict[str, ProxyStatistics]:
        """Snapshots of the link's proxies: ``{"zookeeper": ..., "broker-<id>": ...}``.

        Read from the caller's thread (the proxies' counters are plain attributes), so the
        snapshots are only as consistent as the moment allows.
        """
        stats = {"zookeeper": self._zookeeper.statistics()}
        for broker_id in sorted(self._brokers):
            stats[f"broker-{broker_id}"] = self._brokers[broker_id].statistics()
        return stats

    def healed(self) -> bool:
        """Whether every proxy of the link passes bytes through both ways and listens."""
        return all(
            s.mode_up is FaultMode.PASS_THROUGH and s.mode_down is FaultMode.PASS_THROUGH
            for s in self.statistics().values()
        )

    def all_proxies(self) -> list[TcpProxy]:
        """Every proxy of the link (for the cluster's start and stop)."""
        return [self._zookeeper, *self._brokers.values()]


def _describe_stats(stats: ProxyStatistics) -> str:
    def one(mode: FaultMode, delay: float) -> str:
        return f"delay {delay:g}s" if mode is FaultMode.DELAY else mode.value

    up, down = one(stats.mode_up, stats.delay_up_s), one(stats.mode_down, stats.delay_down_s)
    return up if up == down else f"up {up}/down {down}"


# --------------------------------------------------------------------------------------------


class LocalCluster:
    """A local ZooKeeper + Kafka cluster of real ``java`` processes.

    Usage::

        async with LocalCluster(brokers=1) as cluster:
            await cluster.create_topic("payments", partitions=4)
            await cluster.produce("payments", [(None, b"x")] * 1000)
            ... ConsumerConfig(zookeeper_connect=cluster.zookeeper_connect, ...)

    Two flavours (see the module docstring): ``"zookeeper"`` runs Kafka 3.9 brokers in
    ZooKeeper mode; ``"kraft"`` runs Kafka 4.x brokers in KRaft mode, where broker 0 is also
    the only metadata controller (so killing or pausing broker 0 takes the metadata quorum
    down too) and the other brokers are broker-only nodes. In both, ZooKeeper runs (from the
    Kafka 3.9 jars) for the consumers: :attr:`zookeeper_connect` is the ZooKeeper the
    consumer group uses, whether or not the brokers use it.

    The work directory holds ``zookeeper/`` (zoo.cfg, data), ``broker-<id>/``
    (server.properties, log config, log dirs) and ``logs/<name>.log``. It is removed on
    :meth:`stop` unless ``keep_work_dir`` is set, a failure was recorded (:meth:`mark_failed`,
    a failed start, an exception in ``async with``), or the caller supplied ``work_dir``.

    No loop-bound object is kept between calls, so :meth:`start` may run in one event loop
    (``asyncio.run``) and the other coroutines in others. Methods are not safe to call
    concurrently with :meth:`start`/:meth:`stop` or from several threads at once.

    Args:
        brokers: number of Kafka brokers (ids ``0 .. brokers-1``), at least 1.
        cache_dir: jar cache for :func:`~aiozkconsumer.testing.provision_kafka`; default
            ``$AIOZKCONSUMER_CACHE`` or ``~/.cache/aiozkconsumer``.
        work_dir: where configs, data and logs go; default a fresh temporary directory.
            A directory given here is created if needed and never deleted.
        zk_tick_time_ms: ZooKeeper ``tickTime`` in milliseconds (default 500). Sessions may
            negotiate timeouts from 2 x to 20 x this value.
        broker_properties: extra ``server.properties`` entries for every broker; they
            override the defaults (e.g. ``{"num.partitions": "3"}``). Keys must suit the
            flavour's Kafka (no ``zookeeper.*`` or ``broker.id`` in KRaft: ``node.id``).
        keep_work_dir: keep the work directory after :meth:`stop`.
        startup_timeout_s: seconds each wait for readiness may take (ZooKeeper and brokers
            at start, a restarted server); provisioning the jars is not counted.
        flavour: ``"zookeeper"`` (default; Kafka 3.9.1 brokers in ZooKeeper mode) or
            ``"kraft"`` (Kafka 4.3.1 brokers in KRaft mode, not using ZooKeeper).
        proxy_links: number of proxied links for clients (default 0: none); see
            :attr:`links` and the module docstring. With links, the brokers advertise link
            0's proxies as their ``PLAINTEXT`` listener, while :attr:`bootstrap_servers`, the
            inter-broker traffic and the cluster's own tools go to a direct ``INTERNAL``
            listener. Listener settings in ``broker_properties`` would undo this.

    Raises:
        ValueError: if ``brokers < 1``, ``zk_tick_time_ms < 1``, ``startup_timeout_s <= 0``,
            ``proxy_links < 0`` or ``flavour`` is not ``"zookeeper"`` or ``"kraft"``.
    """

    def __init__(
        self,
        *,
        brokers: int = 1,
        cache_dir: Path | None = None,
        work_dir: Path | None = None,
        zk_tick_time_ms: int = 500,
        broker_properties: Mapping[str, str] | None = None,
        keep_work_dir: bool = False,
        startup_timeout_s: float = 90,
        flavour: str = "zookeeper",
        proxy_links: int = 0,
    ) -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {', '.join(FLAVOURS)}, got {flavour!r}")
        if brokers < 1:
            raise ValueError(f"brokers must be at least 1, got {brokers}")
        if zk_tick_time_ms < 1:
            raise ValueError(f"zk_tick_time_ms must be positive, got {zk_tick_time_ms}")
        if startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s must be positive, got {startup_timeout_s}")
        if proxy_links < 0:
            raise ValueError(f"proxy_links must be >= 0, got {proxy_links}")
        self._broker_count = brokers
        self._cache_dir = cache_dir
        self._given_work_dir = Path(work_dir) if work_dir is not None else None
        self._work_dir: Path | None = None
        self._tick_ms = zk_tick_time_ms
        self._broker_overrides = dict(broker_properties or {})
        self._keep_work_dir = keep_work_dir
        self._startup_timeout_s = float(startup_timeout_s)
        self._state = ClusterState.NEW
        self._failed = False
        self._zookeeper: _Server | None = None
        self._brokers: dict[int, _Server] = {}
        self._start_seconds: float | None = None
        self._flavour = flavour
        # KRaft only: the storage format command per broker, run before the first start.
        self._format_cmds: dict[int, list[str]] = {}
        self._link_count = proxy_links
        self._links: list[ProxyLink] = []
        self._proxy_host: _ProxyHost | None = None
        # Per broker: the real port of each link's listener (index = link).
        self._link_listener_ports: dict[int, list[int]] = {}

    # ---- description -----------------------------------------------------------------

    def __repr__(self) -> str:
        parts = [self._state.name, self._flavour]
        if self._zookeeper is not None:
            parts.append(f"zookeeper={self._zookeeper.address} ({self._zookeeper.status()})")
        for broker_id, server in self._brokers.items():
            parts.append(f"broker {broker_id}={server.address} ({server.status()})")
        if self._link_count:
            parts.append(f"{self._link_count} proxied links")
        if self._failed:
            parts.append("failed")
        if self._work_dir is not None:
            parts.append(f"work_dir={self._work_dir}")
        return f"<LocalCluster [{', '.join(parts)}]>"

    @property
    def state(self) -> ClusterState:
        """The lifecycle state (see :class:`ClusterState`)."""
        return self._state

    @property
    def flavour(self) -> str:
        """``"zookeeper"`` (Kafka 3.9, ZooKeeper mode) or ``"kraft"`` (Kafka 4.x)."""
        return self._flavour

    @property
    def kraft(self) -> bool:
        """True for the KRaft flavour: the brokers do not use ZooKeeper (no ``/brokers``)."""
        return self._flavour == "kraft"

    @property
    def failed(self) -> bool:
        """True once a failure was recorded (the work directory will be kept)."""
        return self._failed

    @property
    def start_seconds(self) -> float | None:
        """Seconds :meth:`start` took, provisioning excluded (None before it succeeded)."""
        return self._start_seconds

    @property
    def zookeeper_connect(self) -> str:
        """Connect string of the ZooKeeper the consumers use, ``"127.0.0.1:<port>"``.

        In the ZooKeeper flavour the brokers use it too; in the KRaft flavour they do not.

        Raises:
            LocalClusterError: if the cluster was never started.
        """
        return self._zk().address

    @property
    def bootstrap_servers(self) -> str:
        """Kafka bootstrap servers, ``"127.0.0.1:<port>,..."`` in broker id order.

        Always the direct path: with proxied links, these are the brokers' ``INTERNAL``
        listeners, which advertise themselves, so a client bootstrapped here (a producer
        feeding a fault test, say) never crosses a proxy.

        Raises:
            LocalClusterError: if the cluster was never started.
        """
        if not self._brokers:
            raise LocalClusterError("the cluster was not started")
        return ",".join(server.address for server in self._brokers.values())

    @property
    def links(self) -> tuple[ProxyLink, ...]:
        """The proxied links (``proxy_links`` of them; empty without), by index.

        Each carries one client's (or a group of clients') traffic to ZooKeeper
        (:attr:`ProxyLink.zookeeper_connect`) and to the brokers
        (:attr:`ProxyLink.bootstrap_servers`), and can be cut and healed on its own.

        Raises:
            LocalClusterError: if links were asked for and the cluster is not started.
        """
        if self._link_count and not self._links:
            raise LocalClusterError("the cluster's proxied links exist once it is started")
        return tuple(self._links)

    def link(self, index: int) -> ProxyLink:
        """One proxied link (see :attr:`links`).

        Raises:
            IndexError: if there is no such link.
            LocalClusterError: if the cluster is not started.
        """
        return self.links[index]

    async def heal_links(self) -> None:
        """Heal every proxied link (all proxies pass bytes through and accept connections).

        Raises:
            ProxyError: if the proxies are not running.
        """
        for link in self._links:
            await link.heal("all")

    @property
    def broker_ids(self) -> list[int]:
        """The brokers' ids (``broker.id``, or ``node.id`` in KRaft), ``[0, ..., brokers-1]``."""
        return list(range(self._broker_count))

    @property
    def work_dir(self) -> Path:
        """The work directory (configs, data, logs); still valid after a kept stop.

        Raises:
            LocalClusterError: if the cluster was never started.
        """
        if self._work_dir is None:
            raise LocalClusterError("the cluster was not started")
        return self._work_dir

    @property
    def log_files(self) -> dict[str, Path]:
        """Server name (``"zookeeper"``, ``"broker-<id>"``) -> its log file."""
        servers = [self._zookeeper, *self._brokers.values()]
        return {s.name: s.log_file for s in servers if s is not None}

    @property
    def pids(self) -> dict[str, int]:
        """Server name -> pid of its live process (servers not running are left out)."""
        servers = [self._zookeeper, *self._brokers.values()]
        return {
            s.name: s.proc.pid
            for s in servers
            if s is not None and s.proc is not None and s.proc.poll() is None
        }

    def broker_address(self, broker_id: int) -> str:
        """``"127.0.0.1:<port>"`` of one broker (its port survives restarts).

        Raises:
            KeyError: if there is no such broker (or the cluster was never started).
        """
        return self._broker(broker_id).address

    def log_tail(self, name: str | None = None, lines: int = 80) -> str:
        """The last lines of the servers' logs, for failure reports.

        Args:
            name: a key of :attr:`log_files` (``"zookeeper"``, ``"broker-0"``), or None for
                every server.
            lines: lines per server.

        Returns:
            The tails, each under a ``==== <name> (<path>) ====`` header; an empty string if
            nothing was started.

        Raises:
            KeyError: if ``name`` is not a server of this cluster.
        """
        files = self.log_files
        if name is not None:
            files = {name: files[name]}
        return "\n".join(
            f"==== {server} ({path}) ====\n{_tail(path, lines)}" for server, path in files.items()
        )

    def mark_failed(self) -> None:
        """Record a failure: :meth:`stop` will keep the work directory (logs, data)."""
        self._failed = True

    # ---- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> LocalCluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, Exception):
            self.mark_failed()
        await self.stop()

    async def start(self) -> None:
        """Provision the jars and start ZooKeeper and the brokers; wait until they serve.

        ZooKeeper is ready when it answers ``ruok`` with ``imok``. In the ZooKeeper flavour
        the brokers start once ZooKeeper serves, and are ready when each is registered under
        ``/brokers/ids`` and answers a metadata request listing every broker. In the KRaft
        flavour the brokers' log directories are formatted (``kafka-storage format``) and
        the brokers started while ZooKeeper comes up; they are ready when each answers a
        metadata request listing every broker. On any failure (or cancellation) everything
        already started is killed and the work directory is kept.

        Raises:
            ProvisioningError: if the jars cannot be provisioned or ``java`` is missing.
            ClusterStartError: if a server (or the storage format) exits early or is not
                ready within ``startup_timeout_s``; the message ends with the tail of its log.
            LocalClusterError: if the cluster was already started.
        """
        if self._state is not ClusterState.NEW:
            raise LocalClusterError(f"start() on a {self._state.name} cluster")
        self._state = ClusterState.STARTING
        try:
            # ZooKeeper always runs from the Kafka 3.9 jars (Kafka 4 has no ZooKeeper).
            zk_home = await asyncio.to_thread(provision_kafka, self._cache_dir, quiet=True)
            broker_home = zk_home
            if self.kraft:
                broker_home = await asyncio.to_thread(
                    provision_kafka, self._cache_dir, flavour="kraft", quiet=True
                )
            java = require_tools(("java",))["java"]
            began = time.monotonic()
            self._configure(java, zk_home / "libs", broker_home / "libs")
            await self._start_proxies()
            self._zk().spawn()
            if self.kraft:
                await _all_or_cancel([self._wait_zookeeper(), self._start_kraft_brokers()])
            else:
                await self._wait_zookeeper()
                for server in self._brokers.values():
                    server.spawn()
                await self._wait_brokers_ready(list(self._brokers))
        except BaseException:
            self._failed = True
            self._kill_all()
            self._stop_proxies()
            self._state = ClusterState.STOPPED
            raise
        self._start_seconds = time.monotonic() - began
        self._state = ClusterState.RUNNING
        log.info("%r started in %.1f s", self, self._start_seconds)

    async def stop(self) -> None:
        """Stop every server: SIGTERM the brokers, then ZooKeeper; SIGKILL after 15 s.

        Idempotent, and safe after a failed or partial start: no process is left behind
        whatever happens (cancellation included). Brokers whose controlled shutdown would
        only hang are SIGKILLed at once: all brokers if ZooKeeper is down (ZooKeeper
        flavour), the broker-only nodes if the controller (broker 0) is down or paused
        (KRaft flavour, where the broker-only nodes stop before the controller). Removes the
        work directory unless it is to be kept (see the class docstring).
        """
        if self._state is ClusterState.STOPPED:
            self._kill_all()
            self._stop_proxies()
            return
        self._state = ClusterState.STOPPING
        try:
            if self.kraft:
                await self._stop_kraft_brokers()
            else:
                brokers = [s for s in self._brokers.values() if s.alive()]
                if brokers and not (self._zookeeper is not None and self._zookeeper.alive()):
                    for server in brokers:
                        server.kill_now()
                await self._terminate(brokers)
            if self._zookeeper is not None:
                await self._terminate([self._zookeeper])
        finally:
            self._kill_all()
            self._stop_proxies()
            self._state = ClusterState.STOPPED
            self._remove_work_dir()

    # ---- topics and records ----------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
    ) -> None:
        """Create a topic and wait until it is usable.

        Returns once every running broker's metadata gives each partition a leader (and, in
        the ZooKeeper flavour, ``/brokers/topics/<name>`` exists in ZooKeeper).

        Args:
            name: topic name (``[a-zA-Z0-9._-]``, at most 249 characters).
            partitions: number of partitions, at least 1.
            replication_factor: replicas per partition (at most the number of brokers).
            config: topic-level configs, e.g. ``{"cleanup.policy": "compact"}``.

        Raises:
            LocalClusterError: if the cluster is not running, the broker rejects the topic
                (e.g. it already exists; the message carries Kafka's error name), or it does
                not become usable within ``startup_timeout_s``.
            BrokerNotAvailableError: if no broker can be reached.
        """
        self._require_running()
        for attempt in range(1, _CREATE_TOPIC_ATTEMPTS + 1):
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self._live_bootstrap(),
                client_id=_CLIENT_ID,
                request_timeout_ms=int(_REQUEST_TIMEOUT_S * 1000),
            )
            try:
                await admin.start()
                response = await admin.create_topics(
                    [
                        NewTopic(
                            name, partitions, replication_factor, topic_configs=dict(config or {})
                        )
                    ]
                )
            except kafka_errors.KafkaConnectionError as exc:
                raise BrokerNotAvailableError(f"cannot reach Kafka: {exc}") from exc
            except kafka_errors.KafkaError as exc:
                raise LocalClusterError(f"creating topic {name!r} failed: {exc!r}") from exc
            finally:
                await _bounded_close(
                    admin.close(), time_limit=_CLOSE_TIMEOUT_S, what="admin client"
                )
            errors = [
                (kafka_errors.for_code(int(entry[1])), entry[2] if len(entry) > 2 else "")
                for entry in response.topic_errors
                if int(entry[1]) != 0
            ]
            if attempt > 1 and errors and errors[0][0] is kafka_errors.TopicAlreadyExistsError:
                break  # an earlier attempt created it after all
            if not errors:
                break
            error, message = errors[0]
            # A controller that ZooKeeper or a broker restart has just replaced may answer
            # UNKNOWN_SERVER_ERROR or a retriable error for a moment.
            transient = error is kafka_errors.UnknownError or getattr(error, "retriable", False)
            if not transient or attempt == _CREATE_TOPIC_ATTEMPTS:
                raise LocalClusterError(
                    f"creating topic {name!r} failed: {error.__name__} {message or ''}".rstrip()
                )
            log.info("creating topic %r: %s; retrying", name, error.__name__)
            await asyncio.sleep(_CREATE_TOPIC_BACKOFF_S * attempt)
        await self._wait_topic_ready(name, partitions)

    async def produce(
        self,
        topic: str,
        records: Iterable[tuple[bytes | None, bytes]],
        *,
        partition: int | None = None,
    ) -> int:
        """Produce ``(key, value)`` records with ``acks=all`` and wait for every ack.

        Records are packed into large batches per partition and pipelined (aiokafka's
        ``create_batch``/``send_batch``), so a million small records take seconds. Without
        ``partition``, a keyed record goes where aiokafka's default partitioner sends it
        (murmur2 of the key, as the Java client) and a record without key to a random
        partition. Order is kept within a partition.

        Args:
            topic: an existing topic.
            records: ``(key, value)`` pairs, consumed once (a generator is fine).
            partition: send every record to this partition instead.

        Returns:
            The number of records acknowledged (all of them).

        Raises:
            UnknownTopicError: if the topic does not exist (or ``partition`` is not one of
                its partitions).
            ProduceError: if some batches were not acknowledged; ``acknowledged`` says how
                many records were.
            LocalClusterError: if the cluster is not running or a record is larger than a
                batch (512 KiB).
            BrokerNotAvailableError: if no broker can be reached.
        """
        self._require_running()
        async with self._producer() as producer:
            all_partitions = await self._partitions_for(producer.client, topic)
            if partition is not None:
                if partition not in all_partitions:
                    raise UnknownTopicError(topic, f"topic {topic!r} has no partition {partition}")
                fixed = partition

                def routed() -> Iterator[tuple[int, bytes | None, bytes]]:
                    for key, value in records:
                        yield fixed, key, value

            elif len(all_partitions) == 1:
                only = all_partitions[0]

                def routed() -> Iterator[tuple[int, bytes | None, bytes]]:
                    for key, value in records:
                        yield only, key, value

            else:
                partitioner = DefaultPartitioner()
                choice = random.choice

                def routed() -> Iterator[tuple[int, bytes | None, bytes]]:
                    for key, value in records:
                        if key is None:
                            yield choice(all_partitions), key, value
                        else:
                            yield partitioner(key, all_partitions, all_partitions), key, value

            return await self._send_batches(producer, topic, routed())

    async def produce_to_partitions(
        self,
        topic: str,
        records_by_partition: Mapping[int, Sequence[tuple[bytes | None, bytes]]],
    ) -> int:
        """Produce records to explicit partitions (the fastest path), ``acks=all``.

        Batches of different partitions are interleaved, so one produce request carries a
        batch for every partition of a broker. Order is kept within each partition.

        Args:
            topic: an existing topic.
            records_by_partition: partition -> its ``(key, value)`` records, in order.

        Returns:
            The number of records acknowledged (all of them).

        Raises:
            UnknownTopicError: if the topic or one of the partitions does not exist.
            ProduceError: if some batches were not acknowledged.
            LocalClusterError: if the cluster is not running or a record is too large.
            BrokerNotAvailableError: if no broker can be reached.
        """
        self._require_running()
        async with self._producer() as producer:
            all_partitions = set(await self._partitions_for(producer.client, topic))
            unknown = sorted(set(records_by_partition) - all_partitions)
            if unknown:
                raise UnknownTopicError(topic, f"topic {topic!r} has no partitions {unknown}")

            def interleaved() -> Iterator[tuple[int, bytes | None, bytes]]:
                # ~ one batch worth of 100-byte records per partition per round
                chunk = 4096
                pending = {p: (rs, 0) for p, rs in records_by_partition.items() if rs}
                while pending:
                    for p in list(pending):
                        rs, start = pending[p]
                        end = min(start + chunk, len(rs))
                        for i in range(start, end):
                            key, value = rs[i]
                            yield p, key, value
                        if end >= len(rs):
                            del pending[p]
                        else:
                            pending[p] = (rs, end)

            return await self._send_batches(producer, topic, interleaved())

    async def log_end_offsets(self, topic: str) -> dict[int, int]:
        """The log end offset (high watermark: offset of the next record) per partition.

        Uses ListOffsets (``AIOKafkaConsumer.end_offsets``, no consumer group).

        Args:
            topic: an existing topic.

        Returns:
            ``{partition: log end offset}`` for every partition of the topic.

        Raises:
            UnknownTopicError: if the topic does not exist.
            LocalClusterError: if the cluster is not running or the request fails.
            BrokerNotAvailableError: if no broker can be reached.
        """
        return await self._list_offsets(topic, latest=True)

    async def beginning_offsets(self, topic: str) -> dict[int, int]:
        """The log start offset (earliest available record) per partition.

        Args:
            topic: an existing topic.

        Returns:
            ``{partition: log start offset}`` for every partition of the topic.

        Raises:
            UnknownTopicError: if the topic does not exist.
            LocalClusterError: if the cluster is not running or the request fails.
            BrokerNotAvailableError: if no broker can be reached.
        """
        return await self._list_offsets(topic, latest=False)

    # ---- fault tools -----------------------------------------------------------------

    def kill_broker(self, broker_id: int) -> None:
        """SIGKILL a broker (no controlled shutdown; its session lingers).

        ZooKeeper flavour: its registration under ``/brokers/ids`` disappears only when its
        ZooKeeper session expires (6 s unless ``zookeeper.session.timeout.ms`` is
        overridden). KRaft flavour: the controller fences it after
        ``broker.session.timeout.ms`` (4 s); killing broker 0 kills the only controller, so
        no metadata changes (topic creation, leader moves) happen until it is restarted.
        Blocks only while the kernel reaps the process (milliseconds).

        Args:
            broker_id: the broker's id.

        Raises:
            KeyError: if there is no such broker.
        """
        self._broker(broker_id).kill_now()

    def pause_broker(self, broker_id: int) -> None:
        """Freeze a broker with SIGSTOP (it keeps its sockets but answers nothing).

        Args:
            broker_id: the broker's id.

        Raises:
            KeyError: if there is no such broker.
            LocalClusterError: if it is not running.
        """
        server = self._broker(broker_id)
        if not server.alive():
            raise LocalClusterError(f"{server.name} is not running")
        server.send_signal(signal.SIGSTOP)
        server.paused = True

    def resume_broker(self, broker_id: int) -> None:
        """Thaw a broker frozen by :meth:`pause_broker` (SIGCONT).

        Args:
            broker_id: the broker's id.

        Raises:
            KeyError: if there is no such broker.
        """
        server = self._broker(broker_id)
        server.send_signal(signal.SIGCONT)
        server.paused = False

    async def restart_broker(self, broker_id: int) -> None:
        """(Re)start a broker on its port and wait until it is registered and serving.

        A running broker is stopped gracefully first (SIGTERM, SIGKILL after 15 s).
        ZooKeeper flavour: if the previous process died without deregistering (SIGKILL),
        this first waits for its ZooKeeper session to expire, since Kafka refuses to start
        while the old ``/brokers/ids/<id>`` node exists. KRaft flavour: nothing is asked of
        ZooKeeper; the new process retries its registration with the controller until the
        old session expires (about 4 s, even after a clean stop), and is ready when its
        metadata lists every running broker.

        Args:
            broker_id: the broker's id.

        Raises:
            KeyError: if there is no such broker.
            ClusterStartError: if it exits or is not ready within ``startup_timeout_s``.
            LocalClusterError: if the cluster is not running.
            ZookeeperConnectionError: if ZooKeeper cannot be reached (ZooKeeper flavour).
        """
        self._require_running()
        server = self._broker(broker_id)
        if server.alive():
            await self._terminate([server])
        if not self.kraft:
            await self._wait_deregistered(broker_id)
        server.spawn()
        await self._wait_brokers_ready([broker_id])

    async def stop_zookeeper(self) -> None:
        """Stop ZooKeeper (SIGTERM; SIGKILL after 15 s).

        Brokers keep running: in the ZooKeeper flavour they retry their sessions; in the
        KRaft flavour they do not notice.

        Raises:
            LocalClusterError: if the cluster is not running.
        """
        self._require_running()
        await self._terminate([self._zk()])

    async def start_zookeeper(self) -> None:
        """Start ZooKeeper again on the same port and data directory; wait for ``imok``.

        Raises:
            ClusterStartError: if it exits or does not answer within ``startup_timeout_s``.
            LocalClusterError: if the cluster is not running or ZooKeeper already runs.
        """
        self._require_running()
        self._zk().spawn()
        await self._wait_zookeeper()

    async def expire_session(self, session_id: int, password: bytes) -> None:
        """Expire a ZooKeeper session on the server, for real.

        Opens a second session with the same id and password and closes it, as Curator's
        ``KillSession`` does: the server drops the session and its ephemeral nodes; the
        owner sees its session as expired (aiozk state LOST) when it next talks to the
        server. With aiozk, pass ``zk.session.session_id`` and ``zk.session.password``.

        Args:
            session_id: the session's id.
            password: the session's password.

        Raises:
            ZookeeperSessionExpiredError: if the server no longer knows the session
                (already expired or closed) or the password is wrong.
            ZookeeperConnectionError: if ZooKeeper cannot be reached.
            LocalClusterError: if the cluster is not running.
        """
        self._require_running()
        zk = ZKClient(self.zookeeper_connect, session_timeout=10)
        zk.session.session_id = session_id
        zk.session.password = password
        try:
            try:
                async with asyncio.timeout(_REQUEST_TIMEOUT_S):
                    await zk.start()
            except TimeoutError as exc:
                raise ZookeeperConnectionError(
                    f"no ZooKeeper session with {self.zookeeper_connect}"
                ) from exc
            # aiozk silently opens a fresh session when the server refuses the old one.
            attached = zk.session.session_id == session_id
        finally:
            await _close_zk(zk)
        if not attached:
            raise ZookeeperSessionExpiredError(
                f"ZooKeeper session {session_id:#x} is not alive (already expired or closed, "
                "or wrong password)"
            )
        log.info("expired ZooKeeper session %#x", session_id)

    # ---- internals: configuration ----------------------------------------------------

    def _zk(self) -> _Server:
        if self._zookeeper is None:
            raise LocalClusterError("the cluster was not started")
        return self._zookeeper

    def _broker(self, broker_id: int) -> _Server:
        try:
            return self._brokers[broker_id]
        except KeyError:
            raise KeyError(f"no broker {broker_id} in {self!r}") from None

    def _require_running(self) -> None:
        if self._state is not ClusterState.RUNNING:
            raise LocalClusterError(f"the cluster is not running ({self._state.name})")

    def _configure(self, java: str, zk_libs: Path, broker_libs: Path) -> None:
        """Create the work directory and write every config; build the servers.

        Args:
            java: the ``java`` executable.
            zk_libs: the jars ZooKeeper runs from (always Kafka 3.9's).
            broker_libs: the jars the brokers (and, for KRaft, the storage tool) run from.
        """
        if self._given_work_dir is not None:
            work = self._given_work_dir
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(tempfile.mkdtemp(prefix="aiozkconsumer-cluster-"))
        self._work_dir = work = work.resolve()
        logs = work / "logs"
        logs.mkdir(exist_ok=True)
        # KRaft needs one more port: the controller listener of broker 0. Proxied links need,
        # per link, a listener on each broker and a proxy to ZooKeeper and to each broker.
        base = 1 + self._broker_count + (1 if self.kraft else 0)
        per_link = 1 + 2 * self._broker_count
        ports = _free_ports(base + self._link_count * per_link)
        zk_port = ports[0]
        broker_ports = ports[1 : 1 + self._broker_count]
        controller_port = ports[base - 1]
        self._configure_links(zk_port, ports[base:])

        zk_dir = work / "zookeeper"
        (zk_dir / "data").mkdir(parents=True, exist_ok=True)
        zk_log = logs / "zookeeper.log"
        (zk_dir / "log4j.properties").write_text(_log4j_properties(zk_log))
        (zk_dir / "zoo.cfg").write_text(
            _properties(
                {
                    "tickTime": self._tick_ms,
                    "dataDir": zk_dir / "data",
                    "clientPort": zk_port,
                    "clientPortAddress": _HOST,
                    "maxClientCnxns": 0,
                    "admin.enableServer": "false",
                    "4lw.commands.whitelist": "ruok,srvr,stat",
                    # Test data: the page cache is durable enough (a killed process loses
                    # nothing), and fsync per transaction would dominate rebalance latency.
                    "forceSync": "no",
                }
            )
        )
        self._zookeeper = _Server(
            "zookeeper",
            zk_port,
            [
                java,
                *_ZK_JVM,
                *_COMMON_JVM,
                "-Dzookeeper.admin.enableServer=false",
                "-Dzookeeper.4lw.commands.whitelist=ruok,srvr,stat",
                f"-Dlog4j.configuration=file:{zk_dir / 'log4j.properties'}",
                "-cp",
                str(zk_libs / "*"),
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(zk_dir / "zoo.cfg"),
            ],
            zk_log,
        )

        if self.kraft:
            self._configure_kraft_brokers(java, broker_libs, broker_ports, controller_port)
            return

        for broker_id, port in zip(self.broker_ids, broker_ports, strict=True):
            name = f"broker-{broker_id}"
            broker_dir = work / name
            (broker_dir / "data").mkdir(parents=True, exist_ok=True)
            broker_log = logs / f"{name}.log"
            (broker_dir / "log4j.properties").write_text(_log4j_properties(broker_log))
            props: dict[str, object] = {
                "broker.id": broker_id,
                **self._listener_properties(broker_id, port),
                "zookeeper.connect": f"{_HOST}:{zk_port}",
                "zookeeper.session.timeout.ms": _BROKER_ZK_SESSION_TIMEOUT_MS,
                "log.dirs": broker_dir / "data",
                **_COMMON_BROKER_PROPERTIES,
                # When the whole cluster stops, the controller goes away under the others'
                # controlled shutdown; the default 5 s retry backoff made stop() take ~11 s.
                "controlled.shutdown.retry.backoff.ms": 500,
            }
            props.update(self._broker_overrides)
            (broker_dir / "server.properties").write_text(_properties(props))
            self._brokers[broker_id] = _Server(
                name,
                port,
                [
                    java,
                    *_BROKER_JVM,
                    *_COMMON_JVM,
                    f"-Dlog4j.configuration=file:{broker_dir / 'log4j.properties'}",
                    "-cp",
                    str(broker_libs / "*"),
                    "kafka.Kafka",
                    str(broker_dir / "server.properties"),
                ],
                broker_log,
            )

    def _configure_links(self, zk_port: int, ports: Sequence[int]) -> None:
        """Build the proxied links (not started) from ``ports``: per link, the real port of
        its listener on each broker, then its ZooKeeper proxy, then a proxy per broker."""
        brokers = self.broker_ids
        self._link_listener_ports = {b: [] for b in brokers}
        self._links = []
        if not self._link_count:
            return
        self._proxy_host = host = _ProxyHost()
        it = iter(ports)
        for index in range(self._link_count):
            real = {b: next(it) for b in brokers}
            for b in brokers:
                self._link_listener_ports[b].append(real[b])
            zookeeper = TcpProxy(_HOST, zk_port, listen_host=_HOST, listen_port=next(it))
            proxies = {
                b: TcpProxy(_HOST, real[b], listen_host=_HOST, listen_port=next(it))
                for b in brokers
            }
            self._links.append(ProxyLink(index, host, zookeeper, proxies))

    def _listener_properties(self, broker_id: int, port: int) -> dict[str, str]:
        """``listeners``, ``advertised.listeners``, the protocol map and the inter-broker
        listener of one broker.

        Without links: one ``PLAINTEXT`` listener on ``port``. With links: ``INTERNAL`` on
        ``port`` (direct, advertised as is, inter-broker), and per link a listener advertised
        at the link's proxy, ``PLAINTEXT`` (link 0) first, so that it is the endpoint clients
        reading ``/brokers/ids`` pick (the first PLAINTEXT one).
        """
        if not self._links:
            listener = f"PLAINTEXT://{_HOST}:{port}"
            return {
                "listeners": listener,
                "advertised.listeners": listener,
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT",
            }
        internal = f"{_INTERNAL_LISTENER}://{_HOST}:{port}"
        names = [_link_listener(link.index) for link in self._links]
        real = self._link_listener_ports[broker_id]
        advertised = [
            f"{name}://{link.broker_address(broker_id)}"
            for name, link in zip(names, self._links, strict=True)
        ]
        listening = [f"{name}://{_HOST}:{p}" for name, p in zip(names, real, strict=True)]
        protocols = [f"{name}:PLAINTEXT" for name in [_INTERNAL_LISTENER, *names]]
        return {
            "listeners": ",".join([internal, *listening]),
            "advertised.listeners": ",".join([*advertised, internal]),
            "listener.security.protocol.map": ",".join(protocols),
            "inter.broker.listener.name": _INTERNAL_LISTENER,
        }

    async def _start_proxies(self) -> None:
        """Start the proxies' thread and every link's proxies (before the servers: a proxy
        resolves its upstream at each connection)."""
        host = self._proxy_host
        if host is None:
            return
        host.start()
        proxies = [proxy for link in self._links for proxy in link.all_proxies()]

        async def start_all() -> None:
            for proxy in proxies:
                await proxy.start()

        try:
            await asyncio.wait_for(host.run(start_all()), _PROXY_START_S)
        except (ProxyError, TimeoutError) as exc:
            raise ClusterStartError(
                "proxies", f"a proxy did not start: {exc}", "", self._work_dir
            ) from exc

    def _stop_proxies(self) -> None:
        """Close every proxy and stop their thread (idempotent; never raises)."""
        host, self._proxy_host = self._proxy_host, None
        if host is None:
            return
        proxies = [proxy for link in self._links for proxy in link.all_proxies()]

        async def close_all() -> None:
            for proxy in proxies:
                with contextlib.suppress(Exception):
                    await proxy.close()

        try:
            host.run_sync(close_all(), _CLOSE_TIMEOUT_S * 2)
        except Exception as exc:  # the thread goes anyway (a daemon)
            log.warning("closing the proxies failed: %r", exc)
        finally:
            host.stop()

    def _configure_kraft_brokers(
        self, java: str, libs: Path, broker_ports: Sequence[int], controller_port: int
    ) -> None:
        """Write the KRaft nodes' configs; build their servers and storage format commands.

        Node 0 is ``broker,controller`` with listeners ``PLAINTEXT`` and ``CONTROLLER``; it
        is formatted ``--standalone`` (a single-voter dynamic quorum). The others are
        brokers only, formatted ``--no-initial-controllers``. All find the quorum through
        ``controller.quorum.bootstrap.servers``. A log directory formatted by an earlier run
        (a reused ``work_dir``) keeps its cluster id (``--ignore-formatted``).
        """
        work = self.work_dir
        classpath = str(libs / "*")
        controller = f"{_HOST}:{controller_port}"
        cluster_id = (
            _read_cluster_id(work / f"broker-{_KRAFT_CONTROLLER_ID}" / "data" / "meta.properties")
            or _new_cluster_id()
        )
        for broker_id, port in zip(self.broker_ids, broker_ports, strict=True):
            name = f"broker-{broker_id}"
            broker_dir = work / name
            (broker_dir / "data").mkdir(parents=True, exist_ok=True)
            broker_log = work / "logs" / f"{name}.log"
            log_config = broker_dir / "log4j2.properties"
            log_config.write_text(_log4j2_properties(broker_log))
            is_controller = broker_id == _KRAFT_CONTROLLER_ID
            listener_props = self._listener_properties(broker_id, port)
            if not self._links:
                del listener_props["advertised.listeners"]
            if is_controller:
                listener_props["listeners"] += f",CONTROLLER://{controller}"
            listener_props["listener.security.protocol.map"] = (
                f"CONTROLLER:PLAINTEXT,{listener_props['listener.security.protocol.map']}"
            )
            props: dict[str, object] = {
                "process.roles": "broker,controller" if is_controller else "broker",
                "node.id": broker_id,
                "controller.quorum.bootstrap.servers": controller,
                "controller.listener.names": "CONTROLLER",
                # Without proxied links advertised.listeners is left to default to listeners:
                # concrete loopback addresses, the controller's CONTROLLER one included
                # (KIP-853); with links, the controller listener is still taken from there.
                **listener_props,
                "broker.session.timeout.ms": _KRAFT_BROKER_SESSION_TIMEOUT_MS,
                "broker.heartbeat.interval.ms": _KRAFT_BROKER_HEARTBEAT_INTERVAL_MS,
                "log.dirs": broker_dir / "data",
                **_COMMON_BROKER_PROPERTIES,
                "share.coordinator.state.topic.replication.factor": 1,
                "share.coordinator.state.topic.min.isr": 1,
            }
            props.update(self._broker_overrides)
            config = broker_dir / "server.properties"
            config.write_text(_properties(props))
            jvm_logging = f"-Dlog4j2.configurationFile={log_config}"
            self._brokers[broker_id] = _Server(
                name,
                port,
                [
                    java,
                    *_BROKER_JVM,
                    *_COMMON_JVM,
                    jvm_logging,
                    "-cp",
                    classpath,
                    "kafka.Kafka",
                    str(config),
                ],
                broker_log,
            )
            self._format_cmds[broker_id] = [
                java,
                *_TOOL_JVM,
                *_COMMON_JVM,
                jvm_logging,
                "-cp",
                classpath,
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                cluster_id,
                "--config",
                str(config),
                "--ignore-formatted",
                "--standalone" if is_controller else "--no-initial-controllers",
            ]

    # ---- internals: KRaft processes ---------------------------------------------------

    async def _start_kraft_brokers(self) -> None:
        """Format every KRaft node's storage, start the nodes and wait until they serve."""
        await _all_or_cancel([self._format_storage(b) for b in self._brokers])
        for server in self._brokers.values():
            server.spawn()
        await self._wait_brokers_ready(list(self._brokers))

    async def _format_storage(self, broker_id: int) -> None:
        """Run ``kafka-storage format`` for one KRaft node; its output goes to its log."""
        server = self._brokers[broker_id]
        tool = _Server(
            f"{server.name} storage format", 0, self._format_cmds[broker_id], server.log_file
        )
        deadline = time.monotonic() + self._startup_timeout_s
        tool.spawn()
        try:
            while not tool.reaped():
                if time.monotonic() > deadline:
                    raise self._start_error(
                        server,
                        f"kafka-storage format did not finish within "
                        f"{self._startup_timeout_s:.0f} s",
                    )
                await asyncio.sleep(0.05)
        finally:
            tool.kill_now()
        code = tool.proc.returncode if tool.proc is not None else None
        if code != 0:
            raise self._start_error(server, f"kafka-storage format exited with code {code}")

    async def _stop_kraft_brokers(self) -> None:
        """Stop the broker-only nodes, then the controller node.

        In that order, because a broker's controlled shutdown goes through the controller;
        without a live (unpaused) controller it would only hang, so those are SIGKILLed.
        """
        controller = self._brokers.get(_KRAFT_CONTROLLER_ID)
        others = [s for b, s in self._brokers.items() if b != _KRAFT_CONTROLLER_ID and s.alive()]
        if others and not (controller is not None and controller.alive() and not controller.paused):
            for server in others:
                server.kill_now()
        await self._terminate(others)
        if controller is not None:
            await self._terminate([controller])

    # ---- internals: waiting ----------------------------------------------------------

    def _start_error(self, server: _Server, reason: str) -> ClusterStartError:
        self._failed = True
        return ClusterStartError(server.name, reason, _tail(server.log_file, 60), self._work_dir)

    def _check_alive(self, servers: Iterable[_Server]) -> None:
        for server in servers:
            proc = server.proc
            code = proc.poll() if proc is not None else None
            if code is not None:
                raise self._start_error(server, f"the java process exited with code {code}")

    async def _wait_zookeeper(self) -> None:
        """Wait until ZooKeeper answers ``ruok`` with ``imok`` and serves requests.

        ``imok`` only means the process runs; until the database is loaded, ``srvr``
        answers "This ZooKeeper instance is not currently serving requests" and clients
        (aiozk's handshake sends ``srvr`` too) are turned away.
        """
        zookeeper = self._zk()
        deadline = time.monotonic() + self._startup_timeout_s
        while True:
            self._check_alive([zookeeper])
            if await _zk_four_letter_word(zookeeper.port, b"ruok", 2.0) == b"imok":
                srvr = await _zk_four_letter_word(zookeeper.port, b"srvr", 2.0)
                if srvr.startswith(b"Zookeeper version:"):
                    return
            if time.monotonic() > deadline:
                raise self._start_error(
                    zookeeper, f"not serving within {self._startup_timeout_s:.0f} s"
                )
            await asyncio.sleep(_POLL_INTERVAL_S)

    async def _wait_brokers_ready(self, broker_ids: Sequence[int]) -> None:
        """Wait until the brokers are registered and answer metadata requests.

        ZooKeeper flavour: a broker is ready when ``/brokers/ids/<id>`` exists and its own
        metadata response lists every broker registered in ZooKeeper (at least the ones
        waited for). KRaft flavour: see :meth:`_wait_kraft_brokers_ready`.
        """
        if self.kraft:
            await self._wait_kraft_brokers_ready(broker_ids)
            return
        servers = [self._brokers[b] for b in broker_ids]
        deadline = time.monotonic() + self._startup_timeout_s
        waiting = list(servers)
        last_problem = "not registered in ZooKeeper"
        async with _zk_session(self.zookeeper_connect, time_limit=self._startup_timeout_s) as zk:
            while True:
                self._check_alive(servers)
                try:
                    async with asyncio.timeout(5.0):
                        registered = {int(i) for i in await zk.get_children("/brokers/ids")}
                except (zk_exc.NoNode, TimeoutError):
                    registered = set()
                expected = registered | set(broker_ids)
                still: list[_Server] = []
                for server in waiting:
                    broker_id = int(server.name.split("-", 1)[1])
                    if broker_id not in registered:
                        last_problem = "not registered under /brokers/ids in ZooKeeper"
                        still.append(server)
                        continue
                    if not await _port_open(server.port, 2.0):
                        last_problem = "registered but not accepting connections yet"
                        still.append(server)
                        continue
                    try:
                        async with _kafka_client(server.address, time_limit=5.0) as client:
                            known = {int(b.nodeId) for b in client.cluster.brokers()}
                    except (BrokerNotAvailableError, TimeoutError) as exc:
                        last_problem = f"registered but not answering metadata requests: {exc}"
                        still.append(server)
                        continue
                    if not expected <= known:
                        last_problem = f"its metadata lists brokers {sorted(known)} only"
                        still.append(server)
                waiting = still
                if not waiting:
                    return
                if time.monotonic() > deadline:
                    raise self._start_error(
                        waiting[0],
                        f"not ready within {self._startup_timeout_s:.0f} s ({last_problem})",
                    )
                await asyncio.sleep(_POLL_INTERVAL_S * 2)

    async def _wait_kraft_brokers_ready(self, broker_ids: Sequence[int]) -> None:
        """Wait until KRaft brokers answer metadata requests listing every running broker.

        ZooKeeper knows nothing of KRaft brokers: a broker is ready when its own metadata
        response lists the brokers waited for and every other broker that runs unpaused
        (a broker appears there once the controller has unfenced it).
        """
        servers = [self._brokers[b] for b in broker_ids]
        deadline = time.monotonic() + self._startup_timeout_s
        waiting = list(servers)
        last_problem = "not accepting connections yet"
        while True:
            self._check_alive(servers)
            expected = set(broker_ids) | {
                b for b, s in self._brokers.items() if s.alive() and not s.paused
            }
            still: list[_Server] = []
            for server in waiting:
                if not await _port_open(server.port, 2.0):
                    last_problem = "not accepting connections yet"
                    still.append(server)
                    continue
                try:
                    async with _kafka_client(server.address, time_limit=5.0) as client:
                        known = {int(b.nodeId) for b in client.cluster.brokers()}
                except (BrokerNotAvailableError, TimeoutError) as exc:
                    last_problem = f"not answering metadata requests: {exc}"
                    still.append(server)
                    continue
                if not expected <= known:
                    last_problem = (
                        f"its metadata lists brokers {sorted(known)}, not all of {sorted(expected)}"
                    )
                    still.append(server)
            waiting = still
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise self._start_error(
                    waiting[0],
                    f"not ready within {self._startup_timeout_s:.0f} s ({last_problem})",
                )
            await asyncio.sleep(_POLL_INTERVAL_S * 2)

    async def _wait_deregistered(self, broker_id: int) -> None:
        timeout = self._startup_timeout_s
        deadline = time.monotonic() + timeout
        path = f"/brokers/ids/{broker_id}"
        async with _zk_session(self.zookeeper_connect, time_limit=timeout) as zk:
            while await zk.exists(path):
                if time.monotonic() > deadline:
                    raise LocalClusterError(
                        f"{path} still exists after {timeout:.0f} s (a broker process outside "
                        "this cluster?)"
                    )
                await asyncio.sleep(_POLL_INTERVAL_S * 2)

    async def _wait_topic_ready(self, topic: str, partitions: int) -> None:
        """Wait until every running broker's metadata gives each partition a leader.

        In the ZooKeeper flavour ``/brokers/topics/<topic>`` must exist first; in the KRaft
        flavour Kafka metadata is the only source.
        """
        timeout = self._startup_timeout_s
        deadline = time.monotonic() + timeout
        path = f"/brokers/topics/{topic}"
        problem = f"{path} missing in ZooKeeper" if not self.kraft else "no metadata yet"
        async with contextlib.AsyncExitStack() as stack:
            zk = None
            if not self.kraft:
                zk = await stack.enter_async_context(
                    _zk_session(self.zookeeper_connect, time_limit=timeout)
                )
            client = await stack.enter_async_context(self._any_kafka_client())
            while True:
                ready = True if zk is None else await zk.exists(path)
                if ready:
                    for server in self._brokers.values():
                        if not server.alive() or server.paused:
                            continue
                        broker_id = int(server.name.split("-", 1)[1])
                        try:
                            entry = await _topic_metadata(client, broker_id, topic, 5.0)
                        except (kafka_errors.KafkaError, TimeoutError) as exc:
                            ready, problem = False, f"metadata from {server.name}: {exc!r}"
                            break
                        leaders = {
                            int(p["partition"]): int(p["leader"]) for p in entry["partitions"]
                        }
                        if len(leaders) < partitions or min(leaders.values()) < 0:
                            ready = False
                            problem = f"{server.name} knows leaders {leaders}"
                            break
                if ready:
                    return
                if time.monotonic() > deadline:
                    raise LocalClusterError(
                        f"topic {topic!r} not usable within {timeout:.0f} s: {problem}"
                    )
                await asyncio.sleep(_POLL_INTERVAL_S)

    def _live_bootstrap(self) -> str:
        """Bootstrap servers of the brokers that run and are not paused.

        (A paused broker accepts connections but never answers: bootstrapping from it
        would stall for a whole request timeout.)
        """
        bootstrap = ",".join(
            s.address for s in self._brokers.values() if s.alive() and not s.paused
        )
        if not bootstrap:
            raise BrokerNotAvailableError("no broker of the cluster is running")
        return bootstrap

    @contextlib.asynccontextmanager
    async def _any_kafka_client(self) -> AsyncIterator[Any]:
        async with _kafka_client(self._live_bootstrap(), time_limit=_REQUEST_TIMEOUT_S) as client:
            yield client

    # ---- internals: records ----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _producer(self) -> AsyncIterator[Any]:
        producer = AIOKafkaProducer(
            bootstrap_servers=self._live_bootstrap(),
            client_id=_CLIENT_ID,
            acks="all",
            linger_ms=5,
            max_batch_size=_BATCH_BYTES,
            max_request_size=2 * _BATCH_BYTES,
            request_timeout_ms=int(_REQUEST_TIMEOUT_S * 1000),
        )
        try:
            try:
                await producer.start()
            except kafka_errors.KafkaConnectionError as exc:
                raise BrokerNotAvailableError(f"cannot reach Kafka: {exc}") from exc
            yield producer
        finally:
            await _bounded_close(producer.stop(), time_limit=_REQUEST_TIMEOUT_S, what="producer")

    @staticmethod
    async def _partitions_for(client: Any, topic: str) -> list[int]:
        """The topic's partitions, asked of a broker directly through an ``AIOKafkaClient``.

        (aiokafka's own lookup waits ``request_timeout_ms`` before reporting an unknown
        topic; this fails at once.)
        """
        node_ids = [int(b.nodeId) for b in client.cluster.brokers()]
        if not node_ids:
            raise BrokerNotAvailableError("no broker known")
        random.shuffle(node_ids)
        failures: list[str] = []
        for node_id in node_ids:  # some may be down (kill_broker) or not ready
            try:
                entry = await _topic_metadata(client, node_id, topic, _REQUEST_TIMEOUT_S)
                break
            except (kafka_errors.KafkaError, TimeoutError) as exc:
                failures.append(f"broker {node_id}: {exc!r}")
        else:
            raise BrokerNotAvailableError(
                f"metadata request for {topic!r} failed: {'; '.join(failures)}"
            )
        if entry["error_code"] == _UNKNOWN_TOPIC_OR_PARTITION or not entry["partitions"]:
            raise UnknownTopicError(topic)
        return sorted(int(p["partition"]) for p in entry["partitions"])

    @staticmethod
    async def _send_batches(
        producer: Any, topic: str, routed: Iterator[tuple[int, bytes | None, bytes]]
    ) -> int:
        """Pack records into one open batch per partition; submit full ones as they fill.

        ``send_batch`` waits while the partition's previous batch is not yet drained, so at
        most two batches per partition are buffered: memory stays bounded and the broker
        gets one request per round trip with a batch for each partition.
        """
        builders: dict[int, Any] = {}
        sent: list[tuple[asyncio.Future[Any], int]] = []

        async def submit(part: int, builder: Any) -> None:
            builder.close()
            try:
                future = await producer.send_batch(builder, topic, partition=part)
            except kafka_errors.KafkaError as exc:
                raise LocalClusterError(f"producing to {topic}/{part} failed: {exc!r}") from exc
            sent.append((future, builder.record_count()))

        try:
            for count, (part, key, value) in enumerate(routed, 1):
                if not count & 0x3FFF:
                    # Filling a batch is pure CPU: let the loop breathe (ZooKeeper
                    # heartbeats, consumers under test) every 16k records.
                    await asyncio.sleep(0)
                builder = builders.get(part)
                if builder is None:
                    builder = builders[part] = producer.create_batch()
                if builder.append(timestamp=None, key=key, value=value) is None:
                    await submit(part, builder)
                    builder = builders[part] = producer.create_batch()
                    if builder.append(timestamp=None, key=key, value=value) is None:
                        raise LocalClusterError(
                            f"a record of {len(value)} bytes does not fit in a "
                            f"{_BATCH_BYTES} byte batch"
                        )
            for part, builder in builders.items():
                if builder.record_count():
                    await submit(part, builder)
            builders.clear()
        finally:
            # Results of everything already submitted, even if we stop early: an
            # unretrieved failed future would be reported by the loop.
            outcomes = await asyncio.gather(*(f for f, _ in sent), return_exceptions=True)
        acknowledged = sum(n for (_, n), r in zip(sent, outcomes, strict=True) if not _is_exc(r))
        failures = [r for r in outcomes if _is_exc(r)]
        if failures:
            total = sum(n for _, n in sent)
            raise ProduceError(
                f"{total - acknowledged} of {total} records to {topic!r} were not acknowledged "
                f"({len(failures)} failed batches; first error: {failures[0]!r})",
                acknowledged,
            )
        return acknowledged

    async def _list_offsets(self, topic: str, *, latest: bool) -> dict[int, int]:
        self._require_running()
        async with self._any_kafka_client() as client:
            partitions = await self._partitions_for(client, topic)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self._live_bootstrap(),
            client_id=_CLIENT_ID,
            enable_auto_commit=False,
            request_timeout_ms=int(_REQUEST_TIMEOUT_S * 1000),
        )
        try:
            try:
                await consumer.start()
            except kafka_errors.KafkaConnectionError as exc:
                raise BrokerNotAvailableError(f"cannot reach Kafka: {exc}") from exc
            tps = [KafkaTopicPartition(topic, p) for p in partitions]
            try:
                if latest:
                    offsets = await consumer.end_offsets(tps)
                else:
                    offsets = await consumer.beginning_offsets(tps)
            except kafka_errors.KafkaError as exc:
                raise LocalClusterError(f"ListOffsets for {topic!r} failed: {exc!r}") from exc
        finally:
            await _bounded_close(consumer.stop(), time_limit=_CLOSE_TIMEOUT_S, what="consumer")
        return {int(tp.partition): int(offset) for tp, offset in offsets.items()}

    # ---- internals: processes --------------------------------------------------------

    async def _terminate(self, servers: Sequence[_Server], grace: float = _STOP_GRACE_S) -> None:
        """SIGTERM (and SIGCONT, for paused ones) then wait; SIGKILL what outlives ``grace``."""
        running = [s for s in servers if s.alive()]
        for server in running:
            server.send_signal(signal.SIGTERM)
            server.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + grace
        try:
            while running and time.monotonic() < deadline:
                running = [s for s in running if not s.reaped()]
                if running:
                    await asyncio.sleep(0.05)
        finally:
            for server in running:
                if not server.reaped():
                    log.warning("%s did not stop within %.0f s; killing it", server.name, grace)
                    server.kill_now()

    def _kill_all(self) -> None:
        for server in [*self._brokers.values(), self._zookeeper]:
            if server is not None:
                server.kill_now()

    def _remove_work_dir(self) -> None:
        work = self._work_dir
        if work is None or self._keep_work_dir or self._failed or self._given_work_dir:
            return
        shutil.rmtree(work, ignore_errors=True)


def _is_exc(outcome: object) -> bool:
    return isinstance(outcome, BaseException)
