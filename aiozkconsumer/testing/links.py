"""Proxied links: fault-injecting proxies between clients and the local cluster's servers.

With ``LocalCluster(proxy_links=n)``, consumers may reach ZooKeeper and every broker through
:class:`~aiozkconsumer.testing.proxy.TcpProxy` instances, one set per *link*
(:class:`ProxyLink`), so that one consumer's links can be cut while the others' carry. Each
link has a broker listener of its own (``PLAINTEXT`` for link 0, then ``LINK1``,
``LINK2``, ...), advertised at the link's proxy, so that a client bootstrapped from
:attr:`ProxyLink.bootstrap_servers` is told the addresses of its own link's proxies.

The proxies run in an event loop of their own, in a daemon thread, so that they keep
forwarding whatever the caller's loop does, and can be driven from any loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Literal, TypeVar

from aiozkconsumer._loops import close_loop
from aiozkconsumer.testing._processes import HOST
from aiozkconsumer.testing._render import LinkEndpoint
from aiozkconsumer.testing.proxy import (
    Direction,
    FaultMode,
    ProxyError,
    ProxyStatistics,
    TcpProxy,
)

__all__ = ["LinkTarget", "ProxyLink"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

LinkTarget = Literal["zookeeper", "brokers", "all"]
"""Which proxies of a :class:`ProxyLink` a fault applies to: the ZooKeeper one, the brokers'
ones, or all of them."""

_PROXY_START_S = 10.0
_CLOSE_TIMEOUT_S = 10.0


def _link_listener(index: int) -> str:
    """The broker listener a link's proxies forward to: ``PLAINTEXT`` for link 0, then
    ``LINK1``, ``LINK2``, ..."""
    return "PLAINTEXT" if index == 0 else f"LINK{index}"


class _ProxyHost:
    """An event loop in a daemon thread that runs the proxies of a :class:`LocalCluster`.

    The proxies must keep forwarding while the caller's loop is busy (producing, checking a
    history) and whichever loop the caller runs in; coroutines are handed over with
    :func:`asyncio.run_coroutine_threadsafe`.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=self._main, args=(loop,), name="aiozkconsumer-proxies", daemon=True
        )
        self._loop, self._thread = loop, thread
        thread.start()

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            close_loop(loop)

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Schedule ``coro`` in the proxies' loop.

        Raises:
            ProxyError: if the loop is not running.
        """
        loop = self._loop
        if loop is None or loop.is_closed() or self._thread is None:
            coro.close()
            raise ProxyError("the proxies of this cluster are not running")
        return asyncio.run_coroutine_threadsafe(coro, loop)

    async def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` in the proxies' loop and wait for its result from the caller's loop."""
        return await asyncio.wrap_future(self.submit(coro))

    def run_sync(self, coro: Coroutine[Any, Any, _T], timeout_s: float) -> _T:
        """Run ``coro`` in the proxies' loop and block until it is done (at most ``timeout_s``)."""
        return self.submit(coro).result(timeout_s)

    def stop(self) -> None:
        """Stop the loop and join the thread (idempotent)."""
        loop, thread = self._loop, self._thread
        self._thread = None
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(_CLOSE_TIMEOUT_S)


async def _apply_mode(
    proxy: TcpProxy, mode: FaultMode, direction: Direction, delay_s: float
) -> None:
    if mode is FaultMode.BLACKHOLE:
        proxy.blackhole(direction)
    elif mode is FaultMode.DELAY:
        proxy.delay(delay_s, direction)
    elif mode is FaultMode.RESET:
        await proxy.reset()
    elif mode is FaultMode.REFUSE:
        await proxy.refuse()
    else:
        proxy.pass_through(direction)


class ProxyLink:
    """One client's way to the cluster: a proxy to ZooKeeper and one to each broker.

    Built by :class:`LocalCluster` (``proxy_links=n``), never directly. Give a client
    :attr:`zookeeper_connect` and :attr:`bootstrap_servers`: every byte it exchanges with the
    servers then crosses this link, and :meth:`cut` / :meth:`heal` cut and restore it without
    touching the other links. The proxies keep their ports for the cluster's lifetime (across
    server restarts). The methods may be awaited from any event loop.

    Attributes:
        index: the link's number, ``0 .. proxy_links - 1``.
    """

    def __init__(
        self, index: int, host: _ProxyHost, zookeeper: TcpProxy, brokers: Mapping[int, TcpProxy]
    ) -> None:
        self.index = index
        self._host = host
        self._zookeeper = zookeeper
        self._brokers = dict(brokers)

    def __repr__(self) -> str:
        modes = {name: _describe_stats(st) for name, st in self.statistics().items()}
        text = ", ".join(f"{name}={mode}" for name, mode in modes.items())
        return f"<ProxyLink {self.index} [{text}]>"

    @property
    def listener_name(self) -> str:
        """The broker listener behind this link (``PLAINTEXT`` for link 0, else ``LINK<k>``)."""
        return _link_listener(self.index)

    @property
    def zookeeper_connect(self) -> str:
        """``"127.0.0.1:<port>"`` of the link's ZooKeeper proxy (a ``zookeeper.connect``)."""
        return self._zookeeper.address

    @property
    def bootstrap_servers(self) -> str:
        """The link's broker proxies, ``"127.0.0.1:<port>,..."`` in broker id order.

        A Kafka client bootstrapped from these is told, in metadata, the addresses of this
        link's proxies: all its broker traffic crosses the link.
        """
        return ",".join(self._brokers[b].address for b in sorted(self._brokers))

    def broker_address(self, broker_id: int) -> str:
        """``"127.0.0.1:<port>"`` of the link's proxy to one broker.

        Raises:
            KeyError: if there is no such broker.
        """
        return self._brokers[broker_id].address

    def _proxies(self, target: LinkTarget | int) -> list[TcpProxy]:
        if isinstance(target, int):
            if target not in self._brokers:
                raise ValueError(f"no broker {target} on link {self.index}")
            return [self._brokers[target]]
        if target == "zookeeper":
            return [self._zookeeper]
        if target == "brokers":
            return list(self._brokers.values())
        if target == "all":
            return [self._zookeeper, *self._brokers.values()]
        raise ValueError(f"target must be 'zookeeper', 'brokers' or 'all', got {target!r}")

    async def cut(
        self,
        target: LinkTarget | int = "all",
        mode: FaultMode | str = FaultMode.BLACKHOLE,
        direction: Direction = "both",
        *,
        delay_s: float = 1.0,
    ) -> None:
        """Put a fault on the link (see :class:`~aiozkconsumer.testing.proxy.TcpProxy`).

        Args:
            target: ``"zookeeper"``, ``"brokers"`` or ``"all"`` (default); or a broker id:
                only the link's proxy to that broker.
            mode: ``blackhole`` (default: bytes dropped, connections stay open), ``delay``
                (``delay_s`` of latency), ``reset`` (every connection reset, new ones too) or
                ``refuse`` (connects refused); ``pass_through`` heals.
            direction: ``"up"`` (client to server), ``"down"`` or ``"both"`` (default);
                ``reset`` and ``refuse`` always cover both.
            delay_s: the latency for ``delay``, seconds.

        Raises:
            ValueError: if ``target`` (a broker id not on the link included), ``mode``,
                ``direction`` or ``delay_s`` is invalid.
            ProxyError: if the cluster's proxies are not running.
        """
        fault = FaultMode(mode)
        if fault is FaultMode.DELAY and (not delay_s >= 0 or delay_s == float("inf")):
            raise ValueError(f"delay_s must be a finite number >= 0, got {delay_s!r}")
        proxies = self._proxies(target)

        async def apply() -> None:
            for proxy in proxies:
                await _apply_mode(proxy, fault, direction, delay_s)

        await self._host.run(apply())
        log.info("link %d: %s %s (%s)", self.index, target, fault.value, direction)

    async def heal(self, target: LinkTarget | int = "all") -> None:
        """Let bytes pass through again (both directions) and accept connections again.

        Args:
            target: ``"zookeeper"``, ``"brokers"`` or ``"all"`` (default); or a broker id.

        Raises:
            ValueError: if ``target`` is invalid.
            ProxyError: if the cluster's proxies are not running.
        """
        proxies = self._proxies(target)

        async def apply() -> None:
            for proxy in proxies:
                proxy.pass_through("both")

        await self._host.run(apply())
        log.info("link %d: %s healed", self.index, target)

    def statistics(self) -> dict[str, ProxyStatistics]:
        """Snapshots of the link's proxies: ``{"zookeeper": ..., "broker-<id>": ...}``.

        Read from the caller's thread (the proxies' counters are plain attributes), so the
        snapshots are only as consistent as the moment allows.
        """
        stats = {"zookeeper": self._zookeeper.statistics()}
        for broker_id in sorted(self._brokers):
            stats[f"broker-{broker_id}"] = self._brokers[broker_id].statistics()
        return stats

    async def wait_statistics(
        self, target: Literal["zookeeper"] | int, predicate: Callable[[ProxyStatistics], bool]
    ) -> ProxyStatistics:
        """Wait until ``predicate`` holds for a snapshot of one proxy of the link (checked now
        and after each change: :meth:`TcpProxy.wait_statistics`). Bound it with
        ``anyio.fail_after``.

        Args:
            target: ``"zookeeper"`` or a broker id.
            predicate: called with each new snapshot, in the proxies' thread.

        Returns:
            The first snapshot for which ``predicate`` returned true.

        Raises:
            ValueError: if ``target`` is not a proxy of the link.
            ProxyError: if the cluster's proxies are not running.
        """
        if target == "zookeeper" or isinstance(target, int):
            (proxy,) = self._proxies(target)
        else:
            raise ValueError(f"target must be 'zookeeper' or a broker id, got {target!r}")
        return await self._host.run(proxy.wait_statistics(predicate))

    def healed(self) -> bool:
        """Whether every proxy of the link passes bytes through both ways and listens."""
        return all(
            s.mode_up is FaultMode.PASS_THROUGH and s.mode_down is FaultMode.PASS_THROUGH
            for s in self.statistics().values()
        )

    def all_proxies(self) -> list[TcpProxy]:
        """Every proxy of the link (for the cluster's start and stop)."""
        return [self._zookeeper, *self._brokers.values()]


def _describe_stats(stats: ProxyStatistics) -> str:
    def one(mode: FaultMode, delay: float) -> str:
        return f"delay {delay:g}s" if mode is FaultMode.DELAY else mode.value

    up, down = one(stats.mode_up, stats.delay_up_s), one(stats.mode_down, stats.delay_down_s)
    return up if up == down else f"up {up}/down {down}"


class _LinkSet:
    """The proxied links of one :class:`LocalCluster` and the thread their proxies run in.

    Built (not started) by :meth:`build` before the servers' configs are written, since each
    broker needs a listener per link (:meth:`endpoints`); started before the servers (a
    proxy resolves its upstream at each connection) and closed after them.
    """

    def __init__(
        self, host: _ProxyHost, links: Sequence[ProxyLink], listener_ports: Mapping[int, list[int]]
    ) -> None:
        self._host = host
        self.links = tuple(links)
        self._listener_ports = dict(listener_ports)

    @classmethod
    def build(
        cls, count: int, zk_port: int, broker_ids: Sequence[int], ports: Sequence[int]
    ) -> _LinkSet:
        """Build ``count`` links (not started) from ``ports``: per link, the real port of its
        listener on each broker, then its ZooKeeper proxy, then a proxy per broker.

        Args:
            count: the number of links, at least 1.
            zk_port: ZooKeeper's port.
            broker_ids: the brokers.
            ports: ``count * (1 + 2 * len(broker_ids))`` free ports.
        """
        host = _ProxyHost()
        listener_ports: dict[int, list[int]] = {b: [] for b in broker_ids}
        links = []
        it = iter(ports)
        for index in range(count):
            real = {b: next(it) for b in broker_ids}
            for b in broker_ids:
                listener_ports[b].append(real[b])
            zookeeper = TcpProxy(HOST, zk_port, listen_host=HOST, listen_port=next(it))
            proxies = {
                b: TcpProxy(HOST, real[b], listen_host=HOST, listen_port=next(it))
                for b in broker_ids
            }
            links.append(ProxyLink(index, host, zookeeper, proxies))
        return cls(host, links, listener_ports)

    def endpoints(self, broker_id: int) -> list[LinkEndpoint]:
        """The broker's listener for each link: name, advertised address (the link's proxy),
        real port."""
        real = self._listener_ports[broker_id]
        return [
            (link.listener_name, link.broker_address(broker_id), real[link.index])
            for link in self.links
        ]

    def _proxies(self) -> list[TcpProxy]:
        return [proxy for link in self.links for proxy in link.all_proxies()]

    async def start(self) -> None:
        """Start the proxies' thread and every link's proxies.

        Raises:
            ProxyError: if a proxy cannot listen on its port.
            TimeoutError: if they are not all listening within 10 s.
        """
        self._host.start()
        proxies = self._proxies()

        async def start_all() -> None:
            for proxy in proxies:
                await proxy.start()

        await asyncio.wait_for(self._host.run(start_all()), _PROXY_START_S)

    def close(self) -> None:
        """Close every proxy and stop their thread (never raises)."""
        proxies = self._proxies()

        async def close_all() -> None:
            for proxy in proxies:
                with contextlib.suppress(Exception):
                    await proxy.close()

        try:
            self._host.run_sync(close_all(), _CLOSE_TIMEOUT_S * 2)
        except Exception as exc:  # the thread goes anyway (a daemon)
            log.warning("closing the proxies failed: %r", exc)
        finally:
            self._host.stop()
