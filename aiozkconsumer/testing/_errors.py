"""The errors of the local cluster (re-exported by :mod:`aiozkconsumer.testing.cluster`).

They live apart from :class:`~aiozkconsumer.testing.cluster.LocalCluster` so that its parts
(processes, records) can raise them without importing the facade.
"""

from __future__ import annotations

from pathlib import Path

from aiozkconsumer.errors import ConsumerError

__all__ = ["ClusterStartError", "LocalClusterError", "ProduceError"]


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
