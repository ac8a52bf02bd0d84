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

Secured listeners (``security=True`` or a
:class:`~aiozkconsumer.testing.security.ClusterSecurity`): every broker also gets ``SSL``,
``MTLS``, ``SASL_SSL``, ``SASL_PLAINTEXT`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)
and ``SSL_WRONG_HOST`` listeners on free loopback ports; ``PLAINTEXT`` stays the inter-broker
listener and the one the cluster's own tools use. Certificates (``trustme``) and passwords
are made at start into ``<work_dir>/security``; SCRAM users exist before :meth:`start`
returns. ZooKeeper can get a TLS port too (``ClusterSecurity(zookeeper_tls=True)``), and
always gets a digest super user. Tests take what they need from :attr:`LocalCluster.security`,
:meth:`LocalCluster.bootstrap_servers_for`, :meth:`LocalCluster.client_properties`,
:meth:`LocalCluster.zookeeper_client_properties`, and check who connected with
:meth:`LocalCluster.principals_seen` (the brokers' request logs). See
:mod:`aiozkconsumer.testing.security`.

The kit is split by job; this module is the test-facing facade, :class:`LocalCluster`
joining one part a job (each a class over ``_cluster_base.ClusterCore``, the shared state
and accessors) and owning the lifecycle (:meth:`LocalCluster.start`,
:meth:`LocalCluster.stop`):

- ``_cluster_settings``: the checked settings and the port plan (pure);
- ``_cluster_config``: the work directory, config files, servers, links and key material;
- ``_cluster_servers``: starting, waiting for and stopping the proxies and servers;
- ``_cluster_faults``: kill, pause, restart, session expiry, the proxied links;
- ``_cluster_topics``: topics, produce, offsets;
- ``_cluster_listeners``: listener addresses, client properties, request logs (over the
  pure ``_cluster_access`` and ``_request_log``).

Below them: ``_processes`` (the ``java`` child processes), ``_render`` (config files and
command lines), ``_readiness`` (when a server really serves), ``_clients`` (short-lived
ZooKeeper and Kafka clients), ``_records`` (topics, produce, offsets) and
:mod:`aiozkconsumer.testing.links` (the proxied links).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from aiozkconsumer._concurrency import gather
from aiozkconsumer.testing._cluster_base import ClusterState
from aiozkconsumer.testing._cluster_faults import FaultTools
from aiozkconsumer.testing._cluster_listeners import ListenerTools
from aiozkconsumer.testing._cluster_settings import (
    DEFAULT_BROKER_HEAP,
    ClusterSettings,
    security_options,
)
from aiozkconsumer.testing._cluster_topics import TopicTools
from aiozkconsumer.testing._errors import ClusterStartError, LocalClusterError, ProduceError
from aiozkconsumer.testing._processes import terminate
from aiozkconsumer.testing.links import LinkTarget, ProxyLink
from aiozkconsumer.testing.provision import provision_kafka, require_tools
from aiozkconsumer.testing.security import ClusterSecurity, SecurityMaterial

__all__ = [
    "ClusterSecurity",
    "ClusterStartError",
    "ClusterState",
    "LinkTarget",
    "LocalCluster",
    "LocalClusterError",
    "ProduceError",
    "ProxyLink",
    "SecurityMaterial",
]

log = logging.getLogger(__name__)

START_ATTEMPTS = 3
"""How many times :meth:`LocalCluster.start` tries when a port it picked was taken meanwhile.

Free ports are picked by binding to port 0 and releasing it; until the server binds it, any
process may take it (an outgoing connection's local port, another test's server). Such a
start fails on a ``BindException``/"Address already in use" and is tried again with new ports.
"""


def _port_taken(exc: ClusterStartError) -> bool:
    """Whether a start failed because a port it picked was in use by then."""
    return "Address already in use" in str(exc)


class LocalCluster(FaultTools, TopicTools, ListenerTools):
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
    (server.properties, log config, log dirs) and ``logs/<name>.log``; a secured cluster
    also ``security/`` (certificates, keys, passwords) and
    ``logs/broker-<id>-requests.log``. It is removed on
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
        security: secured listeners (see the module docstring and
            :mod:`aiozkconsumer.testing.security`): ``True`` for the defaults, a
            :class:`~aiozkconsumer.testing.security.ClusterSecurity` to choose, None or
            False (default) for none. Needs the ``trustme`` package (the ``test`` extra).
            Prefixed entries in ``broker_properties`` (``listener.name.sasl_ssl.…``) tune
            the secured listeners.
        broker_racks: a ``broker.rack`` per broker (in broker id order), with the brokers'
            ``replica.selector.class`` set to Kafka's ``RackAwareReplicaSelector``, so that a
            consumer sending ``client.rack`` is told to fetch from a replica in its rack
            (KIP-392); default None: no racks. Topics created then spread their replicas
            over the racks.
        request_log: keep each broker's request log (``kafka.request.logger`` at DEBUG):
            see :attr:`request_log_files` and :meth:`requests_logged`. Default False.
        broker_heap: each broker JVM's maximum heap (``-Xmx``; default ``"512m"``, enough
            for the test suite). A broker hosting thousands of partitions needs more: with
            10,000 partitions and one idle consumer a Kafka 3.9 broker's heap held 400 to 500
            MB, and with the previous such topic still being deleted a 512m broker stopped
            answering.

    Raises:
        ValueError: if ``brokers < 1``, ``zk_tick_time_ms < 1``, ``startup_timeout_s <= 0``,
            ``proxy_links < 0``, ``flavour`` is not ``"zookeeper"`` or ``"kraft"``,
            ``broker_racks`` does not name a non-blank rack per broker, or ``broker_heap`` is
            not a JVM heap size of at least 256m (digits and ``k``, ``m`` or ``g``).
        TypeError: if ``security`` is not one of the above.
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
        security: ClusterSecurity | bool | None = None,
        broker_racks: Sequence[str] | None = None,
        request_log: bool = False,
        broker_heap: str = DEFAULT_BROKER_HEAP,
    ) -> None:
        super().__init__(
            ClusterSettings(
                brokers=brokers,
                cache_dir=cache_dir,
                work_dir=None if work_dir is None else Path(work_dir),
                zk_tick_time_ms=zk_tick_time_ms,
                broker_properties=dict(broker_properties or {}),
                keep_work_dir=keep_work_dir,
                startup_timeout_s=startup_timeout_s,
                flavour=flavour,
                proxy_links=proxy_links,
                security=security_options(security),
                broker_racks=None if broker_racks is None else tuple(map(str, broker_racks)),
                request_log=request_log,
                broker_heap=broker_heap,
            )
        )

    # ---- lifecycle -------------------------------------------------------------------

    def _block_failed(self, exc: BaseException) -> None:
        if isinstance(exc, Exception):
            self.mark_failed()

    async def aclose(self) -> None:
        """Leaving ``async with``: :meth:`stop`."""
        await self.stop()

    async def start(self) -> None:
        """Provision the jars and start ZooKeeper and the brokers; wait until they serve.

        ZooKeeper is ready when it answers ``ruok`` with ``imok``. In the ZooKeeper flavour
        the brokers start once ZooKeeper serves, and are ready when each is registered under
        ``/brokers/ids`` and answers a metadata request listing every broker. In the KRaft
        flavour the brokers' log directories are formatted (``kafka-storage format``) and
        the brokers started while ZooKeeper comes up; they are ready when each answers a
        metadata request listing every broker. A start that fails because a port it picked
        was taken meanwhile ("Address already in use") is made again on new ports, up to
        :data:`START_ATTEMPTS` times in all. On any other failure (or cancellation)
        everything already started is killed and the work directory is kept.

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
            zk_home = await asyncio.to_thread(provision_kafka, self._settings.cache_dir, quiet=True)
            broker_home = zk_home
            if self.kraft:
                broker_home = await asyncio.to_thread(
                    provision_kafka, self._settings.cache_dir, flavour="kraft", quiet=True
                )
            java = require_tools(("java",))["java"]
            began = time.monotonic()
            for attempt in range(1, START_ATTEMPTS + 1):
                try:
                    await self._start_servers(java, zk_home / "libs", broker_home / "libs", attempt)
                    break
                except ClusterStartError as exc:
                    if attempt == START_ATTEMPTS or not _port_taken(exc):
                        raise
                    log.warning(
                        "%s: a port picked for it was taken meanwhile; starting the cluster "
                        "again on other ports (attempt %d of %d)",
                        exc.server,
                        attempt + 1,
                        START_ATTEMPTS,
                    )
                    self._discard_attempt()
        except BaseException:
            self._failed = True
            self._kill_all()
            self._stop_proxies()
            self._state = ClusterState.STOPPED
            raise
        self._start_seconds = time.monotonic() - began
        self._state = ClusterState.RUNNING
        log.info("%r started in %.1f s", self, self._start_seconds)

    async def _start_servers(
        self, java: str, zk_libs: Path, broker_libs: Path, attempt: int
    ) -> None:
        """One start attempt: configure on freshly picked ports, start, wait until served."""
        self._configure(java, zk_libs, broker_libs, attempt)
        await self._start_proxies()
        self._zk().spawn()
        if self.kraft:
            await gather([self._wait_zookeeper(), self._start_kraft_brokers()])
        else:
            await self._wait_zookeeper(tls=False)
            # The brokers use the plain port; the TLS one (whose first handshake costs a
            # cold JVM a second or two) comes up meanwhile.
            await gather([self._wait_zookeeper_tls(), self._start_zk_brokers()])

    def _discard_attempt(self) -> None:
        """After an attempt that lost a port: kill what it started and forget its servers.
        Its temporary work directory is removed (the cause is known); one the caller gave
        is kept for inspection (the next attempt runs in a directory of its own)."""
        self._kill_all()
        self._stop_proxies()
        self._brokers.clear()
        self._format_cmds.clear()
        self._zookeeper = None
        if self._settings.work_dir is None and self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        self._failed = False

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
                await self._stop_zk_brokers()
            if self._zookeeper is not None:
                await terminate([self._zookeeper])
        finally:
            self._kill_all()
            self._stop_proxies()
            self._state = ClusterState.STOPPED
            self._remove_work_dir()
