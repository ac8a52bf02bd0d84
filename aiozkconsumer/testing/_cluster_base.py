"""The state every part of the local cluster shares, and what it tells about itself.

:class:`ClusterCore` holds the settings, the lifecycle state, the servers and what a start
made (work directory, links, key material, ports); the parts of the test kit's cluster
(``_cluster_config``, ``_cluster_servers``, ``_cluster_faults``, ``_cluster_topics``,
``_cluster_listeners``) extend it, and :class:`~aiozkconsumer.testing.cluster.LocalCluster`
joins them. Its accessors (addresses, log files, pids, the key material) read that state and
start nothing.
"""

from __future__ import annotations

import enum
from pathlib import Path

from aiozkconsumer._resource import AsyncService
from aiozkconsumer.testing._cluster_settings import ClusterSettings
from aiozkconsumer.testing._errors import LocalClusterError
from aiozkconsumer.testing._processes import Server, tail
from aiozkconsumer.testing._request_log import ConnectionsLogged
from aiozkconsumer.testing.links import ProxyLink, _LinkSet
from aiozkconsumer.testing.security import ClusterSecurity, SecurityMaterial

__all__ = ["ClusterCore", "ClusterState"]


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


class ClusterCore(AsyncService):
    """The shared state of a local cluster and its read-only accessors.

    Args:
        settings: the checked settings.
    """

    def __init__(self, settings: ClusterSettings) -> None:
        self._settings = settings
        self._work_dir: Path | None = None
        self._state = ClusterState.NEW
        self._failed = False
        self._zookeeper: Server | None = None
        self._brokers: dict[int, Server] = {}
        self._start_seconds: float | None = None
        # KRaft only: the storage format command per broker, run before the first start.
        self._format_cmds: dict[int, list[str]] = {}
        self._links: list[ProxyLink] = []
        # The links' proxies and their thread, from start() until stop().
        self._link_set: _LinkSet | None = None
        # Secured clusters only, from start() on: the key material, each broker's secured
        # listener ports, ZooKeeper's TLS port.
        self._material: SecurityMaterial | None = None
        self._secure_ports: dict[int, dict[str, int]] = {}
        self._zk_secure_port: int | None = None
        # The brokers' request logs (request_log, or a secured cluster's), from start() on,
        # and the connections read from them so far.
        self._request_logs: dict[int, Path] = {}
        self._logged_connections = ConnectionsLogged()

    # ---- description -----------------------------------------------------------------

    def __repr__(self) -> str:
        parts = [self._state.name, self._settings.flavour]
        if self._zookeeper is not None:
            parts.append(f"zookeeper={self._zookeeper.address} ({self._zookeeper.status()})")
        for broker_id, server in self._brokers.items():
            parts.append(f"broker {broker_id}={server.address} ({server.status()})")
        if self._settings.proxy_links:
            parts.append(f"{self._settings.proxy_links} proxied links")
        if self._settings.security is not None:
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
        return self._settings.flavour

    @property
    def kraft(self) -> bool:
        """True for the KRaft flavour: the brokers do not use ZooKeeper (no ``/brokers``)."""
        return self._settings.kraft

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
    def security_options(self) -> ClusterSecurity | None:
        """The security options given (``security=True`` gives the defaults), or None."""
        return self._settings.security

    @property
    def secured(self) -> bool:
        """True if the cluster has secured listeners (``security`` was given)."""
        return self._settings.security is not None

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
        if self._settings.security is None:
            raise LocalClusterError("the cluster has no secured listeners (security=None)")
        if self._material is None:
            raise LocalClusterError("the cluster's key material is made when it starts")
        return self._material

    @property
    def broker_ids(self) -> list[int]:
        """The brokers' ids (``broker.id``, or ``node.id`` in KRaft), ``[0, ..., brokers-1]``."""
        return self._settings.broker_ids

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

    # ---- internals -------------------------------------------------------------------

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
