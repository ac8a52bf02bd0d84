"""Running a local cluster's servers: starting the proxies, ZooKeeper and the brokers (the
KRaft storage format first), waiting until each really serves, stopping them in the order
that does not hang, and what is left after a stop.

:class:`ServerControl` is the part of :class:`~aiozkconsumer.testing.cluster.LocalCluster`
that :meth:`~aiozkconsumer.testing.cluster.LocalCluster.start`,
:meth:`~aiozkconsumer.testing.cluster.LocalCluster.stop` and the fault tools drive; the
processes themselves are :class:`~aiozkconsumer.testing._processes.Server` objects and the
readiness checks are :mod:`~aiozkconsumer.testing._readiness`.
"""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Sequence

from aiozkconsumer._concurrency import gather
from aiozkconsumer.testing import _readiness, _render
from aiozkconsumer.testing._clients import write_zookeeper_nodes
from aiozkconsumer.testing._cluster_config import ClusterConfiguration
from aiozkconsumer.testing._errors import ClusterStartError
from aiozkconsumer.testing._processes import Server, run_to_end, terminate
from aiozkconsumer.testing.proxy import ProxyError
from aiozkconsumer.testing.security import scram_user_node

__all__ = ["ServerControl"]


class ServerControl(ClusterConfiguration):
    """Starts, waits for and stops a configured cluster's proxies and servers."""

    # ---- proxies ---------------------------------------------------------------------

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

    # ---- processes -------------------------------------------------------------------

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
        limit = self._settings.startup_timeout_s
        code = await run_to_end(tool, limit)
        if code is None:
            raise self._start_error(
                server, f"kafka-storage format did not finish within {limit:.0f} s"
            )
        if code != 0:
            raise self._start_error(server, f"kafka-storage format exited with code {code}")

    async def _stop_zk_brokers(self) -> None:
        """Stop the brokers of the ZooKeeper flavour.

        Without a live ZooKeeper a controlled shutdown would only hang, so they are then
        SIGKILLed.
        """
        brokers = [s for s in self._brokers.values() if s.alive()]
        if brokers and not (self._zookeeper is not None and self._zookeeper.alive()):
            for server in brokers:
                server.kill_now()
        await terminate(brokers)

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
        settings = self._settings
        if work is None or settings.keep_work_dir or self._failed or settings.work_dir:
            return
        shutil.rmtree(work, ignore_errors=True)

    # ---- waiting ---------------------------------------------------------------------

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
                self._zk(), time_limit=self._settings.startup_timeout_s, work_dir=self._work_dir
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
                    time_limit=self._settings.startup_timeout_s,
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
            self.zookeeper_connect, nodes, time_limit=self._settings.startup_timeout_s
        )

    async def _wait_brokers_ready(self, broker_ids: Sequence[int]) -> None:
        """Wait until the brokers are registered (ZooKeeper flavour) and answer metadata
        requests listing every broker."""
        limit = self._settings.startup_timeout_s
        if self.kraft:
            waiting = _readiness.wait_kraft_brokers(
                self._brokers, broker_ids, time_limit=limit, work_dir=self._work_dir
            )
        else:
            waiting = _readiness.wait_zk_brokers(
                self.zookeeper_connect,
                self._brokers,
                broker_ids,
                time_limit=limit,
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
                        time_limit=limit,
                        work_dir=self._work_dir,
                    )
                )
