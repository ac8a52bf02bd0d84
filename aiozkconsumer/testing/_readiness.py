"""When the local cluster's servers really serve: the readiness checks and their probes.

A ``java`` process that runs is not yet a server that serves: ZooKeeper answers ``imok``
before its database is loaded, and a broker registers in ZooKeeper before it answers
metadata requests. Each wait here polls until the server does what a client needs, fails
fast with :class:`~aiozkconsumer.testing.cluster.ClusterStartError` (the log's tail in its
message) if the process exits, and gives up after ``time_limit`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from aiokafka import errors as kafka_errors
from aiozk import exc as zk_exc

from aiozkconsumer.errors import BrokerNotAvailableError
from aiozkconsumer.testing._clients import (
    REQUEST_TIMEOUT_S,
    kafka_client,
    topic_metadata,
    zk_session,
)
from aiozkconsumer.testing._errors import ClusterStartError, LocalClusterError
from aiozkconsumer.testing._processes import HOST, Server, tail

__all__ = [
    "POLL_INTERVAL_S",
    "check_alive",
    "four_letter_word",
    "port_open",
    "start_error",
    "wait_deregistered",
    "wait_kraft_brokers",
    "wait_listening",
    "wait_topic",
    "wait_zk_brokers",
    "wait_zookeeper",
]

POLL_INTERVAL_S = 0.1
# A cold ZooKeeper JVM takes up to about 2 s for its first TLS handshake (more on a loaded
# machine): give a TLS four-letter word that long rather than retry it from scratch.
_TLS_WORD_TIME_LIMIT_S = 10.0


async def four_letter_word(
    port: int, word: bytes, time_limit: float, ssl_context: ssl.SSLContext | None = None
) -> bytes:
    """Send a ZooKeeper four-letter command; return the answer (b"" if unreachable).

    With ``ssl_context``, over TLS (ZooKeeper's ``secureClientPort``); a failed handshake
    counts as unreachable. TLS goes through a blocking socket in a worker thread: asyncio
    (Python 3.11) leaks the transport of a failed or cancelled TLS handshake.
    """
    if ssl_context is not None:
        return await asyncio.to_thread(_tls_four_letter_word, port, word, time_limit, ssl_context)
    try:
        async with asyncio.timeout(time_limit):
            reader, writer = await asyncio.open_connection(HOST, port)
            try:
                writer.write(word)
                await writer.drain()
                return await reader.read(4096)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return b""


def _tls_four_letter_word(
    port: int, word: bytes, time_limit: float, context: ssl.SSLContext
) -> bytes:
    """:func:`four_letter_word` over TLS, blocking (``time_limit`` per socket operation)."""
    try:
        with (
            socket.create_connection((HOST, port), timeout=time_limit) as raw,
            context.wrap_socket(raw, server_hostname=HOST) as sock,
        ):
            sock.sendall(word)
            return sock.recv(4096)
    except OSError:  # refused, reset, timed out, or a failed handshake (ssl.SSLError)
        return b""


async def port_open(port: int, time_limit: float) -> bool:
    """True if something accepts TCP connections on the loopback port."""
    try:
        async with asyncio.timeout(time_limit):
            _, writer = await asyncio.open_connection(HOST, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _metadata_brokers(server: Server) -> set[int]:
    """The broker ids a broker's own metadata response lists.

    Raises:
        BrokerNotAvailableError: if it does not answer.
        TimeoutError: if it does not answer in time.
    """
    async with kafka_client(server.address, time_limit=5.0) as client:
        return {int(b.nodeId) for b in client.cluster.brokers()}


def start_error(server: Server, reason: str, work_dir: Path | None) -> ClusterStartError:
    """The error for a server that did not come up, ending with its log's last 60 lines."""
    return ClusterStartError(server.name, reason, tail(server.log_file, 60), work_dir)


def check_alive(servers: Iterable[Server], work_dir: Path | None) -> None:
    """Raise :class:`ClusterStartError` if one of the processes has exited."""
    for server in servers:
        proc = server.proc
        code = proc.poll() if proc is not None else None
        if code is not None:
            raise start_error(server, f"the java process exited with code {code}", work_dir)


async def wait_zookeeper(
    zookeeper: Server,
    *,
    time_limit: float,
    work_dir: Path | None,
    port: int | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> None:
    """Wait until ZooKeeper answers ``ruok`` with ``imok`` and serves requests.

    ``imok`` only means the process runs; until the database is loaded, ``srvr``
    answers "This ZooKeeper instance is not currently serving requests" and clients
    (aiozk's handshake sends ``srvr`` too) are turned away.

    Args:
        zookeeper: the server.
        time_limit: seconds.
        work_dir: named in the error.
        port: the port to ask (default: its plain client port).
        ssl_context: ask over TLS (its ``secureClientPort``).

    Raises:
        ClusterStartError: if the process exits or does not serve within ``time_limit``.
    """
    deadline = time.monotonic() + time_limit
    port = zookeeper.port if port is None else port
    word_limit = 2.0 if ssl_context is None else _TLS_WORD_TIME_LIMIT_S
    while True:
        check_alive([zookeeper], work_dir)
        if await four_letter_word(port, b"ruok", word_limit, ssl_context) == b"imok":
            srvr = await four_letter_word(port, b"srvr", word_limit, ssl_context)
            if srvr.startswith(b"Zookeeper version:"):
                return
        if time.monotonic() > deadline:
            raise start_error(zookeeper, f"not serving within {time_limit:.0f} s", work_dir)
        await asyncio.sleep(POLL_INTERVAL_S)


async def wait_listening(
    server: Server, ports: Sequence[int], *, time_limit: float, work_dir: Path | None
) -> None:
    """Wait until a server accepts TCP connections on every one of ``ports``.

    (A broker answering on one listener may still be opening the others.)

    Raises:
        ClusterStartError: if the process exits or a port is still closed after
            ``time_limit`` seconds.
    """
    deadline = time.monotonic() + time_limit
    closed = list(ports)
    while True:
        check_alive([server], work_dir)
        closed = [port for port in closed if not await port_open(port, 2.0)]
        if not closed:
            return
        if time.monotonic() > deadline:
            raise start_error(
                server,
                f"ports {closed} not accepting connections within {time_limit:.0f} s",
                work_dir,
            )
        await asyncio.sleep(POLL_INTERVAL_S)


async def wait_zk_brokers(
    zookeeper_connect: str,
    brokers: Mapping[int, Server],
    broker_ids: Sequence[int],
    *,
    time_limit: float,
    work_dir: Path | None,
) -> None:
    """Wait until ZooKeeper-mode brokers are registered and answer metadata requests.

    A broker is ready when ``/brokers/ids/<id>`` exists and its own metadata response lists
    every broker registered in ZooKeeper (at least the ones waited for).

    Args:
        zookeeper_connect: the ZooKeeper the brokers register in.
        brokers: every broker of the cluster, by id.
        broker_ids: the ones to wait for.
        time_limit: seconds.
        work_dir: named in the error.

    Raises:
        ClusterStartError: if one exits or is not ready within ``time_limit``.
        ZookeeperConnectionError: if ZooKeeper cannot be reached.
    """
    servers = [brokers[b] for b in broker_ids]
    deadline = time.monotonic() + time_limit
    waiting = list(broker_ids)
    last_problem = "not registered in ZooKeeper"
    async with zk_session(zookeeper_connect, time_limit=time_limit) as zk:
        while True:
            check_alive(servers, work_dir)
            try:
                async with asyncio.timeout(5.0):
                    registered = {int(i) for i in await zk.get_children("/brokers/ids")}
            except (zk_exc.NoNode, TimeoutError):
                registered = set()
            expected = registered | set(broker_ids)
            still: list[int] = []
            for broker_id in waiting:
                server = brokers[broker_id]
                if broker_id not in registered:
                    last_problem = "not registered under /brokers/ids in ZooKeeper"
                    still.append(broker_id)
                    continue
                if not await port_open(server.port, 2.0):
                    last_problem = "registered but not accepting connections yet"
                    still.append(broker_id)
                    continue
                try:
                    known = await _metadata_brokers(server)
                except (BrokerNotAvailableError, TimeoutError) as exc:
                    last_problem = f"registered but not answering metadata requests: {exc}"
                    still.append(broker_id)
                    continue
                if not expected <= known:
                    last_problem = f"its metadata lists brokers {sorted(known)} only"
                    still.append(broker_id)
            waiting = still
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise start_error(
                    brokers[waiting[0]],
                    f"not ready within {time_limit:.0f} s ({last_problem})",
                    work_dir,
                )
            await asyncio.sleep(POLL_INTERVAL_S * 2)


async def wait_kraft_brokers(
    brokers: Mapping[int, Server],
    broker_ids: Sequence[int],
    *,
    time_limit: float,
    work_dir: Path | None,
) -> None:
    """Wait until KRaft brokers answer metadata requests listing every running broker.

    ZooKeeper knows nothing of KRaft brokers: a broker is ready when its own metadata
    response lists the brokers waited for and every other broker that runs unpaused
    (a broker appears there once the controller has unfenced it).

    Args:
        brokers: every broker of the cluster, by id.
        broker_ids: the ones to wait for.
        time_limit: seconds.
        work_dir: named in the error.

    Raises:
        ClusterStartError: if one exits or is not ready within ``time_limit``.
    """
    servers = [brokers[b] for b in broker_ids]
    deadline = time.monotonic() + time_limit
    waiting = list(broker_ids)
    last_problem = "not accepting connections yet"
    while True:
        check_alive(servers, work_dir)
        expected = set(broker_ids) | {b for b, s in brokers.items() if s.alive() and not s.paused}
        still: list[int] = []
        for broker_id in waiting:
            server = brokers[broker_id]
            if not await port_open(server.port, 2.0):
                last_problem = "not accepting connections yet"
                still.append(broker_id)
                continue
            try:
                known = await _metadata_brokers(server)
            except (BrokerNotAvailableError, TimeoutError) as exc:
                last_problem = f"not answering metadata requests: {exc}"
                still.append(broker_id)
                continue
            if not expected <= known:
                last_problem = (
                    f"its metadata lists brokers {sorted(known)}, not all of {sorted(expected)}"
                )
                still.append(broker_id)
        waiting = still
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise start_error(
                brokers[waiting[0]],
                f"not ready within {time_limit:.0f} s ({last_problem})",
                work_dir,
            )
        await asyncio.sleep(POLL_INTERVAL_S * 2)


async def wait_deregistered(zookeeper_connect: str, broker_id: int, *, time_limit: float) -> None:
    """Wait until ``/brokers/ids/<broker_id>`` is gone (its ZooKeeper session expired).

    Raises:
        LocalClusterError: if it still exists after ``time_limit`` seconds.
        ZookeeperConnectionError: if ZooKeeper cannot be reached.
    """
    deadline = time.monotonic() + time_limit
    path = f"/brokers/ids/{broker_id}"
    async with zk_session(zookeeper_connect, time_limit=time_limit) as zk:
        while await zk.exists(path):
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"{path} still exists after {time_limit:.0f} s (a broker process outside "
                    "this cluster?)"
                )
            await asyncio.sleep(POLL_INTERVAL_S * 2)


async def wait_topic(
    zookeeper_connect: str | None,
    bootstrap: Callable[[], str],
    brokers: Mapping[int, Server],
    topic: str,
    partitions: int,
    *,
    time_limit: float,
) -> None:
    """Wait until every running broker's metadata gives each partition a leader.

    In the ZooKeeper flavour (``zookeeper_connect`` given) ``/brokers/topics/<topic>`` must
    exist first; in the KRaft flavour (None) Kafka metadata is the only source.

    Args:
        zookeeper_connect: the brokers' ZooKeeper, or None for KRaft.
        bootstrap: returns the live brokers' bootstrap servers.
        brokers: every broker of the cluster, by id (paused or dead ones are not asked).
        topic: the topic.
        partitions: its number of partitions.
        time_limit: seconds.

    Raises:
        LocalClusterError: if the topic is not usable within ``time_limit``.
        BrokerNotAvailableError: if no broker can be reached.
        ZookeeperConnectionError: if ZooKeeper cannot be reached.
    """
    deadline = time.monotonic() + time_limit
    path = f"/brokers/topics/{topic}"
    problem = "no metadata yet" if zookeeper_connect is None else f"{path} missing in ZooKeeper"
    async with contextlib.AsyncExitStack() as stack:
        zk = None
        if zookeeper_connect is not None:
            zk = await stack.enter_async_context(
                zk_session(zookeeper_connect, time_limit=time_limit)
            )
        client = await stack.enter_async_context(
            kafka_client(bootstrap(), time_limit=REQUEST_TIMEOUT_S)
        )
        while True:
            ready = True if zk is None else await zk.exists(path)
            if ready:
                for broker_id, server in brokers.items():
                    if not server.alive() or server.paused:
                        continue
                    try:
                        entry = await topic_metadata(client, broker_id, topic, 5.0)
                    except (kafka_errors.KafkaError, TimeoutError) as exc:
                        ready, problem = False, f"metadata from {server.name}: {exc!r}"
                        break
                    leaders = {int(p["partition"]): int(p["leader"]) for p in entry["partitions"]}
                    if len(leaders) < partitions or min(leaders.values()) < 0:
                        ready = False
                        problem = f"{server.name} knows leaders {leaders}"
                        break
            if ready:
                return
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"topic {topic!r} not usable within {time_limit:.0f} s: {problem}"
                )
            await asyncio.sleep(POLL_INTERVAL_S)
