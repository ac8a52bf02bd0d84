"""The fault-injecting TCP proxy: against a local echo server, then ZooKeeper through it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import socket
from collections.abc import AsyncIterator

import anyio
import pytest
from aiozk.states import States
from anyio.abc import SocketAttribute, SocketStream

from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.proxy import (
    FaultMode,
    ProxyError,
    ProxyStatistics,
    TcpProxy,
)
from aiozkconsumer.zk.client import ZkClient

# Bounds on waits that should end at once; generous, since other suites share the machine.
WAIT_S = 10.0
# How long "nothing arrives" is watched for. Only ever a lower bound on silence.
SILENCE_S = 0.3

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


# --------------------------------------------------------------------------------------------
# helpers


async def _echo(stream: SocketStream) -> None:
    async with stream:
        with contextlib.suppress(anyio.BrokenResourceError):
            async for chunk in stream:
                await stream.send(chunk)


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    """Run a loopback echo server (it closes when the client does); yield its port."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, _echo)
        yield listener.extra(SocketAttribute.local_port)
        tg.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def proxied_echo() -> AsyncIterator[TcpProxy]:
    """An echo server behind a started proxy."""
    async with echo_server() as port, TcpProxy("127.0.0.1", port) as proxy:
        yield proxy


@contextlib.asynccontextmanager
async def connect(port: int) -> AsyncIterator[Stream]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def roundtrip(stream: Stream, data: bytes) -> bytes:
    reader, writer = stream
    writer.write(data)
    await writer.drain()
    with anyio.fail_after(WAIT_S):
        return await reader.readexactly(len(data))


async def assert_silent(reader: asyncio.StreamReader) -> None:
    """Nothing (not even end-of-stream) arrives within SILENCE_S."""
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), SILENCE_S)


async def wait_stats(proxy: TcpProxy, **expected: object) -> ProxyStatistics:
    """Wait until the statistics have the ``expected`` values."""

    def matches(stats: ProxyStatistics) -> bool:
        return all(getattr(stats, name) == value for name, value in expected.items())

    with anyio.fail_after(WAIT_S):
        return await proxy.wait_statistics(matches)


def bound_port() -> socket.socket:
    """A socket bound to a loopback port but not listening: connects to it are refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


# --------------------------------------------------------------------------------------------
# pass-through and statistics


async def test_pass_through_echoes_and_counts_bytes() -> None:
    big = bytes(range(256)) * 4096  # 1 MiB: many chunks, more than the buffer holds
    async with proxied_echo() as proxy:
        assert proxy.statistics().listening
        async with connect(proxy.port) as stream:
            assert await roundtrip(stream, b"hello") == b"hello"
            assert await roundtrip(stream, big) == big
            stats = proxy.statistics()
            assert stats.connections_accepted == 1
            assert stats.connections_open == 1
            assert stats.bytes_up == stats.bytes_down == len(big) + 5
            assert stats.bytes_dropped_up == stats.bytes_dropped_down == 0
            assert stats.mode_up is stats.mode_down is FaultMode.PASS_THROUGH
        stats = await wait_stats(proxy, connections_open=0)
        assert stats.connections_reset == 0


async def test_statistics_are_a_frozen_snapshot() -> None:
    async with proxied_echo() as proxy, connect(proxy.port) as stream:
        before = proxy.statistics()
        await roundtrip(stream, b"x" * 10)
        assert before.bytes_up == 0
        assert proxy.statistics().bytes_up == 10
        with pytest.raises(dataclasses.FrozenInstanceError):
            before.bytes_up = 1  # type: ignore[misc]


async def test_many_connections_are_independent() -> None:
    async with proxied_echo() as proxy:
        async with contextlib.AsyncExitStack() as stack:
            streams = [await stack.enter_async_context(connect(proxy.port)) for _ in range(5)]
            for i, stream in enumerate(streams):
                assert await roundtrip(stream, b"conn %d" % i) == b"conn %d" % i
            assert proxy.statistics().connections_open == 5
        await wait_stats(proxy, connections_open=0, connections_accepted=5)


async def test_start_and_close_may_run_in_different_tasks() -> None:
    async with echo_server() as port:
        proxy = TcpProxy("127.0.0.1", port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(proxy.start)  # as a fixture's setup would, in a task of its own
        async with connect(proxy.port) as stream:
            assert await roundtrip(stream, b"ok") == b"ok"
        await proxy.close()
        assert not proxy.statistics().listening


# --------------------------------------------------------------------------------------------
# blackhole


async def test_blackhole_silences_the_link_and_pass_through_resumes_it() -> None:
    async with proxied_echo() as proxy, connect(proxy.port) as stream:
        reader, writer = stream
        assert await roundtrip(stream, b"before") == b"before"
        proxy.blackhole()
        writer.write(b"lost")
        await assert_silent(reader)
        stats = await wait_stats(proxy, bytes_dropped_up=4)
        assert stats.connections_open == 1  # the connection stays up, like over a cut link
        assert stats.mode_up is stats.mode_down is FaultMode.BLACKHOLE
        proxy.pass_through()
        # "lost" never reached the server; what is sent now comes back.
        assert await roundtrip(stream, b"after") == b"after"
        assert proxy.statistics().connections_accepted == 1


async def test_blackhole_one_direction() -> None:
    async with proxied_echo() as proxy, connect(proxy.port) as stream:
        reader, writer = stream
        proxy.blackhole("down")
        writer.write(b"ping")
        # The server got "ping" and answered; the answer was dropped on the way back.
        await wait_stats(proxy, bytes_up=4, bytes_dropped_down=4)
        await assert_silent(reader)
        stats = proxy.statistics()
        assert (stats.mode_up, stats.mode_down) == (FaultMode.PASS_THROUGH, FaultMode.BLACKHOLE)
        proxy.pass_through("down")
        assert await roundtrip(stream, b"pong") == b"pong"


async def test_blackhole_holds_end_of_stream_until_the_link_carries() -> None:
    async with proxied_echo() as proxy, connect(proxy.port) as stream:
        reader, writer = stream
        proxy.blackhole("up")
        writer.write_eof()
        await assert_silent(reader)  # the server has not heard the FIN, so it stays
        proxy.pass_through()
        with anyio.fail_after(WAIT_S):
            assert await reader.read() == b""  # FIN delivered; the echo server closed
        await wait_stats(proxy, connections_open=0, connections_reset=0)


# --------------------------------------------------------------------------------------------
# reset


async def test_reset_resets_open_and_new_connections() -> None:
    async with proxied_echo() as proxy:
        async with connect(proxy.port) as stream:
            assert await roundtrip(stream, b"hi") == b"hi"
            await proxy.reset()
            assert proxy.statistics().connections_open == 0
            with pytest.raises(ConnectionResetError):
                await stream[0].read(1)
        # While in reset mode, new connections are accepted and reset at once.
        async with connect(proxy.port) as stream:
            with pytest.raises(ConnectionResetError), anyio.fail_after(WAIT_S):
                await stream[0].read(1)
        stats = proxy.statistics()
        assert stats.mode_up is stats.mode_down is FaultMode.RESET
        assert stats.connections_accepted == 2
        assert stats.connections_reset == 2
        proxy.pass_through()
        async with connect(proxy.port) as stream:
            assert await roundtrip(stream, b"again") == b"again"


async def test_unreachable_upstream_resets_the_client() -> None:
    with bound_port() as nothing_there:
        async with (
            TcpProxy("127.0.0.1", nothing_there.getsockname()[1]) as proxy,
            connect(proxy.port) as stream,
        ):
            with pytest.raises(ConnectionResetError), anyio.fail_after(WAIT_S):
                await stream[0].read(1)
            await wait_stats(proxy, connections_open=0, connections_reset=1)


# --------------------------------------------------------------------------------------------
# delay


async def test_delay_adds_at_least_the_delay_each_way() -> None:
    async with proxied_echo() as proxy, connect(proxy.port) as stream:
        proxy.delay(0.2)
        start = anyio.current_time()
        assert await roundtrip(stream, b"slow") == b"slow"
        assert anyio.current_time() - start >= 0.35  # 0.2 s up and 0.2 s down
        stats = proxy.statistics()
        assert stats.mode_up is stats.mode_down is FaultMode.DELAY
        assert stats.delay_up_s == stats.delay_down_s == 0.2

        proxy.delay(0.3, "up")
        proxy.pass_through("down")
        start = anyio.current_time()
        assert await roundtrip(stream, b"up only") == b"up only"
        assert anyio.current_time() - start >= 0.25


async def test_delay_keeps_the_order_across_mode_changes() -> None:
    async with proxied_echo() as proxy, connect(proxy.port) as stream:
        reader, writer = stream
        sent = bytearray()
        proxy.delay(0.3)
        for i in range(20):
            if i == 10:
                proxy.pass_through()  # later chunks must not overtake the delayed ones
            message = b"<%d>" % i
            sent += message
            writer.write(message)
            await writer.drain()
            await anyio.sleep(0.01)  # separate chunks, not one coalesced write
        with anyio.fail_after(WAIT_S):
            assert await reader.readexactly(len(sent)) == bytes(sent)


# --------------------------------------------------------------------------------------------
# refuse


async def test_refuse_refuses_connects_and_pass_through_reopens_the_same_port() -> None:
    async with proxied_echo() as proxy, connect(proxy.port) as old:
        port = proxy.port
        await proxy.refuse()
        stats = proxy.statistics()
        assert not stats.listening
        assert stats.mode_up is stats.mode_down is FaultMode.REFUSE
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        assert await roundtrip(old, b"still here") == b"still here"  # open ones carry on
        proxy.pass_through()
        assert proxy.port == port
        assert proxy.statistics().listening
        async with connect(port) as stream:
            assert await roundtrip(stream, b"back") == b"back"
        await wait_stats(proxy, connections_open=1)
        await proxy.refuse()  # and once more
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        proxy.blackhole()  # any other mode listens again
        async with connect(port):
            await wait_stats(proxy, connections_open=2)


async def test_reset_then_refuse_is_a_crashed_server() -> None:
    async with proxied_echo() as proxy, connect(proxy.port) as stream:
        await proxy.reset()
        await proxy.refuse()
        with pytest.raises(ConnectionResetError):
            await stream[0].read(1)
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", proxy.port)


async def test_start_in_refuse_mode_does_not_listen() -> None:
    async with echo_server() as port:
        proxy = TcpProxy("127.0.0.1", port)
        await proxy.refuse()  # before start: only the mode is set
        async with proxy:
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection("127.0.0.1", proxy.port)
            proxy.pass_through()
            async with connect(proxy.port) as stream:
                assert await roundtrip(stream, b"up") == b"up"


# --------------------------------------------------------------------------------------------
# lifecycle and arguments


async def test_close_closes_the_listener_and_every_connection() -> None:
    async with echo_server() as port:
        proxy = TcpProxy("127.0.0.1", port)
        await proxy.start()
        async with connect(proxy.port) as stream:
            await roundtrip(stream, b"x")
            await proxy.close()
            with anyio.fail_after(WAIT_S):
                assert await stream[0].read() == b""
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", proxy.port)
        stats = proxy.statistics()
        assert stats.connections_open == 0
        assert not stats.listening
        await proxy.close()  # idempotent
        with pytest.raises(ProxyError):
            await proxy.start()


async def test_fixed_listen_port_and_a_taken_one() -> None:
    async with echo_server() as port:
        with bound_port() as probe:
            free = probe.getsockname()[1]
        async with TcpProxy("127.0.0.1", port, listen_port=free) as proxy:
            assert proxy.port == free
            assert proxy.address == f"127.0.0.1:{free}"
            async with connect(free) as stream:
                assert await roundtrip(stream, b"fixed") == b"fixed"
        with pytest.raises(ProxyError):
            await TcpProxy("127.0.0.1", port, listen_port=port).start()


async def test_arguments_are_checked() -> None:
    proxy = TcpProxy("127.0.0.1", 1)
    with pytest.raises(ProxyError):
        _ = proxy.port  # no port before start with listen_port=0
    for seconds in (-0.1, math.nan, math.inf):
        with pytest.raises(ValueError, match="seconds"):
            proxy.delay(seconds)
    with pytest.raises(ValueError, match="direction"):
        proxy.blackhole("sideways")  # type: ignore[arg-type]
    assert proxy.statistics().mode_up is FaultMode.PASS_THROUGH


async def test_repr_shows_the_state() -> None:
    async with echo_server() as port:
        proxy = TcpProxy("127.0.0.1", port)
        assert repr(proxy) == (
            f"<TcpProxy 127.0.0.1:0 -> 127.0.0.1:{port} "
            "[new, up=pass_through, down=pass_through, open=0]>"
        )
        async with proxy:
            proxy.delay(0.5, "up")
            proxy.blackhole("down")
            assert repr(proxy) == (
                f"<TcpProxy 127.0.0.1:{proxy.port} -> 127.0.0.1:{port} "
                "[running, up=delay 0.5s, down=blackhole, open=0]>"
            )
        assert repr(proxy).endswith("[closed, up=delay 0.5s, down=blackhole, open=0]>")


# --------------------------------------------------------------------------------------------
# ZooKeeper through the proxy


@pytest.mark.integration
async def test_zookeeper_session_expires_behind_a_blackhole_and_comes_back(
    zk_kafka_cluster: LocalCluster, unique_group_id: str
) -> None:
    host, port = zk_kafka_cluster.zookeeper_connect.rsplit(":", 1)
    path = f"/{unique_group_id}"
    async with TcpProxy(host, int(port)) as proxy:
        # 2 s: the cluster's tickTime is 500 ms, so ZooKeeper accepts 1 s to 10 s.
        client = ZkClient(proxy.address, session_timeout_ms=2000, connection_timeout_ms=30_000)
        observer = ZkClient(zk_kafka_cluster.zookeeper_connect)  # not behind the proxy
        try:
            await client.start()
            await observer.start()
            session = client.raw.session
            assert session.timeout == 2.0
            await client.create(path, b"", ephemeral=True)
            old_session = client.session_id
            assert await observer.exists(path)

            proxy.blackhole()
            with anyio.fail_after(30):
                await session.state.wait_for(States.SUSPENDED, States.LOST)
            # ZooKeeper hears nothing either: it expires the session, which deletes the node.
            assert await observer.wait_deleted([path], timeout_s=30)
            assert proxy.statistics().bytes_dropped_up > 0

            proxy.pass_through()
            # aiozk's reconnect ("srvr" handshake) may wait for ZooKeeper to drop a
            # connection opened during the blackhole (nio.sessionlessCnxnTimeout, 10 s).
            with anyio.fail_after(60):
                await session.state.wait_for(States.CONNECTED)
            assert client.session_id != old_session
            assert not await client.exists(path)
            await client.create(path, b"", ephemeral=True)
            assert await observer.exists(path)
        finally:
            await client.close()
            await observer.close()
