"""ZooKeeper faults and their bounds: a ZooKeeper restart, a member's ZooKeeper link cut.

A ZooKeeper server that restarts restores its sessions and gives each a fresh timeout, so a
member that reconnects promptly keeps its session, its nodes and its partitions. A member cut
off from ZooKeeper stops handing out records within the detection time, so the records
delivered twice after the hand-over stay within the window ``docs/failure-semantics.md``
gives. The integration tests stop ZooKeeper and cut links, so they run on a cluster of their
own; the parts behind those bounds (the reconnect back-off, the lease, the commit hook) are
tested without servers first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Iterator
from typing import Any, cast

import anyio
import pytest
from _support import config_for, wait_settled
from aiozk import exc as aiozk_exc
from aiozk.protocol.exists import ExistsRequest
from aiozk.states import States

from aiozkconsumer import (
    ConnectorState,
    ConsumerConfig,
    TopicPartition,
    ZookeeperConnectionError,
    ZookeeperConsumerConnector,
)
from aiozkconsumer.commits import FencedCommitter
from aiozkconsumer.errors import OffsetCommitError, ZookeeperSessionExpiredError
from aiozkconsumer.metrics import ConsumerMetrics
from aiozkconsumer.ownership import OwnershipState
from aiozkconsumer.records import OwnershipGate
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing._processes import free_ports
from aiozkconsumer.zk import layout
from aiozkconsumer.zk.client import (
    RECONNECT_BACKOFF_START_S,
    ZkClient,
    _PromptSession,
    reconnect_backoff_s,
)
from aiozkconsumer.zkgroup.lease import DETECTION_FRACTION, SessionLease

log = logging.getLogger(__name__)

_PACE_S = 0.02
"""Each reader takes 20 ms per record (50 records/s): a steady flow whose gaps are visible."""


# -- the reconnect back-off ----------------------------------------------------------------


def test_reconnect_backoff_starts_at_50_to_100_ms() -> None:
    assert reconnect_backoff_s(0, 6.0) == RECONNECT_BACKOFF_START_S == 0.1
    assert reconnect_backoff_s(0, 6.0, jitter=0.5) == pytest.approx(0.05)


def test_reconnect_backoff_doubles_up_to_a_tenth_of_the_session_timeout() -> None:
    pauses = [reconnect_backoff_s(n, 6.0) for n in range(8)]
    assert pauses == pytest.approx([0.1, 0.2, 0.4, 0.6, 0.6, 0.6, 0.6, 0.6])
    assert pauses == sorted(pauses)
    assert reconnect_backoff_s(10_000, 6.0) == pytest.approx(0.6)  # no overflow


def test_reconnect_backoff_cap_never_below_the_start() -> None:
    assert reconnect_backoff_s(5, 0.2) == pytest.approx(RECONNECT_BACKOFF_START_S)


def test_reconnect_backoff_jitter_scales_every_pause() -> None:
    for n in range(6):
        full = reconnect_backoff_s(n, 4.0)
        assert reconnect_backoff_s(n, 4.0, jitter=0.75) == pytest.approx(0.75 * full)
        assert reconnect_backoff_s(n, 4.0, jitter=0.0) == 0.0


@pytest.mark.parametrize(
    ("attempt", "timeout_s", "jitter"), [(-1, 6.0, 1.0), (0, 0.0, 1.0), (0, 6.0, 1.5)]
)
def test_reconnect_backoff_refuses_bad_arguments(
    attempt: int, timeout_s: float, jitter: float
) -> None:
    with pytest.raises(ValueError):
        reconnect_backoff_s(attempt, timeout_s, jitter)


async def test_a_server_that_comes_back_is_found_within_the_backoff_cap() -> None:
    """The session retries a server that is down with the short back-off, not aiozk's 4 s,
    8 s, 16 s ...: a fake ZooKeeper that starts listening 1 s later is found within the cap
    (a tenth of the session timeout) plus a connection attempt."""
    (port,) = free_ports(1)
    session_timeout_s = 2.0

    handled: list[asyncio.Task[Any]] = []

    async def fake_zookeeper(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handled.append(cast(asyncio.Task[Any], asyncio.current_task()))
        try:  # aiozk's handshake: "srvr" on a first connection, then the real one
            if await reader.read(4) == b"srvr":
                writer.write(b"Zookeeper version: 3.8.0-0, built on 2024-01-01\nMode: x\n")
            else:
                await reader.read()
        finally:
            writer.close()
            await writer.wait_closed()

    session = _PromptSession(f"127.0.0.1:{port}", session_timeout_s, None, False, None)

    async def start_late() -> asyncio.Server:
        await asyncio.sleep(1.0)
        return await asyncio.start_server(fake_zookeeper, "127.0.0.1", port)

    server_task = asyncio.create_task(start_late())
    started = time.monotonic()
    try:
        with anyio.fail_after(1.0 + 0.1 * session_timeout_s + 0.5):
            await session.find_server(allow_read_only=False)
        assert session.conn is not None and time.monotonic() - started >= 1.0
    finally:
        server = await server_task
        if session.conn is not None:
            await session.conn.close(1.0)
        server.close()
        await server.wait_closed()
        await asyncio.wait_for(asyncio.gather(*handled, return_exceptions=True), 5)


# -- requests stay on their session ----------------------------------------------------------


class _StubConnection:
    """What ``Session.send`` uses of a connection; each send runs ``on_send`` first."""

    def __init__(self, on_send: Any) -> None:
        self.sent: list[Any] = []
        self.on_send = on_send

    async def send(self, request: Any, xid: int | None = None) -> tuple[int, Any]:
        self.sent.append(request)
        answer: tuple[int, Any] = await self.on_send(len(self.sent))
        return answer


def _connected_session(session_id: int) -> _PromptSession:
    session = _PromptSession("127.0.0.1:1", 4.0, None, False, None)
    session.session_id = session._known_session_id = session_id
    session.state.transition_to(States.CONNECTED)
    return session


async def test_a_request_is_not_sent_on_a_session_that_replaced_its_own() -> None:
    """Issued while the session the member knew was being replaced (it expired): the request
    fails once the new session is there, and never reaches the server on it."""
    session = _connected_session(0x1)
    session.state.transition_to(States.LOST)
    session.session_id = None  # as aiozk's repair loop after the server refused the session
    conn = _StubConnection(lambda n: pytest.fail("sent on the new session"))
    session.conn = conn

    async def new_session() -> None:
        await asyncio.sleep(0.05)
        session.session_id = session._known_session_id = 0x2
        session.state.transition_to(States.CONNECTED)

    replaced = asyncio.create_task(new_session())
    try:
        with pytest.raises(aiozk_exc.SessionLost):
            await asyncio.wait_for(session.send(ExistsRequest(path="/", watch=False)), 5)
    finally:
        await replaced
        if session.heartbeat_handle is not None:
            session.heartbeat_handle.cancel()
    assert conn.sent == []


async def test_requests_bound_to_a_replaced_session_fail_without_being_sent() -> None:
    """A step bound to the session that claimed the partitions (a fenced commit) makes no
    request under the session that replaced it; unbound, the same request is sent."""
    session = _connected_session(0x2)

    async def answer(n: int) -> tuple[int, Any]:
        return 1, object()

    conn = _StubConnection(answer)
    session.conn = conn
    client = ZkClient("127.0.0.1:1")
    try:
        with client.bound_to(0x1), pytest.raises(aiozk_exc.SessionLost):
            await asyncio.wait_for(session.send(ExistsRequest(path="/", watch=False)), 5)
        assert conn.sent == []
        with client.bound_to(0x2):
            await asyncio.wait_for(session.send(ExistsRequest(path="/", watch=False)), 5)
        with client.bound_to(None):
            await asyncio.wait_for(session.send(ExistsRequest(path="/", watch=False)), 5)
        assert len(conn.sent) == 2
    finally:
        if session.heartbeat_handle is not None:
            session.heartbeat_handle.cancel()


async def test_a_request_in_flight_is_not_sent_again_on_a_new_session() -> None:
    """A request whose connection dropped is sent again on the same session, but fails when
    the session came back as a new one (aiozk 0.32 sent it again there)."""
    for same_session, expect_sent in ((True, 2), (False, 1)):
        session = _connected_session(0x1)

        async def on_send(
            n: int, session: _PromptSession = session, same: bool = same_session
        ) -> tuple[int, Any]:
            if n > 1:
                return 1, object()  # answered
            # The connection drops; the repair loop reconnects (to a new session, or not).

            async def reconnect() -> None:
                await asyncio.sleep(0.05)
                if not same:
                    session.session_id = session._known_session_id = 0x2
                session.state.transition_to(States.CONNECTED)

            asyncio.get_running_loop().call_soon(asyncio.ensure_future, reconnect())
            raise aiozk_exc.ConnectError("127.0.0.1", 1)

        conn = _StubConnection(on_send)
        session.conn = conn
        try:
            request = ExistsRequest(path="/", watch=False)
            if same_session:
                assert await asyncio.wait_for(session.send(request), 5) is not None
            else:
                with pytest.raises(aiozk_exc.SessionLost):
                    await asyncio.wait_for(session.send(request), 5)
        finally:
            if session.heartbeat_handle is not None:
                session.heartbeat_handle.cancel()
        assert len(conn.sent) == expect_sent


# -- the lease -------------------------------------------------------------------------------


class _StubZk:
    """What ``SessionLease`` uses of a ``ZkClient``; round trips hang once ``cut``."""

    negotiated_timeout_s = 0.6

    def __init__(self) -> None:
        self.cut = False

    async def wait_for_state(self, *states: str) -> None:
        return None

    async def exists(self, path: str) -> bool:
        if self.cut:
            await anyio.sleep_forever()
        return True


async def test_lease_ends_within_a_third_of_the_session_timeout_of_a_cut() -> None:
    zk, gate = _StubZk(), OwnershipGate()
    lease = SessionLease(cast(ZkClient, zk), gate, "m", lambda: False)
    detection_s = DETECTION_FRACTION * zk.negotiated_timeout_s
    async with anyio.create_task_group() as tg:
        tg.start_soon(lease.renew)
        await anyio.sleep(0.3)  # a few renewals: the lease is kept
        assert gate.passable() and gate.deadline < math.inf
        zk.cut = True
        await anyio.sleep(detection_s + 0.03)  # the gate has no event for a deadline passing
        assert not gate.passable()
        zk.cut = False  # the link carries again: records flow again
        with anyio.fail_after(5):
            await gate.wait_open()
        tg.cancel_scope.cancel()


async def test_lease_ends_within_d_even_when_the_event_loop_is_busy() -> None:
    """The bound holds without the renewal task running: the deadline itself is t0 + D."""
    zk, gate = _StubZk(), OwnershipGate()
    lease = SessionLease(cast(ZkClient, zk), gate, "m", lambda: False)
    detection_s = DETECTION_FRACTION * zk.negotiated_timeout_s
    async with anyio.create_task_group() as tg:
        tg.start_soon(lease.renew)
        await anyio.sleep(0.1)  # a renewal or two: the lease is kept
        assert gate.passable() and gate.deadline < math.inf
        time.sleep(detection_s + 0.02)  # noqa: ASYNC251 - nothing else runs: the point
        assert not gate.passable()
        tg.cancel_scope.cancel()


# -- the commit hook -------------------------------------------------------------------------


class _FailingStore:
    """An offset store whose every commit fails with ``error``."""

    zookeeper_commits = kafka_commits = 0

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def commit(self, offsets: Any, retries: int = 0, fences: Any = None) -> int:
        raise self.error


@pytest.mark.parametrize(
    ("error", "ends_lease"),
    [
        (ZookeeperConnectionError("request timed out"), True),
        (ZookeeperSessionExpiredError("expired"), True),
        (OffsetCommitError("g", {}, committed=0, attempts=1), False),
    ],
    ids=["connection", "expired", "kafka-refused"],
)
async def test_a_commit_that_cannot_reach_zookeeper_ends_the_lease(
    error: Exception, ends_lease: bool
) -> None:
    lost: list[bool] = []
    committer = FencedCommitter(
        ConsumerConfig(group_id="g", zookeeper_connect="127.0.0.1:1"),
        "m",
        None,
        cast(Any, _FailingStore(error)),
        OwnershipState(1),
        ConsumerMetrics("c", "g"),
        on_fenced=lambda fenced: None,
        on_connection_lost=lambda: lost.append(True),
    )
    with pytest.raises(type(error)):
        await committer.commit({}, retries=0)
    assert lost == ([True] if ends_lease else [])


async def test_a_commit_is_bound_to_the_session_that_claimed_the_partitions() -> None:
    """Every ZooKeeper request of a commit is bound to the registration's session."""
    from aiozkconsumer.zk import client as zk_client

    bound: list[int | None] = []

    class _RecordingStore(_FailingStore):
        async def commit(self, offsets: Any, retries: int = 0, fences: Any = None) -> int:
            bound.append(zk_client._BOUND_SESSION.get())
            return 0

    committer = FencedCommitter(
        ConsumerConfig(group_id="g", zookeeper_connect="127.0.0.1:1"),
        "m",
        ZkClient("127.0.0.1:1"),
        cast(Any, _RecordingStore(RuntimeError())),
        OwnershipState(1),
        ConsumerMetrics("c", "g"),
        on_fenced=lambda fenced: None,
        claiming_session=lambda: 0x1234,
    )
    await committer.commit({}, retries=0)
    assert bound == [0x1234]
    assert zk_client._BOUND_SESSION.get() is None  # only for the commit


# -- on a real cluster -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def zk_fault_cluster() -> Iterator[LocalCluster]:
    """A cluster of this module's own (ZooKeeper is stopped; link 0 is cut)."""
    cluster = LocalCluster(proxy_links=1)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(cluster.start())
        yield cluster
    finally:
        loop.run_until_complete(cluster.stop())
        loop.close()


@pytest.mark.integration
async def test_a_request_lost_while_the_connection_stayed_up_is_sent_again_at_once(
    zk_fault_cluster: LocalCluster,
) -> None:
    """A request's bytes dropped on the way while TCP stays up (the link blackholed upward
    for a moment, as the chaos runs' proxy does): the server answers the next request first.
    The client drops the connection at once (the Java client's "Xid out of order") and sends
    the lost request again on a new one, with the same session, instead of waiting a whole
    request timeout (the session timeout) for an answer that cannot come."""
    link = zk_fault_cluster.link(0)
    session_timeout_s = 6.0
    client = ZkClient(link.zookeeper_connect, session_timeout_ms=int(session_timeout_s * 1000))
    await client.start()
    states: list[str] = []
    remove = client.add_state_listener(states.append)
    try:
        await client.exists("/")
        session = client.session_id
        dropped = link.statistics()["zookeeper"].bytes_dropped_up
        await link.cut("zookeeper", "blackhole", direction="up")
        try:
            lost = asyncio.ensure_future(client.exists("/zookeeper"))
            with anyio.fail_after(5):
                await link.wait_statistics("zookeeper", lambda s: s.bytes_dropped_up > dropped)
        finally:
            await link.heal("zookeeper")
        assert not lost.done()
        with anyio.fail_after(session_timeout_s / 2):
            assert await client.exists("/")  # answered: the server never saw `lost`
            assert await lost  # sent again on the new connection, and answered
        assert "suspended" in states and states[-1] == "connected", states
        assert client.session_id == session
    finally:
        remove()
        await client.close()


class Deliveries:
    """What each member handed out: ``(member, partition, offset, monotonic time)``."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, int, float]] = []
        self._grew = anyio.Event()

    def add(self, member: str, partition: int, offset: int) -> None:
        self.rows.append((member, partition, offset, time.monotonic()))
        self._grew.set()
        self._grew = anyio.Event()

    async def wait_until(self, predicate: Any, limit_s: float = 60) -> None:
        with anyio.fail_after(limit_s):
            while not predicate():
                await self._grew.wait()

    def of(self, member: str, partition: int) -> dict[int, float]:
        """Offset -> when ``member`` handed it out (the first time)."""
        got: dict[int, float] = {}
        for m, p, o, t in self.rows:
            if m == member and p == partition:
                got.setdefault(o, t)
        return got

    def count(self, member: str, since: float = -1.0) -> int:
        return sum(1 for m, _, _, t in self.rows if m == member and t > since)


async def _read(stream: KafkaStream, member: str, seen: Deliveries) -> None:
    async for msg in stream:
        seen.add(member, msg.partition, msg.offset)
        await anyio.sleep(_PACE_S)


async def _topic(cluster: LocalCluster, name: str, partitions: int, per_partition: int) -> None:
    await cluster.create_topic(name, partitions)
    await cluster.produce_to_partitions(
        name, {p: [(b"k", b"v%d" % i) for i in range(per_partition)] for p in range(partitions)}
    )


@pytest.mark.integration
@pytest.mark.parametrize("down_s", [1.5, 3.0], ids=["1.5s", "3s"])
async def test_zookeeper_restart_keeps_sessions_nodes_and_partitions(
    zk_fault_cluster: LocalCluster, unique_topic: str, unique_group_id: str, down_s: float
) -> None:
    """ZooKeeper stopped, ``down_s`` seconds down, started again: both members keep their
    sessions, their registration and owner nodes, nothing rebalances, and records flow again
    promptly. (ZooKeeper is unreachable a little longer: stopping and starting take time.)"""
    cluster = zk_fault_cluster
    await _topic(cluster, unique_topic, 2, 3000)
    seen = Deliveries()
    session_timeout_ms = 6000
    configs = [
        config_for(
            cluster,
            unique_group_id,
            consumer_id=name,
            zookeeper_session_timeout_ms=session_timeout_ms,
        )
        for name in ("a", "b")
    ]
    async with (
        ZookeeperConsumerConnector(configs[0]) as a,
        ZookeeperConsumerConnector(configs[1]) as b,
        anyio.create_task_group() as tg,
    ):
        members = {"a": a, "b": b}
        for name, c in members.items():
            streams = await c.create_message_streams({unique_topic: 1})
            tg.start_soon(_read, streams[unique_topic][0], name, seen)
        await wait_settled([a, b])
        await seen.wait_until(lambda: seen.count("a") >= 20 and seen.count("b") >= 20)
        before = {
            name: (c.zk.session_id, len(c.statistics().rebalances), c.statistics().owned_partitions)
            for name, c in members.items()
        }
        assert all(len(owned) == 1 for _, _, owned in before.values())

        reconnected: dict[str, float] = {}
        noticed: dict[str, float] = {}

        async def reconnect_of(name: str, c: ZookeeperConsumerConnector) -> None:
            await c.zk.wait_for_state("suspended", "lost")
            noticed[name] = time.monotonic()
            await c.zk.wait_for_state("connected")
            reconnected[name] = time.monotonic()

        # Every session transition, timed inside the transition itself: a member may reconnect
        # for a moment to a ZooKeeper that is still shutting down (and hand records out, its
        # session valid), so "held back" means "nothing handed out while not connected".
        transitions: dict[str, list[tuple[float, str]]] = {name: [] for name in members}
        removers = [
            c.zk.add_state_listener(
                lambda state, name=name: transitions[name].append((time.monotonic(), state))
            )
            for name, c in members.items()
        ]
        for name, c in members.items():
            tg.start_soon(reconnect_of, name, c)
        stopping = time.monotonic()
        await cluster.stop_zookeeper()
        await anyio.sleep(down_s)
        await cluster.start_zookeeper()
        serving = time.monotonic()

        # Records flow again promptly after ZooKeeper serves again (the reconnect back-off is
        # capped at a tenth of the session timeout; about 0.5-0.8 s on a loaded two-core
        # machine, logged below). The bound is generous: half the session timeout.
        with anyio.fail_after(session_timeout_ms / 1000 / 2):
            await seen.wait_until(
                lambda: all(seen.count(name, since=serving) > 0 for name in members)
            )
        resumed = {
            name: min(t for m, _, _, t in seen.rows if m == name and t > serving)
            for name in members
        }
        log.info(  # the measurement; shown with --log-cli-level=INFO
            "ZooKeeper unreachable for at most %.2f s; after it served again: reconnected %s, "
            "records again %s",
            serving - stopping,
            ", ".join(f"{n} {reconnected.get(n, math.nan) - serving:.3f} s" for n in members),
            ", ".join(f"{n} {resumed[n] - serving:.3f} s" for n in members),
        )
        # Held back at once: nothing was handed out from the moment a member's connection
        # dropped until it was connected again (the drop is noticed when the member's event
        # loop reads the closed connection, which on a loaded machine can be some tens of ms
        # after the server stopped).
        for remove in removers:
            remove()

        def connected_at(name: str, t: float) -> bool:
            state = "connected"
            for when, new_state in transitions[name]:
                if when > t:
                    break
                state = new_state
            return state == "connected"

        assert set(noticed) == set(members)
        assert not [row for row in seen.rows if not connected_at(row[0], row[3])], transitions
        assert max(noticed.values()) < serving
        for name, c in members.items():
            session, rebalances, owned = before[name]
            assert c.zk.session_id == session, f"{name} lost its session"
            assert len(c.statistics().rebalances) == rebalances, f"{name} rebalanced"
            assert c.statistics().owned_partitions == owned
            assert c.state is ConnectorState.RUNNING
            got = await c.zk.get(layout.ids_path(unique_group_id, c.consumer_id_string))
            assert got is not None and got[1].ephemeral_owner == session
            for tp in owned:
                node = await c.zk.get(layout.owner_path(unique_group_id, tp.topic, tp.partition))
                assert node is not None and node[1].ephemeral_owner == session
        # Held back, not lost: each member's offsets run on without a gap.
        for name in members:
            (tp,) = before[name][2]
            offsets = sorted(seen.of(name, tp.partition))
            assert offsets == list(range(offsets[0], offsets[-1] + 1))
        tg.cancel_scope.cancel()


@pytest.mark.integration
async def test_link_cut_duplicates_stay_within_the_documented_window(
    zk_fault_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    """One member's ZooKeeper link is cut (packets dropped, process running): it stops
    handing out records within D = session timeout / 3, the other member takes its partition
    over after the session expires, and every record both handed out was handed out by the
    cut member within [cut - auto.commit.interval.ms - commit latency, cut + D]."""
    cluster = zk_fault_cluster
    link = cluster.link(0)
    await _topic(cluster, unique_topic, 1, 5000)
    seen = Deliveries()
    session_timeout_ms, commit_interval_ms = 4000, 500
    base = config_for(
        cluster,
        unique_group_id,
        zookeeper_session_timeout_ms=session_timeout_ms,
        auto_commit_interval_ms=commit_interval_ms,
    )
    # Consumer ids sort so that the one partition goes to the member whose link is cut.
    cut_config = dataclasses.replace(
        base, consumer_id="a-cut", zookeeper_connect=link.zookeeper_connect
    )
    other_config = dataclasses.replace(base, consumer_id="b-other")
    tp0 = TopicPartition(unique_topic, 0)
    try:
        async with (
            ZookeeperConsumerConnector(cut_config) as cut,
            ZookeeperConsumerConnector(other_config) as other,
            anyio.create_task_group() as tg,
        ):
            for name, c in (("cut", cut), ("other", other)):
                streams = await c.create_message_streams({unique_topic: 1})
                tg.start_soon(_read, streams[unique_topic][0], name, seen)
            await wait_settled([cut, other])
            assert cut.statistics().owned_partitions == (tp0,)
            await seen.wait_until(lambda: seen.count("cut") >= 100)  # commits have landed

            cut_before = time.monotonic()
            await link.cut("zookeeper")
            cut_after = time.monotonic()

            # The other member takes the partition over once the cut member's session expired,
            # and reads on from the last commit that landed, past what the cut member handed out.
            with anyio.fail_after(60):
                while tp0 not in other.statistics().owned_partitions:
                    await other.wait_for_state_change()
            await seen.wait_until(
                lambda: (
                    bool(seen.of("other", 0)) and max(seen.of("other", 0)) > max(seen.of("cut", 0))
                )
            )
            tg.cancel_scope.cancel()
    finally:
        await link.heal("zookeeper")

    by_cut, by_other = seen.of("cut", 0), seen.of("other", 0)
    takeover = min(by_other.values())
    duplicates = sorted(set(by_cut) & set(by_other))
    last = max(by_cut.values())
    log.info(  # the measurement; shown with --log-cli-level=INFO
        "link cut: %d duplicates, handed out by the cut member from %+.3f s to %+.3f s around "
        "the cut; its last record %+.3f s; takeover %+.3f s",
        len(duplicates),
        by_cut[duplicates[0]] - cut_before if duplicates else 0.0,
        by_cut[duplicates[-1]] - cut_before if duplicates else 0.0,
        last - cut_before,
        takeover - cut_before,
    )
    assert not [o for o, t in by_cut.items() if t >= takeover], "delivered after the takeover"
    detection_s = session_timeout_ms / 1000 / 3
    # Lower end: the last commit that landed took its offsets at most one interval (plus its
    # own round trip) before the cut.
    commit_latency_s = 0.25
    window = (cut_before - commit_interval_ms / 1000 - commit_latency_s, cut_after + detection_s)
    outside = {o: round(by_cut[o] - cut_before, 3) for o in duplicates}
    outside = {o: t for o, t in outside.items() if not window[0] <= by_cut[o] <= window[1]}
    assert not outside, f"duplicates handed out outside the window {window}: {outside}"
    assert duplicates, "the cut member handed out nothing after its last commit?"
