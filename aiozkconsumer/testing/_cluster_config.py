"""Laying a local cluster out before anything runs: the work directory, the ports, every
server's config files and command line, the proxied links and the key material.

:class:`ClusterConfiguration` writes what :mod:`~aiozkconsumer.testing._render` renders into
the work directory and builds the (not yet started) servers of a
:class:`~aiozkconsumer.testing.cluster.LocalCluster`; the port layout is
:func:`~aiozkconsumer.testing._cluster_settings.plan_ports`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

from aiozkconsumer.testing import _render
from aiozkconsumer.testing._cluster_base import ClusterCore
from aiozkconsumer.testing._cluster_settings import PortPlan, plan_ports, request_log_paths
from aiozkconsumer.testing._processes import HOST, Server, free_ports
from aiozkconsumer.testing.links import _LinkSet
from aiozkconsumer.testing.security import create_material

__all__ = ["ClusterConfiguration"]


class ClusterConfiguration(ClusterCore):
    """Writes a cluster's configs and builds its servers (``_configure``)."""

    def _configure(self, java: str, zk_libs: Path, broker_libs: Path, attempt: int = 1) -> None:
        """Create the work directory and write every config; build the servers and links.

        Args:
            java: the ``java`` executable.
            zk_libs: the jars ZooKeeper runs from (always Kafka 3.9's).
            broker_libs: the jars the brokers (and, for KRaft, the storage tool) run from.
            attempt: the start attempt (from 1). A later attempt (a port was taken meanwhile)
                runs in a directory of its own, so that no data of the failed one (a broker's
                registration in ZooKeeper) is reused: ``<work_dir>/start-attempt-<n>`` when
                the caller gave the work directory, else a fresh temporary one.
        """
        settings = self._settings
        if settings.work_dir is not None:
            work = settings.work_dir
            if attempt > 1:
                work = work / f"start-attempt-{attempt}"
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(tempfile.mkdtemp(prefix="aiozkconsumer-cluster-"))
        self._work_dir = work = work.resolve()
        logs = work / "logs"
        logs.mkdir(exist_ok=True)
        self._request_logs = request_log_paths(settings, logs)
        plan = plan_ports(settings, free_ports(PortPlan.count(settings)))
        zk_port = plan.zookeeper
        if settings.proxy_links:
            self._link_set = _LinkSet.build(
                settings.proxy_links, zk_port, self.broker_ids, plan.links
            )
            self._links = list(self._link_set.links)
        else:
            self._link_set, self._links = None, []

        zk_extra: dict[str, object] = {}
        zk_jvm: list[str] = []
        options = settings.security
        if options is not None:
            self._material = create_material(work / "security", options)
            self._secure_ports = {b: dict(ports) for b, ports in plan.secure_listeners.items()}
            self._zk_secure_port = plan.zookeeper_tls
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
            _render.zookeeper_config(settings.zk_tick_time_ms, zk_dir / "data", zk_port, zk_extra)
        )
        zk_cmd = _render.zookeeper_command(
            java, zk_libs, zk_dir / "log4j.properties", zk_dir / "zoo.cfg", zk_jvm
        )
        self._zookeeper = Server("zookeeper", zk_port, zk_cmd, zk_log)

        if self.kraft:
            self._configure_kraft_brokers(java, broker_libs, plan.brokers, plan.controller)
            return
        for broker_id, port in plan.brokers.items():
            self._configure_broker(java, broker_libs, broker_id, port, f"{HOST}:{zk_port}")

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
            config, logging_option = self._configure_broker(java, libs, broker_id, port, controller)
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

    def _configure_broker(
        self, java: str, libs: Path, broker_id: int, port: int, metadata: str
    ) -> tuple[Path, str]:
        """Write one broker's directory, log config and ``server.properties``; build its
        server.

        Args:
            java: the ``java`` executable.
            libs: the jars it runs from.
            broker_id: its ``broker.id`` (``node.id`` in KRaft).
            port: its first listener's port.
            metadata: where its metadata comes from, ``"<host>:<port>"``: ZooKeeper, or in
                KRaft the controller listener.

        Returns:
            Its ``server.properties`` file and the JVM's logging option (the KRaft storage
            format command takes both too).
        """
        name = f"broker-{broker_id}"
        broker_dir = self.work_dir / name
        (broker_dir / "data").mkdir(parents=True, exist_ok=True)
        broker_log = self.work_dir / "logs" / f"{name}.log"
        request_log = self._request_logs.get(broker_id)
        if self.kraft:
            log_config = broker_dir / "log4j2.properties"
            log_config.write_text(_render.log4j2_properties(broker_log, request_log))
            logging_option = _render.log4j2_option(log_config)
        else:
            log_config = broker_dir / "log4j.properties"
            log_config.write_text(_render.log4j_properties(broker_log, request_log))
            logging_option = _render.log4j_option(log_config)
        render_properties = (
            _render.kraft_broker_properties if self.kraft else _render.zk_broker_properties
        )
        props = render_properties(
            broker_id,
            port,
            self._link_endpoints(broker_id),
            metadata,
            broker_dir / "data",
            self._settings.broker_overrides(broker_id),
            secure_ports=self._secure_ports.get(broker_id),
            security=self._security_properties(),
        )
        config = broker_dir / "server.properties"
        config.write_text(_render.properties(props))
        cmd = _render.broker_command(
            java, libs, logging_option, config, heap=self._settings.broker_heap
        )
        self._brokers[broker_id] = Server(name, port, cmd, broker_log)
        return config, logging_option

    def _security_properties(self) -> dict[str, str] | None:
        """The secured listeners' ``server.properties`` entries (None if not secured)."""
        options = self._settings.security
        if options is None:
            return None
        return _render.security_properties(self.security, options)

    def _link_endpoints(self, broker_id: int) -> list[_render.LinkEndpoint]:
        """The broker's listener per proxied link (none without links)."""
        return [] if self._link_set is None else self._link_set.endpoints(broker_id)
