"""The fault tools of a local cluster: kill, stop, pause, resume and restart a broker, stop and
start ZooKeeper, expire a ZooKeeper session for real, and cut or heal the proxied links.

:class:`FaultTools` is the part of :class:`~aiozkconsumer.testing.cluster.LocalCluster` the
reliability and chaos tests drive; a restarted server is waited for as at start
(:class:`~aiozkconsumer.testing._cluster_servers.ServerControl`).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from aiozk import ZKClient

from aiozkconsumer.errors import ZookeeperConnectionError, ZookeeperSessionExpiredError
from aiozkconsumer.testing import _readiness
from aiozkconsumer.testing._clients import CLOSE_TIMEOUT_S, REQUEST_TIMEOUT_S
from aiozkconsumer.testing._cluster_servers import ServerControl
from aiozkconsumer.testing._errors import LocalClusterError
from aiozkconsumer.testing._processes import terminate
from aiozkconsumer.testing.links import ProxyLink
from aiozkconsumer.zk.client import close_raw

__all__ = ["FaultTools"]

# The facade's logger, as before the split: what users filter on.
log = logging.getLogger("aiozkconsumer.testing.cluster")

_EXPIRE_ATTEMPTS = 5


class FaultTools(ServerControl):
    """Faults injected into a running cluster, for real: signals, restarts, session expiry,
    proxied links."""

    # ---- proxied links ---------------------------------------------------------------

    @property
    def links(self) -> tuple[ProxyLink, ...]:
        """The proxied links (``proxy_links`` of them; empty without), by index.

        Each carries one client's (or a group of clients') traffic to ZooKeeper
        (:attr:`ProxyLink.zookeeper_connect`) and to the brokers
        (:attr:`ProxyLink.bootstrap_servers`), and can be cut and healed on its own.

        Raises:
            LocalClusterError: if links were asked for and the cluster is not started.
        """
        if self._settings.proxy_links and not self._links:
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

    # ---- brokers ---------------------------------------------------------------------

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

    async def stop_broker(self, broker_id: int) -> None:
        """Stop a broker gracefully (SIGTERM: a controlled shutdown, SIGKILL after 15 s) and
        leave it down; :meth:`restart_broker` starts it again.

        A controlled shutdown moves the leaderships the broker holds (the group coordinators
        of its ``__consumer_offsets`` partitions included) to other replicas before it exits.
        KRaft flavour: stopping broker 0 stops the only controller too.

        Args:
            broker_id: the broker's id.

        Raises:
            KeyError: if there is no such broker.
            LocalClusterError: if the cluster is not running.
        """
        self._require_running()
        await terminate([self._broker(broker_id)])

    def pause_broker(self, broker_id: int) -> None:
        """Freeze a broker with SIGSTOP (it keeps its sockets but answers nothing); returns
        once every thread of it is stopped (on Linux), so that a request sent next is not
        served by a thread the signal had not reached yet.

        Args:
            broker_id: the broker's id.

        Raises:
            KeyError: if there is no such broker.
            LocalClusterError: if it is not running, or not stopped within 5 s.
        """
        server = self._broker(broker_id)
        if not server.alive():
            raise LocalClusterError(f"{server.name} is not running")
        server.send_signal(signal.SIGSTOP)
        server.paused = True
        if not server.wait_stopped():
            raise LocalClusterError(f"{server.name} did not stop within 5 s of SIGSTOP")

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
                self.zookeeper_connect, broker_id, time_limit=self._settings.startup_timeout_s
            )
        server.spawn()
        await self._wait_brokers_ready([broker_id])

    # ---- ZooKeeper -------------------------------------------------------------------

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
