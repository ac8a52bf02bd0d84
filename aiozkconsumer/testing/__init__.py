"""Test support: a real local ZooKeeper + Kafka cluster and pytest fixtures.

- :class:`LocalCluster` starts ZooKeeper and Kafka brokers as ``java`` processes on free
  loopback ports, with fault tools (kill/pause/restart a broker, stop/start ZooKeeper,
  expire a session for real). Two flavours: ``"zookeeper"`` (Kafka 3.9 brokers in ZooKeeper
  mode, the default) and ``"kraft"`` (Kafka 4.x brokers in KRaft mode; ZooKeeper still runs,
  for the consumers).
- :func:`provision_kafka` fetches the jars from Maven Central into a cache directory
  (``python -m aiozkconsumer.testing.provision [--flavour zk|kraft|all]`` on the command
  line).
- :mod:`aiozkconsumer.testing.plugin` is a pytest plugin (registered automatically via the
  ``pytest11`` entry point) with the fixtures ``zk_kafka_cluster``, ``kraft_cluster``,
  ``any_cluster`` (parametrized over both), ``zk_client``, ``any_zk_client``,
  ``unique_group_id`` and ``unique_topic``.

The names are imported lazily, so that ``python -m aiozkconsumer.testing.provision`` runs
the module once, as ``__main__`` (and importing the package stays cheap).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiozkconsumer.testing.cluster import (
        ClusterStartError,
        ClusterState,
        LocalCluster,
        LocalClusterError,
        ProduceError,
    )
    from aiozkconsumer.testing.provision import ProvisioningError, provision_kafka

__all__ = [
    "ClusterStartError",
    "ClusterState",
    "LocalCluster",
    "LocalClusterError",
    "ProduceError",
    "ProvisioningError",
    "provision_kafka",
]

_WHERE = {
    "ClusterStartError": "cluster",
    "ClusterState": "cluster",
    "LocalCluster": "cluster",
    "LocalClusterError": "cluster",
    "ProduceError": "cluster",
    "ProvisioningError": "provision",
    "provision_kafka": "provision",
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
