"""What a local cluster is asked to be, checked, and the plan of its ports: pure (values
in, values out; no process, socket or file).

:class:`ClusterSettings` holds the arguments of
:class:`~aiozkconsumer.testing.cluster.LocalCluster` after the checks its docstring lists;
:func:`plan_ports` lays the free ports a start reserves out over ZooKeeper, the brokers, the
KRaft controller listener, the proxied links and the secured listeners;
:func:`request_log_paths` names the brokers' request logs.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from aiozkconsumer.testing._render import rack_properties
from aiozkconsumer.testing.provision import FLAVOURS
from aiozkconsumer.testing.security import SECURE_LISTENERS, ClusterSecurity

__all__ = [
    "ClusterSettings",
    "PortPlan",
    "plan_ports",
    "request_log_paths",
    "security_options",
]


DEFAULT_BROKER_HEAP = "512m"
"""A LocalCluster broker's default maximum heap: enough for the test suite's topics. A broker
hosting thousands of partitions needs more (each has its log, index and metrics objects: with
10,000 partitions and one idle consumer a 3.9 broker's heap held 400 to 500 MB)."""

_MIN_HEAP = 256 << 20
_HEAP_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def heap_bytes(size: str) -> int | None:
    """``size`` (a JVM ``-Xmx`` value: digits and ``k``, ``m`` or ``g``) in bytes, or None
    when it is not one or is below 256 MiB (a broker does not start in less)."""
    m = re.fullmatch(r"([0-9]{1,7})([kKmMgG])", size) if isinstance(size, str) else None
    if m is None:
        return None
    n = int(m.group(1)) * _HEAP_UNITS[m.group(2).lower()]
    return n if n >= _MIN_HEAP else None


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """A cluster's settings, checked when made (see ``LocalCluster``'s arguments).

    Attributes:
        brokers: number of Kafka brokers, at least 1.
        cache_dir: the jar cache (None: the default).
        work_dir: the work directory the caller gave (None: a fresh temporary one).
        zk_tick_time_ms: ZooKeeper ``tickTime``, milliseconds, at least 1.
        broker_properties: extra ``server.properties`` entries for every broker.
        keep_work_dir: keep the work directory after ``stop()``.
        startup_timeout_s: seconds each wait for readiness may take, more than 0.
        flavour: ``"zookeeper"`` or ``"kraft"``.
        proxy_links: number of proxied links (0: none).
        security: the secured listeners' options (None: no secured listeners; see
            :func:`security_options`).
        broker_racks: a non-blank ``broker.rack`` per broker, in broker id order (None: no
            racks).
        request_log: keep each broker's request log.
        broker_heap: each broker JVM's maximum heap (``-Xmx``), e.g. ``"512m"`` or ``"1g"``.

    Raises:
        ValueError: if ``flavour`` is not a known flavour, ``brokers < 1``,
            ``zk_tick_time_ms < 1``, ``startup_timeout_s <= 0``, ``proxy_links < 0``,
            ``broker_racks`` does not name a non-blank rack per broker, or ``broker_heap``
            is not a size the JVM takes (digits and ``k``, ``m`` or ``g``, at least 256m).
        TypeError: if ``security`` is not a ``ClusterSecurity`` or None.
    """

    brokers: int = 1
    cache_dir: Path | None = None
    work_dir: Path | None = None
    zk_tick_time_ms: int = 500
    broker_properties: Mapping[str, str] = dataclasses.field(default_factory=dict)
    keep_work_dir: bool = False
    startup_timeout_s: float = 90
    flavour: str = "zookeeper"
    proxy_links: int = 0
    security: ClusterSecurity | None = None
    broker_racks: tuple[str, ...] | None = None
    request_log: bool = False
    broker_heap: str = DEFAULT_BROKER_HEAP

    def __post_init__(self) -> None:
        if self.flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {', '.join(FLAVOURS)}, got {self.flavour!r}")
        if self.brokers < 1:
            raise ValueError(f"brokers must be at least 1, got {self.brokers}")
        if self.zk_tick_time_ms < 1:
            raise ValueError(f"zk_tick_time_ms must be positive, got {self.zk_tick_time_ms}")
        if self.startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s must be positive, got {self.startup_timeout_s}")
        if self.proxy_links < 0:
            raise ValueError(f"proxy_links must be >= 0, got {self.proxy_links}")
        if self.security is not None and not isinstance(self.security, ClusterSecurity):
            raise TypeError(
                f"security must be a bool, a ClusterSecurity or None, got {self.security!r}"
            )
        if heap_bytes(self.broker_heap) is None:
            raise ValueError(
                "broker_heap must be a JVM heap size of at least 256m (digits and k, m or g, "
                f"e.g. '512m' or '1g'), got {self.broker_heap!r}"
            )
        racks = self.broker_racks
        if racks is not None and (len(racks) != self.brokers or not all(r.strip() for r in racks)):
            raise ValueError(
                f"broker_racks must name a non-blank rack for each of the {self.brokers} "
                f"brokers, got {list(racks)!r}"
            )

    @property
    def kraft(self) -> bool:
        """True for the KRaft flavour."""
        return self.flavour == "kraft"

    @property
    def broker_ids(self) -> list[int]:
        """``[0, ..., brokers-1]``."""
        return list(range(self.brokers))

    def broker_overrides(self, broker_id: int) -> dict[str, str]:
        """The broker's ``server.properties`` beyond the defaults: its rack
        (``broker_racks``) under the cluster's ``broker_properties``."""
        racks = rack_properties(self.broker_racks[broker_id]) if self.broker_racks else {}
        return {**racks, **self.broker_properties}


def security_options(security: ClusterSecurity | bool | None) -> ClusterSecurity | None:
    """``LocalCluster``'s ``security`` argument as options: ``True`` the defaults, ``False``
    none; anything else as given (:class:`ClusterSettings` refuses what is not options)."""
    if isinstance(security, bool):
        return ClusterSecurity() if security else None
    return security


@dataclasses.dataclass(frozen=True)
class PortPlan:
    """Which reserved port serves what (see :func:`plan_ports`).

    Attributes:
        zookeeper: ZooKeeper's plain port.
        brokers: broker id -> its first listener's port (``PLAINTEXT``, or ``INTERNAL``
            with proxied links).
        controller: the KRaft controller listener of broker 0 (in the ZooKeeper flavour,
            unused: the last broker's port).
        links: the proxied links' ports (for ``_LinkSet.build``), empty without links.
        secure_listeners: broker id -> secured listener name -> port; empty if not secured.
        zookeeper_tls: ZooKeeper's TLS port, or None.
    """

    zookeeper: int
    brokers: Mapping[int, int]
    controller: int
    links: Sequence[int]
    secure_listeners: Mapping[int, Mapping[str, int]]
    zookeeper_tls: int | None

    @staticmethod
    def count(settings: ClusterSettings) -> int:
        """How many free ports a start of a cluster with these settings reserves."""
        secured = 0
        if settings.security is not None:
            secured = len(SECURE_LISTENERS) * settings.brokers + int(
                settings.security.zookeeper_tls
            )
        return _linked(settings) + secured


def _base(settings: ClusterSettings) -> int:
    # KRaft needs one more port: the controller listener of broker 0.
    return 1 + settings.brokers + (1 if settings.kraft else 0)


def _linked(settings: ClusterSettings) -> int:
    # Proxied links need, per link, a listener on each broker and a proxy to ZooKeeper and
    # to each broker.
    return _base(settings) + settings.proxy_links * (1 + 2 * settings.brokers)


def plan_ports(settings: ClusterSettings, ports: Sequence[int]) -> PortPlan:
    """Lay ``ports`` (:meth:`PortPlan.count` of them) out: ZooKeeper, the brokers, the KRaft
    controller, the links, then each broker's secured listeners and ZooKeeper's TLS port.

    Raises:
        ValueError: if ``ports`` does not hold exactly :meth:`PortPlan.count` ports.
    """
    if len(ports) != PortPlan.count(settings):
        raise ValueError(f"{PortPlan.count(settings)} ports needed, got {len(ports)}")
    base, linked = _base(settings), _linked(settings)
    brokers = dict(zip(settings.broker_ids, ports[1 : 1 + settings.brokers], strict=True))
    free = iter(ports[linked:])
    secure: dict[int, Mapping[str, int]] = {}
    zookeeper_tls = None
    if settings.security is not None:
        secure = {
            broker_id: {name: next(free) for name in SECURE_LISTENERS}
            for broker_id in settings.broker_ids
        }
        zookeeper_tls = next(free) if settings.security.zookeeper_tls else None
    return PortPlan(
        zookeeper=ports[0],
        brokers=brokers,
        controller=ports[base - 1],
        links=list(ports[base:linked]),
        secure_listeners=secure,
        zookeeper_tls=zookeeper_tls,
    )


def request_log_paths(settings: ClusterSettings, logs: Path) -> dict[int, Path]:
    """Broker id -> its request log under ``logs`` (``request_log=True``, or a secured
    cluster whose options keep one); empty otherwise."""
    if not settings.request_log and not (
        settings.security is not None and settings.security.request_log
    ):
        return {}
    return {b: logs / f"broker-{b}-requests.log" for b in settings.broker_ids}
