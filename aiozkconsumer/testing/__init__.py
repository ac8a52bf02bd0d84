"""Test support: a real local ZooKeeper + Kafka cluster and pytest fixtures.

- :class:`LocalCluster` starts ZooKeeper and Kafka brokers as ``java`` processes on free
  loopback ports, with fault tools (kill/pause/restart a broker, stop/start ZooKeeper,
  expire a session for real). Two flavours: ``"zookeeper"`` (Kafka 3.9 brokers in ZooKeeper
  mode, the default) and ``"kraft"`` (Kafka 4.x brokers in KRaft mode; ZooKeeper still runs,
  for the consumers).
- :class:`TcpProxy` (:mod:`aiozkconsumer.testing.proxy`) forwards TCP connections and
  injects network faults (blackhole, delay, reset, refuse); ``LocalCluster(proxy_links=n)``
  puts ``n`` :class:`ProxyLink` sets of them between clients and the servers.
- ``LocalCluster(security=True)`` (or a :class:`ClusterSecurity`) adds secured listeners to
  every broker (``SSL``, ``MTLS``, ``SASL_SSL`` and ``SASL_PLAINTEXT`` with PLAIN, SCRAM and
  OAUTHBEARER) and a TLS port to ZooKeeper, with ``trustme`` certificates
  (:class:`SecurityMaterial`); see :mod:`aiozkconsumer.testing.security` and
  :func:`unsecured_jwt`.
- :mod:`aiozkconsumer.testing.chaos` drives a whole Jepsen-style run: verifiable consumer
  processes through the proxies, a seeded :class:`FaultScheduler` (process kills and pauses,
  session expiry, server restarts, link cuts), then the history check (:func:`run_chaos`,
  :class:`ChaosReport`).
- :class:`SparkStandaloneCluster` (:mod:`aiozkconsumer.testing.spark_cluster`) starts a Spark
  standalone master and workers from the installed PySpark, for jobs with a ``spark://``
  master (pytest fixture ``spark_standalone_cluster``).
- :func:`provision_kafka` fetches the jars from Maven Central into a cache directory
  (``python -m aiozkconsumer.testing.provision [--flavour zk|kraft|all]`` on the command
  line).
- :mod:`aiozkconsumer.testing.plugin` is a pytest plugin (registered automatically via the
  ``pytest11`` entry point) with the fixtures ``zk_kafka_cluster``, ``kraft_cluster``,
  ``any_cluster`` (parametrized over both), ``secure_cluster``, ``secure_kraft_cluster``,
  ``any_secure_cluster``, ``zk_client``, ``any_zk_client``, ``unique_group_id`` and
  ``unique_topic``.

The names are imported lazily, so that ``python -m aiozkconsumer.testing.provision`` runs
the module once, as ``__main__`` (and importing the package stays cheap).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiozkconsumer.testing.chaos import (
        ChaosConfig,
        ChaosReport,
        Fault,
        FaultKind,
        FaultOutcome,
        FaultScheduler,
        run_chaos,
    )
    from aiozkconsumer.testing.cluster import (
        ClusterStartError,
        ClusterState,
        LocalCluster,
        LocalClusterError,
        ProduceError,
    )
    from aiozkconsumer.testing.java_member import JavaConsumerMember
    from aiozkconsumer.testing.links import ProxyLink
    from aiozkconsumer.testing.provision import ProvisioningError, provision_kafka
    from aiozkconsumer.testing.proxy import FaultMode, ProxyError, ProxyStatistics, TcpProxy
    from aiozkconsumer.testing.security import ClusterSecurity, SecurityMaterial, unsecured_jwt
    from aiozkconsumer.testing.spark_cluster import SparkStandaloneCluster

__all__ = [
    "ChaosConfig",
    "ChaosReport",
    "ClusterSecurity",
    "ClusterStartError",
    "ClusterState",
    "Fault",
    "FaultKind",
    "FaultMode",
    "FaultOutcome",
    "FaultScheduler",
    "JavaConsumerMember",
    "LocalCluster",
    "LocalClusterError",
    "ProduceError",
    "ProvisioningError",
    "ProxyError",
    "ProxyLink",
    "ProxyStatistics",
    "SecurityMaterial",
    "SparkStandaloneCluster",
    "TcpProxy",
    "provision_kafka",
    "run_chaos",
    "unsecured_jwt",
]

_WHERE = {
    "ChaosConfig": "chaos",
    "ChaosReport": "chaos",
    "ClusterSecurity": "security",
    "ClusterStartError": "cluster",
    "ClusterState": "cluster",
    "Fault": "chaos",
    "FaultKind": "chaos",
    "FaultMode": "proxy",
    "FaultOutcome": "chaos",
    "FaultScheduler": "chaos",
    "JavaConsumerMember": "java_member",
    "LocalCluster": "cluster",
    "LocalClusterError": "cluster",
    "ProduceError": "cluster",
    "ProvisioningError": "provision",
    "ProxyError": "proxy",
    "ProxyLink": "links",
    "ProxyStatistics": "proxy",
    "SecurityMaterial": "security",
    "SparkStandaloneCluster": "spark_cluster",
    "TcpProxy": "proxy",
    "provision_kafka": "provision",
    "run_chaos": "chaos",
    "unsecured_jwt": "security",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
