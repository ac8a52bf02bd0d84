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

The kit is split by job; this module is the test-facing facade. The parts it drives:
``_processes`` (the ``java`` child processes), ``_render`` (config files and command lines),
``_readiness`` (when a server really serves), ``_clients`` (short-lived ZooKeeper and Kafka
clients), ``_records`` (topics, produce, offsets) and :mod:`aiozkconsumer.testing.links`
(the proxied links).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from pathlib import Path

from aiozk import ZKClient

from aiozkconsumer._concurrency import gather
from aiozkconsumer._resource import AsyncService
from aiozkconsumer.errors import (
    BrokerNotAvailableError,
    ZookeeperConnectionError,
    ZookeeperSessionExpiredError,
)
from aiozkconsumer.testing import _readiness, _records, _render
from aiozkconsumer.testing._clients import (
    CLOSE_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    write_zookeeper_nodes,
)
from aiozkconsumer.testing._errors import ClusterStartError, LocalClusterError, ProduceError
from aiozkconsumer.testing._processes import HOST, Server, free_ports, run_to_end, tail, terminate
from aiozkconsumer.testing.links import LinkTarget, ProxyLink, _LinkSet
from aiozkconsumer.testing.provision import FLAVOURS, provision_kafka, require_tools
from aiozkconsumer.testing.proxy import ProxyError
from aiozkconsumer.testing.security import (
    LISTENER_PROTOCOLS,
    SASL_MECHANISMS,
    SECURE_LISTENERS,
    TEST_USER,
    ClusterSecurity,
    SecurityMaterial,
    create_material,
    scram_user_node,
)
from aiozkconsumer.zk.client import close_raw

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


_EXPIRE_ATTEMPTS = 5
_PRINCIPAL_POLL_S = 0.05
# The connection of a completed request in the brokers' request log (kafka.request.logger
# at DEBUG): Kafka 3.9 and 4.x both end the line's JSON with these fields. The last match
# of a line is the one: a request's own body may hold "principal" fields too (ACL requests).
_CONNECTION_RE = re.compile(
    r'"securityProtocol":"[A-Z_]+","principal":"([^"]*)","listener":"([^"]*)"'
)


class LocalCluster(AsyncService):
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

    Raises:
        ValueError: if ``brokers < 1``, ``zk_tick_time_ms < 1``, ``startup_timeout_s <= 0``,
            ``proxy_links < 0``, ``flavour`` is not ``"zookeeper"`` or ``"kraft"``, or
            ``broker_racks`` does not name a non-blank rack per broker.
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
        if security is True:
            security = ClusterSecurity()
        elif security is False:
            security = None
        if security is not None and not isinstance(security, ClusterSecurity):
            raise TypeError(f"security must be a bool, a ClusterSecurity or None, got {security!r}")
        racks = None if broker_racks is None else [str(r) for r in broker_racks]
        if racks is not None and (len(racks) != brokers or not all(r.strip() for r in racks)):
            raise ValueError(
                f"broker_racks must name a non-blank rack for each of the {brokers} brokers, "
                f"got {broker_racks!r}"
            )
        self._racks = racks
        self._request_log = request_log
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
        self._zookeeper: Server | None = None
        self._brokers: dict[int, Server] = {}
        self._start_seconds: float | None = None
        self._flavour = flavour
        # KRaft only: the storage format command per broker, run before the first start.
        self._format_cmds: dict[int, list[str]] = {}
        self._link_count = proxy_links
        self._links: list[ProxyLink] = []
        # The links' proxies and their thread, from start() until stop().
        self._link_set: _LinkSet | None = None
        self._security_options: ClusterSecurity | None = security
        # Secured clusters only, from start() on: the key material, each broker's secured
        # listener ports, ZooKeeper's TLS port, the brokers' request logs.
        self._material: SecurityMaterial | None = None
        self._secure_ports: dict[int, dict[str, int]] = {}
        self._zk_secure_port: int | None = None
        self._request_logs: dict[int, Path] = {}
        # Request log -> (bytes parsed so far, the (listener, principal) pairs in them): the
        # logs only grow, and are polled by wait_for_principal.
        self._logged_connections: dict[Path, tuple[int, set[tuple[str, str]]]] = {}

    # ---- description -----------------------------------------------------------------

    def __repr__(self) -> str:
        parts = [self._state.name, self._flavour]
        if self._zookeeper is not None:
            parts.append(f"zookeeper={self._zookeeper.address} ({self._zookeeper.status()})")
        for broker_id, server in self._brokers.items():
            parts.append(f"broker {broker_id}={server.address} ({server.status()})")
        if self._link_count:
            parts.append(f"{self._link_count} proxied links")
        if self._security_options is not None:
            parts.append("secured")
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

    # ---- secured listeners -----------------------------------------------------------

    @property
    def security_options(self) -> ClusterSecurity | None:
        """The security options given (``security=True`` gives the defaults), or None."""
        return self._security_options

    @property
    def secured(self) -> bool:
        """True if the cluster has secured listeners (``security`` was given)."""
        return self._security_options is not None

    @property
    def security(self) -> SecurityMaterial:
        """The secured cluster's certificates, keys and passwords (made by :meth:`start`).

        Paths: ``ca_file``, ``client_cert_file``, ``client_key_file``, ``wrong_ca_file``,
        ``server_keystore_file``, ``wrong_host_keystore_file``; users: ``passwords``
        (``{"alice": ..., "admin": ...}``), ``password(user)``; ZooKeeper's super user:
        ``zookeeper_super_user`` / ``zookeeper_super_password``; and
        ``client_ssl_context()``. See
        :class:`~aiozkconsumer.testing.security.SecurityMaterial`.

        Raises:
            LocalClusterError: if the cluster is not secured or was never started.
        """
        if self._security_options is None:
            raise LocalClusterError("the cluster has no secured listeners (security=None)")
        if self._material is None:
            raise LocalClusterError("the cluster's key material is made when it starts")
        return self._material

    @property
    def zookeeper_secure_connect(self) -> str:
        """Connect string of ZooKeeper's TLS port, ``"127.0.0.1:<port>"``.

        The same server as :attr:`zookeeper_connect`; TLS clients trust
        ``security.ca_file`` and may present the client certificate (x509 id
        :data:`~aiozkconsumer.testing.security.CLIENT_DN`).

        Raises:
            LocalClusterError: if ZooKeeper has no TLS port (``zookeeper_tls`` not set) or
                the cluster was never started.
        """
        options = self._security_options
        if options is None or not options.zookeeper_tls:
            raise LocalClusterError(
                "ZooKeeper has no TLS port: use security=ClusterSecurity(zookeeper_tls=True)"
            )
        if self._zk_secure_port is None:
            raise LocalClusterError("the cluster was not started")
        return f"{HOST}:{self._zk_secure_port}"

    def bootstrap_servers_for(self, listener: str) -> str:
        """Bootstrap servers of one listener, ``"127.0.0.1:<port>,..."`` in broker id order.

        Args:
            listener: ``"PLAINTEXT"`` (the same as :attr:`bootstrap_servers`: the direct
                path, also with proxied links), or on a secured cluster ``"SSL"``,
                ``"MTLS"``, ``"SASL_SSL"``, ``"SASL_PLAINTEXT"`` or ``"SSL_WRONG_HOST"``
                (case does not matter).

        Raises:
            ValueError: if there is no such listener (or the cluster is not secured).
            LocalClusterError: if the cluster was never started.
        """
        name = listener.upper()
        if name == "PLAINTEXT":
            return self.bootstrap_servers
        if name not in SECURE_LISTENERS or self._security_options is None:
            known = ("PLAINTEXT", *SECURE_LISTENERS) if self.secured else ("PLAINTEXT",)
            raise ValueError(f"no listener {listener!r}; this cluster has {', '.join(known)}")
        if not self._secure_ports:
            raise LocalClusterError("the cluster was not started")
        return ",".join(f"{HOST}:{ports[name]}" for ports in self._secure_ports.values())

    def client_properties(
        self, listener: str, mechanism: str | None = None, *, user: str = TEST_USER
    ) -> dict[str, str]:
        """The Java-client-style consumer properties that reach the brokers on a listener.

        Keys (only those the listener needs): ``bootstrap.servers``, ``security.protocol``
        (``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``), ``ssl.cafile`` (TLS
        listeners), ``ssl.certfile`` and ``ssl.keyfile`` (``MTLS`` only), ``sasl.mechanism``
        and, except for OAUTHBEARER, ``sasl.username`` and ``sasl.password``. For
        OAUTHBEARER no token is given: make one with
        :func:`~aiozkconsumer.testing.security.unsecured_jwt`. E.g.
        ``client_properties("SASL_SSL", "SCRAM-SHA-512")`` ->
        ``{"bootstrap.servers": "127.0.0.1:40123", "security.protocol": "SASL_SSL",
        "ssl.cafile": ".../security/ca.pem", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice", "sasl.password": "..."}``.

        Args:
            listener: as for :meth:`bootstrap_servers_for`.
            mechanism: the SASL mechanism (required on ``SASL_SSL`` and ``SASL_PLAINTEXT``,
                refused elsewhere): ``"PLAIN"``, ``"SCRAM-SHA-256"``, ``"SCRAM-SHA-512"`` or
                ``"OAUTHBEARER"``.
            user: whose name and password (``"alice"`` or ``"admin"``).

        Returns:
            A new dict of strings.

        Raises:
            ValueError: for an unknown listener or mechanism, a mechanism missing on (or
                given for a non-) SASL listener, or an unknown user.
            LocalClusterError: if the cluster was never started.
        """
        name = listener.upper()
        props = {"bootstrap.servers": self.bootstrap_servers_for(name)}
        protocol = LISTENER_PROTOCOLS[name]
        props["security.protocol"] = protocol
        sasl = protocol.startswith("SASL_")
        if mechanism is not None and not sasl:
            raise ValueError(f"{name} is not a SASL listener; no mechanism applies")
        if protocol == "PLAINTEXT":
            return props
        material = self.security
        if protocol.endswith("SSL"):
            props["ssl.cafile"] = str(material.ca_file)
        if name == "MTLS":
            props["ssl.certfile"] = str(material.client_cert_file)
            props["ssl.keyfile"] = str(material.client_key_file)
        if not sasl:
            return props
        chosen = (mechanism or "").upper()
        if chosen not in SASL_MECHANISMS:
            raise ValueError(
                f"{name} needs a SASL mechanism, one of {', '.join(SASL_MECHANISMS)}; "
                f"got {mechanism!r}"
            )
        props["sasl.mechanism"] = chosen
        if chosen != "OAUTHBEARER":
            if user not in material.passwords:
                raise ValueError(f"no user {user!r}; the users are {', '.join(material.users)}")
            props["sasl.username"] = user
            props["sasl.password"] = material.passwords[user]
        return props

    def zookeeper_client_properties(self, *, client_cert: bool = True) -> dict[str, str]:
        """Consumer properties that reach ZooKeeper over TLS.

        ``{"zookeeper.connect": <zookeeper_secure_connect>, "zookeeper.ssl.client.enable":
        "true", "zookeeper.ssl.cafile": ..., "zookeeper.ssl.certfile": ...,
        "zookeeper.ssl.keyfile": ...}``.

        Args:
            client_cert: include the client certificate and key (the connection then
                authenticates as ``x509:`` :data:`~aiozkconsumer.testing.security.CLIENT_DN`).

        Raises:
            LocalClusterError: if ZooKeeper has no TLS port or the cluster was never started.
        """
        props = {
            "zookeeper.connect": self.zookeeper_secure_connect,
            "zookeeper.ssl.client.enable": "true",
            "zookeeper.ssl.cafile": str(self.security.ca_file),
        }
        if client_cert:
            props["zookeeper.ssl.certfile"] = str(self.security.client_cert_file)
            props["zookeeper.ssl.keyfile"] = str(self.security.client_key_file)
        return props

    @property
    def broker_racks(self) -> dict[int, str]:
        """Broker id -> its ``broker.rack`` (empty when built without ``broker_racks``)."""
        return dict(enumerate(self._racks or ()))

    @property
    def request_log_files(self) -> dict[int, Path]:
        """Broker id -> its request log (``request_log=True``, or secured clusters with
        ``request_log``; else empty).

        One line per completed request, with its principal and listener; read by
        :meth:`principals_seen` and :meth:`requests_logged`.
        """
        return dict(self._request_logs)

    def requests_logged(self, api_key: int, *, client_id: str | None = None) -> dict[int, int]:
        """How many requests of one API each broker served, from the brokers' request logs.

        A request is logged just after its response is sent, so one answered a moment ago
        may not be counted yet.

        Args:
            api_key: the request's API key (1: Fetch).
            client_id: only requests with this ``client.id`` in their header (a broker's
                own replica fetches carry e.g. ``broker-1-fetcher-0``).

        Returns:
            Broker id -> the number of such requests in its log.

        Raises:
            LocalClusterError: the cluster was not started with a request log.
        """
        if not self._request_logs:
            raise LocalClusterError("requests_logged needs a started cluster with request_log")
        head = f'"requestApiKey":{int(api_key)},'
        client = None if client_id is None else f'"clientId":{json.dumps(client_id)}'
        counts: dict[int, int] = {}
        for broker_id, path in self._request_logs.items():
            n = 0
            with contextlib.suppress(FileNotFoundError), path.open(encoding="utf-8") as f:
                for line in f:
                    if head in line and (client is None or client in line):
                        n += 1
            counts[broker_id] = n
        return counts

    def principals_seen(
        self, broker_id: int | None = None, *, listener: str | None = None
    ) -> set[str]:
        """The principals the brokers served requests for, from their request logs.

        A connection that authenticated (TLS client certificate, SASL) shows up with the
        principal the broker gave it, e.g. ``{"User:ANONYMOUS", "User:alice"}``: the
        cluster's own PLAINTEXT clients (and, in KRaft, the controller's traffic) are
        ``User:ANONYMOUS``. A request is logged just after its response is sent: to check
        a connection that made a single request, use :meth:`wait_for_principal`.

        Args:
            broker_id: one broker's log only (default: every broker).
            listener: only requests that came in on this listener (e.g. ``"SASL_SSL"``).

        Returns:
            The principals, as ``"<type>:<name>"`` strings.

        Raises:
            LocalClusterError: if the cluster is not secured, was not started, or was
                started with ``request_log=False``.
            KeyError: if there is no such broker.
        """
        if self._security_options is None or not self._security_options.request_log:
            raise LocalClusterError("principals_seen needs a secured cluster with request_log=True")
        if not self._request_logs:
            raise LocalClusterError("the cluster was not started")
        if broker_id is None:
            files = list(self._request_logs.values())
        else:
            self._broker(broker_id)
            files = [self._request_logs[broker_id]]
        wanted = None if listener is None else listener.upper()
        return {
            principal
            for path in files
            for where, principal in self._connections_logged(path)
            if wanted is None or where.upper() == wanted
        }

    def _connections_logged(self, request_log: Path) -> set[tuple[str, str]]:
        """The ``(listener, principal)`` pairs of a request log, read incrementally."""
        offset, seen = self._logged_connections.get(request_log, (0, set()))
        try:
            with request_log.open("rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:  # the broker has not logged a request yet
            return seen
        complete = data.rfind(b"\n") + 1  # a line being written is read next time
        for line in data[:complete].decode("utf-8", errors="replace").splitlines():
            matches = _CONNECTION_RE.findall(line)
            if matches:
                principal, where = matches[-1]
                seen.add((where, principal))
        self._logged_connections[request_log] = (offset + complete, seen)
        return seen

    async def wait_for_principal(
        self,
        principal: str,
        broker_id: int | None = None,
        *,
        listener: str | None = None,
        time_limit: float = 10.0,
    ) -> None:
        """Wait until :meth:`principals_seen` includes ``principal``.

        Args:
            principal: e.g. ``"User:alice"``.
            broker_id: as for :meth:`principals_seen`.
            listener: as for :meth:`principals_seen`.
            time_limit: seconds.

        Raises:
            LocalClusterError: if it does not show up within ``time_limit`` (the message
                lists what was seen), or as for :meth:`principals_seen`.
        """
        deadline = time.monotonic() + time_limit
        while True:
            seen = self.principals_seen(broker_id, listener=listener)
            if principal in seen:
                return
            if time.monotonic() > deadline:
                where = f" on {listener}" if listener else ""
                raise LocalClusterError(
                    f"no request from {principal}{where} within {time_limit:.0f} s; "
                    f"seen: {sorted(seen)}"
                )
            await asyncio.sleep(_PRINCIPAL_POLL_S)

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
            f"==== {server} ({path}) ====\n{tail(path, lines)}" for server, path in files.items()
        )

    def mark_failed(self) -> None:
        """Record a failure: :meth:`stop` will keep the work directory (logs, data)."""
        self._failed = True

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
                await gather([self._wait_zookeeper(), self._start_kraft_brokers()])
            else:
                await self._wait_zookeeper(tls=False)
                # The brokers use the plain port; the TLS one (whose first handshake costs a
                # cold JVM a second or two) comes up meanwhile.
                await gather([self._wait_zookeeper_tls(), self._start_zk_brokers()])
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
                await terminate(brokers)
            if self._zookeeper is not None:
                await terminate([self._zookeeper])
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
        await _records.create_topic(
            self._live_bootstrap, name, partitions, replication_factor, config
        )
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
        return await _records.produce(self._live_bootstrap(), topic, records, partition)

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
        return await _records.produce_to_partitions(
            self._live_bootstrap(), topic, records_by_partition
        )

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
            await terminate([server])
        if not self.kraft:
            await _readiness.wait_deregistered(
                self.zookeeper_connect, broker_id, time_limit=self._startup_timeout_s
            )
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
        await terminate([self._zk()])

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
        # The owner, whose connection the server drops when this one attaches, reconnects
        # within about 100 ms and may take the session back before this attach completes
        # (aiozk then opens a fresh session here): try again a few times.
        for _ in range(_EXPIRE_ATTEMPTS):
            zk = ZKClient(self.zookeeper_connect, session_timeout=10)
            zk.session.session_id = session_id
            zk.session.password = password
            try:
                try:
                    async with asyncio.timeout(REQUEST_TIMEOUT_S):
                        await zk.start()
                except TimeoutError as exc:
                    raise ZookeeperConnectionError(
                        f"no ZooKeeper session with {self.zookeeper_connect}"
                    ) from exc
                # aiozk silently opens a fresh session when the server refuses the old one.
                attached = zk.session.session_id == session_id
            finally:
                await close_raw(zk, CLOSE_TIMEOUT_S)
            if attached:
                break
        if not attached:
            raise ZookeeperSessionExpiredError(
                f"ZooKeeper session {session_id:#x} is not alive (already expired or closed, "
                "or wrong password)"
            )
        log.info("expired ZooKeeper session %#x", session_id)

    # ---- internals: configuration ----------------------------------------------------

    def _zk(self) -> Server:
        if self._zookeeper is None:
            raise LocalClusterError("the cluster was not started")
        return self._zookeeper

    def _broker(self, broker_id: int) -> Server:
        try:
            return self._brokers[broker_id]
        except KeyError:
            raise KeyError(f"no broker {broker_id} in {self!r}") from None

    def _require_running(self) -> None:
        if self._state is not ClusterState.RUNNING:
            raise LocalClusterError(f"the cluster is not running ({self._state.name})")

    def _configure(self, java: str, zk_libs: Path, broker_libs: Path) -> None:
        """Create the work directory and write every config; build the servers and links.

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
        if self._request_log:
            self._request_logs = {
                broker_id: logs / f"broker-{broker_id}-requests.log"
                for broker_id in self.broker_ids
            }
        # KRaft needs one more port: the controller listener of broker 0. Proxied links need,
        # per link, a listener on each broker and a proxy to ZooKeeper and to each broker.
        base = 1 + self._broker_count + (1 if self.kraft else 0)
        per_link = 1 + 2 * self._broker_count
        linked = base + self._link_count * per_link
        # A secured cluster needs, after those, each broker's secured listeners and
        # ZooKeeper's TLS port.
        options = self._security_options
        secured = 0
        if options is not None:
            secured = len(SECURE_LISTENERS) * self._broker_count + int(options.zookeeper_tls)
        ports = free_ports(linked + secured)
        zk_port = ports[0]
        broker_ports = dict(zip(self.broker_ids, ports[1 : 1 + self._broker_count], strict=True))
        controller_port = ports[base - 1]
        if self._link_count:
            self._link_set = _LinkSet.build(
                self._link_count, zk_port, self.broker_ids, ports[base:linked]
            )
            self._links = list(self._link_set.links)
        else:
            self._link_set, self._links = None, []

        zk_extra: dict[str, object] = {}
        zk_jvm: list[str] = []
        if options is not None:
            self._configure_security(options, work, ports[linked:])
            zk_jvm = _render.zookeeper_security_options(self.security)
            if self._zk_secure_port is not None:
                zk_extra = _render.zookeeper_security_config(
                    self._zk_secure_port, self.security, options
                )

        zk_dir = work / "zookeeper"
        (zk_dir / "data").mkdir(parents=True, exist_ok=True)
        zk_log = logs / "zookeeper.log"
        (zk_dir / "log4j.properties").write_text(_render.log4j_properties(zk_log))
        (zk_dir / "zoo.cfg").write_text(
            _render.zookeeper_config(self._tick_ms, zk_dir / "data", zk_port, zk_extra)
        )
        zk_cmd = _render.zookeeper_command(
            java, zk_libs, zk_dir / "log4j.properties", zk_dir / "zoo.cfg", zk_jvm
        )
        self._zookeeper = Server("zookeeper", zk_port, zk_cmd, zk_log)

        if self.kraft:
            self._configure_kraft_brokers(java, broker_libs, broker_ports, controller_port)
            return
        for broker_id, port in broker_ports.items():
            name = f"broker-{broker_id}"
            broker_dir = work / name
            (broker_dir / "data").mkdir(parents=True, exist_ok=True)
            broker_log = logs / f"{name}.log"
            log_config = broker_dir / "log4j.properties"
            log_config.write_text(
                _render.log4j_properties(broker_log, self._request_logs.get(broker_id))
            )
            props = _render.zk_broker_properties(
                broker_id,
                port,
                self._link_endpoints(broker_id),
                f"{HOST}:{zk_port}",
                broker_dir / "data",
                self._broker_properties(broker_id),
                secure_ports=self._secure_ports.get(broker_id),
                security=self._security_properties(),
            )
            config = broker_dir / "server.properties"
            config.write_text(_render.properties(props))
            cmd = _render.broker_command(
                java, broker_libs, _render.log4j_option(log_config), config
            )
            self._brokers[broker_id] = Server(name, port, cmd, broker_log)

    def _configure_kraft_brokers(
        self, java: str, libs: Path, broker_ports: Mapping[int, int], controller_port: int
    ) -> None:
        """Write the KRaft nodes' configs; build their servers and storage format commands.

        Node 0 is ``broker,controller``, formatted ``--standalone`` (a single-voter dynamic
        quorum); the others are brokers only, formatted ``--no-initial-controllers`` (see
        :func:`~aiozkconsumer.testing._render.kraft_broker_properties`). A log directory
        formatted by an earlier run (a reused ``work_dir``) keeps its cluster id
        (``--ignore-formatted``).
        """
        work = self.work_dir
        controller = f"{HOST}:{controller_port}"
        cluster_id = (
            _render.read_cluster_id(
                work / f"broker-{_render.KRAFT_CONTROLLER_ID}" / "data" / "meta.properties"
            )
            or _render.new_cluster_id()
        )
        for broker_id, port in broker_ports.items():
            name = f"broker-{broker_id}"
            broker_dir = work / name
            (broker_dir / "data").mkdir(parents=True, exist_ok=True)
            broker_log = work / "logs" / f"{name}.log"
            log_config = broker_dir / "log4j2.properties"
            log_config.write_text(
                _render.log4j2_properties(broker_log, self._request_logs.get(broker_id))
            )
            props = _render.kraft_broker_properties(
                broker_id,
                port,
                self._link_endpoints(broker_id),
                controller,
                broker_dir / "data",
                self._broker_properties(broker_id),
                secure_ports=self._secure_ports.get(broker_id),
                security=self._security_properties(),
            )
            config = broker_dir / "server.properties"
            config.write_text(_render.properties(props))
            logging_option = _render.log4j2_option(log_config)
            cmd = _render.broker_command(java, libs, logging_option, config)
            self._brokers[broker_id] = Server(name, port, cmd, broker_log)
            is_controller = broker_id == _render.KRAFT_CONTROLLER_ID
            # SCRAM users go into the bootstrap metadata, which only the controller reads.
            scram = (
                _render.scram_format_arguments(self.security.passwords)
                if self.secured and is_controller
                else []
            )
            self._format_cmds[broker_id] = _render.storage_format_command(
                java,
                libs,
                logging_option,
                config,
                cluster_id,
                controller=is_controller,
                extra_arguments=scram,
            )

    def _configure_security(
        self, options: ClusterSecurity, work: Path, ports: Sequence[int]
    ) -> None:
        """Make the key material; assign the secured listeners' and ZooKeeper's TLS ports.

        Args:
            options: the security options.
            work: the work directory (the material goes to ``security/``).
            ports: the free ports reserved for them, in order.
        """
        self._material = create_material(work / "security", options)
        free = iter(ports)
        self._secure_ports = {
            broker_id: {name: next(free) for name in SECURE_LISTENERS}
            for broker_id in self.broker_ids
        }
        self._zk_secure_port = next(free) if options.zookeeper_tls else None
        if options.request_log:
            self._request_logs = {
                broker_id: work / "logs" / f"broker-{broker_id}-requests.log"
                for broker_id in self.broker_ids
            }

    def _broker_properties(self, broker_id: int) -> dict[str, str]:
        """The broker's ``server.properties`` beyond the defaults: its rack (``broker_racks``)
        under the cluster's ``broker_properties``."""
        racks = _render.rack_properties(self._racks[broker_id]) if self._racks else {}
        return {**racks, **self._broker_overrides}

    def _security_properties(self) -> dict[str, str] | None:
        """The secured listeners' ``server.properties`` entries (None if not secured)."""
        options = self._security_options
        if options is None:
            return None
        return _render.security_properties(self.security, options)

    def _link_endpoints(self, broker_id: int) -> list[_render.LinkEndpoint]:
        """The broker's listener per proxied link (none without links)."""
        return [] if self._link_set is None else self._link_set.endpoints(broker_id)

    # ---- internals: proxies ----------------------------------------------------------

    async def _start_proxies(self) -> None:
        """Start the links' proxies (before the servers: a proxy resolves its upstream at
        each connection)."""
        if self._link_set is None:
            return
        try:
            await self._link_set.start()
        except (ProxyError, TimeoutError) as exc:
            raise ClusterStartError(
                "proxies", f"a proxy did not start: {exc}", "", self._work_dir
            ) from exc

    def _stop_proxies(self) -> None:
        """Close every proxy and stop their thread (idempotent; never raises)."""
        link_set, self._link_set = self._link_set, None
        if link_set is not None:
            link_set.close()

    # ---- internals: processes --------------------------------------------------------

    async def _start_kraft_brokers(self) -> None:
        """Format every KRaft node's storage, start the nodes and wait until they serve."""
        await gather([self._format_storage(b) for b in self._brokers])
        for server in self._brokers.values():
            server.spawn()
        await self._wait_brokers_ready(list(self._brokers))

    async def _start_zk_brokers(self) -> None:
        """ZooKeeper flavour, ZooKeeper serving: start the brokers, wait until they serve.

        A secured cluster's SCRAM users are written to ZooKeeper first.
        """
        if self.secured:
            await self._create_zookeeper_scram_users()
        for server in self._brokers.values():
            server.spawn()
        await self._wait_brokers_ready(list(self._brokers))

    async def _format_storage(self, broker_id: int) -> None:
        """Run ``kafka-storage format`` for one KRaft node; its output goes to its log."""
        server = self._brokers[broker_id]
        tool = Server(
            f"{server.name} storage format", 0, self._format_cmds[broker_id], server.log_file
        )
        code = await run_to_end(tool, self._startup_timeout_s)
        if code is None:
            raise self._start_error(
                server,
                f"kafka-storage format did not finish within {self._startup_timeout_s:.0f} s",
            )
        if code != 0:
            raise self._start_error(server, f"kafka-storage format exited with code {code}")

    async def _stop_kraft_brokers(self) -> None:
        """Stop the broker-only nodes, then the controller node.

        In that order, because a broker's controlled shutdown goes through the controller;
        without a live (unpaused) controller it would only hang, so those are SIGKILLed.
        """
        controller = self._brokers.get(_render.KRAFT_CONTROLLER_ID)
        others = [
            s for b, s in self._brokers.items() if b != _render.KRAFT_CONTROLLER_ID and s.alive()
        ]
        if others and not (controller is not None and controller.alive() and not controller.paused):
            for server in others:
                server.kill_now()
        await terminate(others)
        if controller is not None:
            await terminate([controller])

    def _kill_all(self) -> None:
        for server in [*self._brokers.values(), self._zookeeper]:
            if server is not None:
                server.kill_now()

    def _remove_work_dir(self) -> None:
        work = self._work_dir
        if work is None or self._keep_work_dir or self._failed or self._given_work_dir:
            return
        shutil.rmtree(work, ignore_errors=True)

    # ---- internals: waiting ----------------------------------------------------------

    def _start_error(self, server: Server, reason: str) -> ClusterStartError:
        self._failed = True
        return _readiness.start_error(server, reason, self._work_dir)

    async def _failing_start(self, waiting: Awaitable[None]) -> None:
        """Await a readiness check; a :class:`ClusterStartError` records a failure."""
        try:
            await waiting
        except ClusterStartError:
            self._failed = True
            raise

    async def _wait_zookeeper(self, *, tls: bool = True) -> None:
        """Wait until ZooKeeper answers ``ruok`` with ``imok`` and serves requests (on its
        TLS port too, if it has one, unless ``tls`` is False)."""
        await self._failing_start(
            _readiness.wait_zookeeper(
                self._zk(), time_limit=self._startup_timeout_s, work_dir=self._work_dir
            )
        )
        if tls:
            await self._wait_zookeeper_tls()

    async def _wait_zookeeper_tls(self) -> None:
        """Wait until ZooKeeper's TLS port (if any) answers ``ruok`` and ``srvr`` over TLS."""
        if self._zk_secure_port is not None:
            context = self.security.client_ssl_context(client_cert=True)
            await self._failing_start(
                _readiness.wait_zookeeper(
                    self._zk(),
                    time_limit=self._startup_timeout_s,
                    work_dir=self._work_dir,
                    port=self._zk_secure_port,
                    ssl_context=context,
                )
            )

    async def _create_zookeeper_scram_users(self) -> None:
        """ZooKeeper flavour: store every user's SCRAM credentials in ZooKeeper.

        What ``kafka-configs --zookeeper ... --alter --add-config 'SCRAM-SHA-256=[...]'
        --entity-type users`` writes, without its JVM start-up: the node
        ``/config/users/<name>``, which a broker loads when it starts (so this runs before
        the brokers do, and needs no change notification).
        """
        nodes = {
            f"/config/users/{user}": scram_user_node(password)
            for user, password in self.security.passwords.items()
        }
        await write_zookeeper_nodes(
            self.zookeeper_connect, nodes, time_limit=self._startup_timeout_s
        )

    async def _wait_brokers_ready(self, broker_ids: Sequence[int]) -> None:
        """Wait until the brokers are registered (ZooKeeper flavour) and answer metadata
        requests listing every broker."""
        if self.kraft:
            waiting = _readiness.wait_kraft_brokers(
                self._brokers,
                broker_ids,
                time_limit=self._startup_timeout_s,
                work_dir=self._work_dir,
            )
        else:
            waiting = _readiness.wait_zk_brokers(
                self.zookeeper_connect,
                self._brokers,
                broker_ids,
                time_limit=self._startup_timeout_s,
                work_dir=self._work_dir,
            )
        await self._failing_start(waiting)
        for broker_id in broker_ids:
            ports = self._secure_ports.get(broker_id)
            if ports:
                await self._failing_start(
                    _readiness.wait_listening(
                        self._brokers[broker_id],
                        list(ports.values()),
                        time_limit=self._startup_timeout_s,
                        work_dir=self._work_dir,
                    )
                )

    async def _wait_topic_ready(self, topic: str, partitions: int) -> None:
        await _readiness.wait_topic(
            None if self.kraft else self.zookeeper_connect,
            self._live_bootstrap,
            self._brokers,
            topic,
            partitions,
            time_limit=self._startup_timeout_s,
        )

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

    async def _list_offsets(self, topic: str, *, latest: bool) -> dict[int, int]:
        self._require_running()
        return await _records.list_offsets(self._live_bootstrap, topic, latest=latest)
