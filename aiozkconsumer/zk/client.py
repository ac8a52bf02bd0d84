"""The aiozk adapter: one ZooKeeper session with the original consumer's node idioms.

Everything the consumer does with ZooKeeper goes through ``ZkClient``: it translates aiozk's
exceptions into ``aiozkconsumer.errors`` (no ``aiozk.exc`` escapes), bounds connection set-up
by ``zookeeper.connection.timeout.ms``, implements the original's ephemeral-node rules
(``ZKCheckedEphemeral`` for registrations, ``createEphemeralPathExpectConflict`` for owner
nodes) and turns watches and session state into awaitable events owned by the caller's tasks
(no fire-and-forget callbacks).

It also reconnects promptly, which aiozk 0.32 cannot be configured to do: a ZooKeeper server
that restarts restores its sessions with a fresh timeout, so a client that is back within
that timeout keeps its session and ephemeral nodes. And it never sends a request under a
session other than the one it was made for (aiozk sends a pending request again on whatever
session it reconnects with): see :meth:`ZkClient.bound_to`.

And it is secured as :class:`~aiozkconsumer.security.ZookeeperSecurity` says (from
``zookeeper.auth``, ``zookeeper.set.acl`` and ``zookeeper.ssl.*``), none of which aiozk 0.32
has: the credentials are sent (AddAuth) on every new connection before any other request, as
kazoo's ``auth_data``; the connection speaks TLS to a ``secureClientPort``; and with
``set_acl`` every node created gets Kafka's ACL (creator-all + world-read, :func:`acl_for`).

The patched aiozk session and connection that do the connection work are in
:mod:`aiozkconsumer.zk.session`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any

import aiozk
import anyio
from aiozk import exc as zk_exc
from aiozk import protocol as zk_protocol
from aiozk.states import States

from .._concurrency import gather
from ..errors import (
    ZookeeperAuthError,
    ZookeeperConnectionError,
    ZookeeperError,
    ZookeeperNodeExistsError,
    ZookeeperNoNodeError,
)
from ..security import ZookeeperSecurity
from . import layout
from .error_map import map_zk_errors as map_zk_errors  # the adapter's boundary, re-exported
from .ops import Create, Delete, MultiResult, Op, SetData
from .session import (
    _BOUND_SESSION,
    RECONNECT_BACKOFF_CAP_FRACTION,
    RECONNECT_BACKOFF_START_S,
    _PromptSession,
    describe_connect_error,
    reconnect_backoff_s,
)
from .transactions import (
    MAX_READS_PER_REQUEST,
    MULTI_READ_SINCE,
    MultiReadRequest,
    judge_transaction,
    read_results,
)

__all__ = [
    "CREATOR_ALL_READ_ACL",
    "OPEN_ACL",
    "RECONNECT_BACKOFF_CAP_FRACTION",
    "RECONNECT_BACKOFF_START_S",
    "SessionState",
    "ZkClient",
    "acl_for",
    "close_raw",
    "force_close",
    "parse_connect_string",
    "reconnect_backoff_s",
]

log = logging.getLogger(__name__)

SessionState = str  # one of aiozk's States: "connected", "suspended", "read_only", "lost"


def parse_connect_string(connect: str) -> tuple[str, str | None]:
    """Split ``host:port[,host:port...][/chroot]`` into servers and chroot.

    Returns:
        ``(servers, chroot)``; ``chroot`` is ``None`` when absent or ``"/"``.
    """
    servers, slash, chroot = connect.partition("/")
    root = "/" + chroot.rstrip("/") if slash and chroot.strip("/") else None
    return servers, root


OPEN_ACL: list[Any] = [zk_protocol.UNRESTRICTED_ACCESS]
"""``world:anyone`` with every permission: ZooKeeper's ``OPEN_ACL_UNSAFE``, aiozk's default."""

CREATOR_ALL_READ_ACL: list[Any] = [zk_protocol.AUTHED_UNRESTRICTED, zk_protocol.WORLD_READABLE]
"""Every permission for the identities of the session that created the node (``auth``
scheme), read for anyone: ``ZooDefs.Ids.CREATOR_ALL_ACL ++ READ_ACL_UNSAFE``, what Kafka's
brokers give their nodes with ``zookeeper.set.acl=true``."""


def acl_for(path: str, set_acl: bool) -> list[Any] | None:
    """The ACL a node this client creates gets.

    As Kafka's ``ZkData.defaultAcls`` (3.x; ``ZkUtils.defaultAcls`` before): with
    ``zookeeper.set.acl`` every node gets :data:`CREATOR_ALL_READ_ACL`, except
    ``/consumers`` itself, which stays open (:data:`OPEN_ACL`) because the members of every
    group create their group's node under it. Without it, aiozk's default (open) applies.

    Args:
        path: the node's path under the chroot.
        set_acl: ``zookeeper.set.acl``.

    Returns:
        aiozk ``ACL`` objects, or ``None`` for aiozk's default.
    """
    if not set_acl:
        return None
    if posixpath.normpath(path) == layout.CONSUMERS_PATH:
        return OPEN_ACL
    return CREATOR_ALL_READ_ACL


def _prompt_client(
    servers: str,
    chroot: str | None,
    session_timeout_s: float,
    security: ZookeeperSecurity | None = None,
    state_listeners: list[Callable[[str], None]] | None = None,
) -> Any:
    """An ``aiozk.ZKClient`` whose session is a :class:`_PromptSession`.

    ``ZKClient.__init__`` builds its ``Session`` itself; nothing holds it before ``start()``,
    so it is swapped for the prompt one, built with the same arguments (and the TLS context
    and credentials of ``security``). With ``set_acl`` the client's default ACL (which
    aiozk's ``start`` uses for the chroot's nodes) is :data:`CREATOR_ALL_READ_ACL`, as Kafka
    gives a chroot it creates.
    """
    security = security or ZookeeperSecurity()
    client = aiozk.ZKClient(
        servers,
        chroot=chroot,
        session_timeout=session_timeout_s,
        default_acl=CREATOR_ALL_READ_ACL if security.set_acl else None,
    )
    client.session = _PromptSession(
        servers,
        session_timeout_s,
        None,
        False,
        None,
        ssl_context=security.ssl_context,
        auth=security.auth,
        state_listeners=state_listeners,
    )
    return client


_FORCE_CLOSE_WAIT_S = 1.0


async def force_close(raw: Any) -> None:
    """Tear an ``aiozk.ZKClient`` down without talking to the server (never raises).

    ``Session.close`` first sends a CloseRequest, which waits for a connected state; with the
    server down (or the link cut) it times out before cancelling the heartbeat and repair
    loop. This cancels them, aborts the connection and waits (bounded) for the tasks to end.
    The server expires the session after its timeout. Used by ``ZkClient`` and the test kit.

    Args:
        raw: the ``aiozk.ZKClient``.
    """
    session = raw.session
    session.closing = True
    if getattr(session, "heartbeat_handle", None) is not None:
        session.heartbeat_handle.cancel()
        session.heartbeat_handle = None
    conn = getattr(session, "conn", None)
    tasks = [
        t
        for t in (
            getattr(session, "repair_loop_task", None),
            getattr(session, "heartbeat_task", None),
            getattr(conn, "read_loop_task", None),
        )
        if t is not None and not t.done()
    ]
    for task in tasks:
        task.cancel()
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.abort()
        writer = getattr(conn, "writer", None)
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
    if tasks:
        await asyncio.wait(tasks, timeout=_FORCE_CLOSE_WAIT_S)
    session.started = False


async def close_raw(raw: Any, time_limit: float = 5.0) -> None:
    """Close an ``aiozk.ZKClient`` within ``time_limit`` seconds, forcing it if need be.

    A graceful close (the server deletes the session's ephemeral nodes at once) when the
    session is connected; :func:`force_close` otherwise or when the close fails or times out.
    Never raises except cancellation (after forcing the close).
    """
    session = raw.session
    if session.started and session.state.current_state != States.CONNECTED:
        await force_close(raw)
        return
    try:
        with anyio.fail_after(time_limit):
            await raw.close()
    except Exception as exc:  # ZooKeeper down or already gone, or the limit passed
        log.debug("aiozk close failed (%r); forcing it", exc)
        await force_close(raw)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await force_close(raw)
        raise


_MULTI_EXPECTED_FAILURES = (
    zk_exc.RolledBack,  # an operation before the one that failed (code 0)
    zk_exc.RuntimeInconsistency,  # an operation after it
    zk_exc.BadVersion,  # the fence moved on
    zk_exc.NoNode,  # the fence, or the node to write, vanished
    zk_exc.NodeExists,  # the node to create appeared
)
"""Results of a failed multi-op that :meth:`ZkClient.fenced_write` reads as such, not as
errors."""


class ZkClient:
    """One ZooKeeper session (an ``aiozk.ZKClient``) with the consumer's idioms.

    Args:
        connect: ``zookeeper.connect``, ``host:port[,host:port...][/chroot]``.
        session_timeout_ms: ``zookeeper.session.timeout.ms`` (the server may negotiate it
            into its ``[2, 20] x tickTime`` range).
        connection_timeout_ms: ``zookeeper.connection.timeout.ms``: how long ``start()``
            waits for the first session.
        request_timeout_ms: bound on a single request while the connection is down; aiozk
            would otherwise wait forever for the session to come back. Defaults to the
            session timeout.
        security: TLS, credentials and the ACL of created nodes
            (:meth:`ZookeeperSecurity.from_config
            <aiozkconsumer.security.ZookeeperSecurity.from_config>`); default none of them.
            The credentials are sent on every connection before any request; with
            ``set_acl`` every node this client creates gets :func:`acl_for`'s ACL.

    Every request may raise :class:`~aiozkconsumer.errors.ZookeeperAuthError` when the
    node's ACL does not allow it to this client (``NoAuth``: ``path`` is the node), or when
    the session was refused its credentials (``path`` ``None``).
    """

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 6000,
        connection_timeout_ms: int = 6000,
        request_timeout_ms: int | None = None,
        security: ZookeeperSecurity | None = None,
    ) -> None:
        self.connect = connect
        self._servers, self._chroot = parse_connect_string(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self.request_timeout_s = (request_timeout_ms or session_timeout_ms) / 1000
        self.security = security or ZookeeperSecurity()
        self._auth_scheme = None if self.security.auth is None else self.security.auth[0]
        self._zk: Any = None
        self._closed = False
        self._state_listeners: list[Callable[[SessionState], None]] = []

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the session.

        While disconnected later on, the client retries the servers of ``connect`` with a
        short back-off (:func:`reconnect_backoff_s`: from 50–100 ms up to a tenth of the
        session timeout), so a ZooKeeper restart that the server's restored sessions
        outlive expires none.

        Raises:
            ZookeeperConnectionError: no server of ``connect`` answered within
                ``connection_timeout_ms`` (the message says why the last attempt failed),
                or, with TLS, no server's certificate verifies (at once, naming the server
                and the reason); every background task aiozk started is stopped.
            ZookeeperAuthError: the server refused the credentials of ``zookeeper.auth``
                (``AUTH_FAILED``, ``path`` ``None``), or the chroot's ACL does not let this
                client create it (``path`` the chroot).
        """
        self._zk = _prompt_client(
            self._servers,
            self._chroot,
            self.session_timeout_ms / 1000,
            self.security,
            self._state_listeners,
        )
        try:
            with anyio.fail_after(self.connection_timeout_ms / 1000):
                await self._zk.start()  # with a chroot, creates it where missing
        except ZookeeperError:  # refused: the credentials, or every server's certificate
            await self._abort()
            raise
        except (zk_exc.NoAuth, zk_exc.InvalidACL) as e:
            await self._abort()
            with map_zk_errors(self._chroot, op="create", auth_scheme=self._auth_scheme):
                raise e
        except (TimeoutError, zk_exc.ZKError, OSError) as e:
            last = getattr(self._zk.session, "last_connect_error", None)
            await self._abort()
            raise ZookeeperConnectionError(
                f"could not connect to ZooKeeper at {self.connect!r} within "
                f"zookeeper.connection.timeout.ms={self.connection_timeout_ms}"
                + (f"; last attempt: {describe_connect_error(*last)}" if last else "")
            ) from e
        except BaseException:
            await self._abort()
            raise

    async def _abort(self) -> None:
        """Stop aiozk's background tasks without talking to the server."""
        if self._zk is not None:
            await force_close(self._zk)

    async def close(self, timeout_s: float = 5.0) -> None:
        """Close the session: the server deletes its ephemeral nodes at once.

        Never raises; bounded by ``timeout_s`` (then the connection is dropped, and the
        server expires the session after its timeout).
        """
        if self._zk is None or self._closed:
            return
        self._closed = True
        try:
            with anyio.CancelScope(shield=True), anyio.fail_after(timeout_s):
                await self._zk.close()
        except BaseException as e:
            log.debug("ZooKeeper close did not finish cleanly: %r", e)
            await self._abort()

    @contextlib.contextmanager
    def bound_to(self, session_id: int | None) -> Iterator[None]:
        """Bind the requests made in the block (and in tasks it starts) to one session.

        Each request is sent only while ``session_id`` is the current session: once it was
        replaced by a new one (it expired), a request fails with
        ``ZookeeperSessionExpiredError`` instead of landing under the new session. Without
        a binding, a request is bound to the session current when it is made. For steps of
        several requests that act for one session's ownership (a fenced offset commit).

        Args:
            session_id: the session; ``None`` binds nothing.
        """
        token = _BOUND_SESSION.set(session_id) if session_id is not None else None
        try:
            yield
        finally:
            if token is not None:
                _BOUND_SESSION.reset(token)

    @property
    def raw(self) -> Any:
        """The underlying ``aiozk.ZKClient`` (for tools and tests)."""
        return self._zk

    @property
    def session_password(self) -> bytes | None:
        """The current session's password (``None`` before the first session).

        With the session id it lets a second client take the session over, which is how the
        test kit expires a session for real.
        """
        if self._zk is None or self.session_id is None:
            return None
        password = getattr(self._zk.session, "password", None)
        return password if isinstance(password, bytes) else None

    @property
    def chroot(self) -> str | None:
        """The connect string's chroot (``"/kafka"``); ``None`` without one."""
        return self._chroot or None

    @property
    def session_id(self) -> int | None:
        """The current session id, ``None`` before the first session."""
        return None if self._zk is None else self._zk.session.session_id

    @property
    def state(self) -> SessionState:
        """The session state: ``"connected"``, ``"suspended"``, ``"read_only"`` or ``"lost"``."""
        if self._zk is None:
            return str(States.LOST)
        return str(self._zk.session.state.current_state)

    def add_state_listener(self, listener: Callable[[SessionState], None]) -> Callable[[], None]:
        """Call ``listener(state)`` synchronously on every session state transition.

        Unlike :meth:`wait_for_state` and :meth:`session_events`, whose waiters run on a later
        turn of the event loop, the listener runs inside the transition, before any other
        task: for what must not lag the state (closing the ownership gate the moment the
        connection drops). It must be quick and must not raise (an exception is logged).
        May be added before :meth:`start`.

        Returns:
            A function removing the listener.
        """
        self._state_listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._state_listeners.remove(listener)

        return remove

    async def wait_for_state(self, *states: SessionState) -> None:
        """Wait until the session is in one of ``states`` (returns at once if it is)."""
        await self._zk.session.state.wait_for(*states)

    async def session_events(self) -> AsyncIterator[tuple[str, int | None]]:
        """Yield ``("suspended"|"lost", old_id)`` and ``("connected", new_id)`` transitions.

        ``("connected", id)`` with an id different from the previous one means the old session
        expired and aiozk opened a new one: its ephemeral nodes are gone.
        """
        last_id = self.session_id
        while True:
            await self.wait_for_state(States.SUSPENDED, States.LOST)
            yield (self.state, last_id)
            await self.wait_for_state(States.CONNECTED)
            last_id = self.session_id
            yield (States.CONNECTED, last_id)

    async def connection_drops(self) -> AsyncIterator[None]:
        """Yield each time the connection to the server drops, the moment it does.

        aiozk notices a connection the server closed (for example because it expired the
        session) only at the next request; until then the session state still says connected.
        This follows the connection's read loop instead, so the caller learns at once.
        """
        dead: Any = None
        while True:
            session = self._zk.session if self._zk is not None else None
            conn = getattr(session, "conn", None)
            task = getattr(conn, "read_loop_task", None)
            if conn is None or conn is dead or task is None:
                await anyio.sleep(0.05)  # aiozk offers no event for a new connection
                continue
            await asyncio.wait({task})
            dead = conn
            yield

    # -- requests ------------------------------------------------------------------------

    async def _call(self, path: str, coro: Any, op: str = "read") -> Any:
        """Await an aiozk request on ``path``, bounded, its errors translated (``op`` names
        the operation in a ``NoAuth`` message)."""
        with map_zk_errors(path, op=op, auth_scheme=self._auth_scheme):
            try:
                with anyio.fail_after(self.request_timeout_s):
                    return await coro
            except TimeoutError:
                raise ZookeeperConnectionError(
                    f"ZooKeeper request on {path} timed out after {self.request_timeout_s:.1f} s "
                    f"(connection to {self.connect!r} lost?)"
                ) from None

    async def get(self, path: str) -> tuple[bytes, Any] | None:
        """Return ``(data, stat)`` of a node, or ``None`` if it does not exist."""
        try:
            data, stat = await self._call(path, self._zk.get(path))
        except ZookeeperNoNodeError:
            return None
        return (data or b"", stat)

    async def get_many(self, paths: Iterable[str]) -> list[tuple[bytes, Any] | None]:
        """Read the data and stat of each of ``paths`` in one request (``multiRead``, up to
        :data:`MAX_READS_PER_REQUEST` paths a request); ``None`` where a node does not exist.

        Against a server older than :data:`MULTI_READ_SINCE`, one request per node, all in
        flight at once.

        Returns:
            Per path, in order, ``(data, stat)`` or ``None``.

        Raises:
            ZookeeperAuthError: a node's ACL does not allow reading it (``path`` names it).
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        paths = list(paths)
        if len(paths) < 2 or not self._multi_read_supported():
            return list(await gather(self.get(path) for path in paths))
        chunks = [
            paths[i : i + MAX_READS_PER_REQUEST]
            for i in range(0, len(paths), MAX_READS_PER_REQUEST)
        ]
        out: list[tuple[bytes, Any] | None] = []
        for got in await gather(self._multi_read(chunk) for chunk in chunks):
            out.extend(got)
        return out

    def _multi_read_supported(self) -> bool:
        version = getattr(getattr(self._zk.session, "conn", None), "version_info", None)
        return version is not None and tuple(version) >= MULTI_READ_SINCE

    def _multi_read_request(self, paths: Sequence[str]) -> Any:
        request = MultiReadRequest()
        for path in paths:
            request.add(zk_protocol.GetDataRequest(path=self._zk.normalize_path(path), watch=False))
        return request

    async def _multi_read(self, paths: list[str]) -> list[tuple[bytes, Any] | None]:
        response = await self._call(paths[0], self._zk.send(self._multi_read_request(paths)))
        return read_results(paths, list(response.responses), self._auth_scheme)

    async def get_data(self, path: str) -> bytes | None:
        """Return a node's data, or ``None`` if it does not exist."""
        got = await self.get(path)
        return None if got is None else got[0]

    async def get_children(self, path: str, *, watch: bool = False) -> list[str] | None:
        """Return a node's children (unsorted), or ``None`` if the node does not exist."""
        try:
            children = await self._call(path, self._zk.get_children(path, watch=watch), "list")
            return list(children)
        except ZookeeperNoNodeError:
            return None

    async def get_children_and_stat(self, path: str) -> tuple[list[str], Any] | None:
        """Return a node's children (unsorted) and its stat from one snapshot (ZooKeeper's
        ``getChildren2``), or ``None`` if the node does not exist.

        The stat's ``child_version`` counts the creations and deletions of children up to
        exactly the list returned.
        """
        request = zk_protocol.GetChildren2Request(path=self._zk.normalize_path(path), watch=False)
        try:
            response = await self._call(path, self._zk.send(request), "list")
        except ZookeeperNoNodeError:
            return None
        return list(response.children), response.stat

    async def exists(self, path: str, *, watch: bool = False) -> bool:
        """Whether a node exists (optionally leaving an exists-watch)."""
        return bool(await self._call(path, self._zk.exists(path, watch=watch)))

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents as persistent nodes where missing.

        As aiozk's ``ensure_path`` (the nodes are containers where the server has them),
        with each node's own ACL (:func:`acl_for`). A node that exists is left as it is,
        even where this client may not create it (a ``NoAuth`` on an existing node).

        Raises:
            ZookeeperAuthError: a missing node may not be created here (its parent's ACL),
                or ``zookeeper.set.acl`` without an identity to give rights to.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        parts = [p for p in path.split("/") if p]
        for depth in range(1, len(parts) + 1):
            node = "/" + "/".join(parts[:depth])
            try:
                await self._create(node, b"", container=self._zk.features.containers)
            except ZookeeperNodeExistsError:
                pass
            except ZookeeperAuthError:
                if not await self.exists(node):
                    raise

    async def _create(
        self, path: str, data: bytes, *, ephemeral: bool = False, container: bool = False
    ) -> None:
        """One create, with the node's ACL (:func:`acl_for`)."""
        acl = acl_for(path, self.security.set_acl)
        await self._call(
            path,
            self._zk.create(path, data, acl=acl, ephemeral=ephemeral, container=container),
            "create",
        )

    async def create(
        self, path: str, data: bytes, *, ephemeral: bool = False, make_parents: bool = True
    ) -> None:
        """Create a node, creating missing parents as persistent nodes.

        With ``zookeeper.set.acl`` the node and the parents created get :func:`acl_for`'s
        ACL.

        Raises:
            ZookeeperNodeExistsError: the node exists.
            ZookeeperNoNodeError: the parent is missing and ``make_parents`` is false.
            ZookeeperAuthError: the parent's ACL does not let this client create children
                (``path`` names the node), or ``zookeeper.set.acl`` without an identity.
            ZookeeperConnectionError: the connection was lost and did not come back in time.
        """
        try:
            await self._create(path, data, ephemeral=ephemeral)
        except ZookeeperNoNodeError:
            if not make_parents:
                raise
            await self.ensure_path(posixpath.dirname(path))
            await self._create(path, data, ephemeral=ephemeral)

    async def create_ephemeral_checked(self, path: str, data: bytes) -> None:
        """Create an ephemeral node the way ``ZKCheckedEphemeral`` (0.9+, KAFKA-1387) does.

        If the node exists and is owned by *this* session (a retried create after a connection
        loss), that counts as success.

        Raises:
            ZookeeperNodeExistsError: the node exists and belongs to another session.
            ZookeeperAuthError: the parent's ACL does not let this client create it.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        try:
            await self.create(path, data, ephemeral=True)
        except ZookeeperNodeExistsError:
            got = await self.get(path)
            if got is None:
                await self.create(path, data, ephemeral=True)
                return
            if got[1].ephemeral_owner != self.session_id:
                raise ZookeeperNodeExistsError(
                    path,
                    f"ZooKeeper node {path} exists and belongs to another session "
                    f"(0x{got[1].ephemeral_owner:x}); is another consumer using the same "
                    "consumer.id?",
                ) from None

    async def create_ephemeral_expect_conflict(self, path: str, data: bytes) -> bool:
        """Create an ephemeral node as ``createEphemeralPathExpectConflict`` does.

        Returns:
            ``True`` if the node was created, or already holds exactly ``data`` (a create
            retried over a connection loss); ``False`` if another value is there.

        Raises:
            ZookeeperAuthError: the parent's ACL does not let this client create it (an
                owner node under another identity's ``owners/<topic>``).
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        try:
            await self.create(path, data, ephemeral=True)
            return True
        except ZookeeperNodeExistsError:
            return await self.get_data(path) == data

    async def set_or_create(self, path: str, data: bytes) -> None:
        """Write a persistent node, creating it and its parents if missing.

        As ``ZkUtils.updatePersistentPath``.

        Raises:
            ZookeeperAuthError: the node's ACL does not let this client write it (or its
                parent's, create it).
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        await self.bump(path, data)

    async def bump(self, path: str, data: bytes) -> int:
        """Write a persistent node (creating it and its parents) and return its new version.

        Used for fencing tokens: every write increments the version.

        Raises:
            ZookeeperAuthError: the node's ACL does not let this client write it (or its
                parent's, create it).
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        try:
            stat = await self._call(path, self._zk.set(path, data, -1), "write")
        except ZookeeperNoNodeError:
            try:
                await self.create(path, data)
                return 0
            except ZookeeperNodeExistsError:
                stat = await self._call(path, self._zk.set(path, data, -1), "write")
        return int(stat.version)

    async def set_data(self, path: str, data: bytes, version: int = -1) -> int:
        """Write an existing node, only if it has ``version`` (``-1``: any version).

        Returns:
            The node's new version.

        Raises:
            ZookeeperNoNodeError: the node does not exist.
            ZookeeperBadVersionError: the node has another version.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        stat = await self._call(path, self._zk.set(path, data, version), "write")
        return int(stat.version)

    async def fenced_write(
        self, path: str, data: bytes, fence_path: str, fence_version: int
    ) -> bool:
        """Write a persistent node only while ``fence_path`` still has ``fence_version``.

        One ZooKeeper multi-op (``check`` + ``setData``, or ``check`` + ``create`` when the
        node does not exist yet): either both happen or neither.

        Returns:
            ``True`` if written; ``False`` if the fence moved on (or vanished).

        Raises:
            ZookeeperAuthError: an ACL does not let this client write the node (or create
                it, or read the fence): ``path`` names that node. Nothing was written.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        for _ in range(3):  # the node may appear or vanish between the look and the write
            exists = await self.exists(path)
            txn = self._zk.begin_transaction()
            txn.check_version(fence_path, fence_version)
            if exists:
                op = "write"
                txn.set_data(path, data, -1)
            else:
                op = "create"
                await self.ensure_path(posixpath.dirname(path))
                txn.create(path, data, acl=acl_for(path, self.security.set_acl))
            # Sent as is rather than by aiozk's Transaction.commit, which drops the result of
            # each failed operation: a NoAuth would look like a moved fence.
            response = await self._call(path, self._zk.send(txn.request), "write")
            results = list(response.responses)
            for node, what, result in zip((fence_path, path), ("check", op), results, strict=True):
                if isinstance(result, zk_exc.ResponseError) and not isinstance(
                    result, _MULTI_EXPECTED_FAILURES
                ):
                    with map_zk_errors(node, op=what, auth_scheme=self._auth_scheme):
                        raise result
            if not any(isinstance(result, Exception) for result in results):
                return True
            got = await self.get(fence_path)
            if got is None or got[1].version != fence_version:
                return False
        return False

    async def multi(self, ops: Sequence[Op]) -> MultiResult:
        """Apply ``ops`` as one ZooKeeper transaction (``multi``): all of them or none.

        One request, one round trip and one entry in the server's log, whatever the number
        of operations. Created nodes get :func:`acl_for`'s ACL; a multi creates no parents.

        Args:
            ops: the operations, applied in order; none: nothing is sent.

        Returns:
            The result: applied, with each :class:`~aiozkconsumer.zk.ops.SetData`'s new
            version; or not applied, naming the operation that failed and its error
            (``ZookeeperNoNodeError``, ``ZookeeperNodeExistsError`` or
            ``ZookeeperBadVersionError`` for its node, as the operation alone would raise).

        Raises:
            ZookeeperAuthError: an ACL does not allow one of the operations (``path`` names
                its node). Nothing was applied.
            ZookeeperConnectionError: ZooKeeper is unreachable (the transaction may or may
                not have been applied: whole, if at all).
            ZookeeperSessionExpiredError: the session (or the one the caller is bound to)
                expired.
        """
        ops = tuple(ops)
        if not ops:
            return MultiResult(ops=ops)
        response = await self._call(ops[0].path, self._zk.send(self._transaction(ops)), "write")
        return judge_transaction(ops, list(response.responses), self._auth_scheme)

    async def multi_and_read(
        self, ops: Sequence[Op], paths: Sequence[str]
    ) -> tuple[MultiResult, list[tuple[bytes, Any] | None] | None]:
        """Apply ``ops`` as one transaction (:meth:`multi`) and read ``paths`` right behind it
        on the same connection, in one round trip.

        The server handles one session's requests in order, so the reads see the transaction
        applied. Sent together only where the server answers ``multiRead`` (one request for
        the reads) and with at most :data:`MAX_READS_PER_REQUEST` paths; otherwise, and when
        the connection drops meanwhile, this is :meth:`multi` alone (sent again on a new
        connection as every request) and nothing is read.

        Returns:
            ``(the transaction's result, per path (data, stat) or None)``; the reads are
            ``None`` when not made or when the transaction was not applied.

        Raises:
            As :meth:`multi`; a read's ACL (``ZookeeperAuthError``).
        """
        ops = tuple(ops)
        if not ops:
            return MultiResult(ops=ops), None
        if not paths or len(paths) > MAX_READS_PER_REQUEST or not self._multi_read_supported():
            return await self.multi(ops), None
        reads = self._multi_read_request(paths)
        session = self._zk.session
        try:
            answers = await self._call(
                ops[0].path, session.send_in_order([self._transaction(ops), reads]), "write"
            )
        except ZookeeperConnectionError:
            return await self.multi(ops), None
        transaction, read = answers
        if isinstance(transaction, Exception):
            with map_zk_errors(ops[0].path, op="write", auth_scheme=self._auth_scheme):
                raise transaction
        result = judge_transaction(ops, list(transaction.responses), self._auth_scheme)
        if not result.applied:
            return result, None
        if isinstance(read, Exception):
            with map_zk_errors(paths[0], op="read", auth_scheme=self._auth_scheme):
                raise read
        return result, read_results(list(paths), list(read.responses), self._auth_scheme)

    def _transaction(self, ops: Sequence[Op]) -> Any:
        """The aiozk request of a transaction of ``ops``."""
        txn = self._zk.begin_transaction()
        set_acl = self.security.set_acl
        for op in ops:
            if isinstance(op, Create):
                txn.create(op.path, op.data, acl=acl_for(op.path, set_acl), ephemeral=op.ephemeral)
            elif isinstance(op, SetData):
                txn.set_data(op.path, op.data, op.version)
            elif isinstance(op, Delete):
                txn.delete(op.path, op.version)
            else:
                txn.check_version(op.path, op.version)
        request = txn.request
        request.writes_data = True  # aiozk's TransactionRequest says False (read-only mode)
        return request

    async def delete_if_owned(self, path: str) -> bool:
        """Delete an ephemeral node only if this session owns it.

        After a session expiry another member may have created the node anew; deleting it
        would take its ownership away. Returns whether a node was deleted.
        """
        got = await self.get(path)
        if got is None or got[1].ephemeral_owner != self.session_id:
            return False
        return await self.delete(path)

    @property
    def negotiated_timeout_s(self) -> float:
        """The session timeout the server granted, seconds (the requested one before)."""
        if self._zk is None:
            return self.session_timeout_ms / 1000
        return float(self._zk.session.timeout)

    async def delete(self, path: str) -> bool:
        """Delete a node (any version). Returns ``False`` if it did not exist.

        Raises:
            ZookeeperAuthError: the parent's ACL does not let this client delete children.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        try:
            await self._call(path, self._zk.delete(path, force=True), "delete")
            return True
        except ZookeeperNoNodeError:
            return False

    async def delete_recursive(self, path: str) -> None:
        """Delete a node and everything below it (not atomic; missing nodes are fine)."""
        children = await self.get_children(path)
        if children is None:
            return
        for child in children:
            await self.delete_recursive(f"{path.rstrip('/')}/{child}")
        await self.delete(path)

    # -- watches -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _watch_event(self, path: str, kinds: Iterable[Any]) -> AsyncIterator[asyncio.Event]:
        """Register a callback for ``kinds`` of watch events on ``path``; yield an Event it sets."""
        event = asyncio.Event()

        def fire(_path: str) -> None:
            event.set()

        session = self._zk.session
        full = self._zk.normalize_path(path)
        kinds = list(kinds)
        for kind in kinds:
            session.add_watch_callback(kind, full, fire)
        try:
            yield event
        finally:
            for kind in kinds:
                session.remove_watch_callback(kind, full, fire)

    async def watch_children(self, path: str) -> AsyncIterator[list[str] | None]:
        """Yield the children of ``path`` now and after every change (``None``: no node).

        ZooKeeper coalesces changes: each value is the state after one or more changes. While
        the node is missing, an exists-watch waits for its creation. Watches survive
        reconnects (aiozk re-arms them with SetWatches).
        """
        kinds = (
            aiozk.WatchEvent.CHILDREN_CHANGED,
            aiozk.WatchEvent.DELETED,
            aiozk.WatchEvent.CREATED,
        )
        async with self._watch_event(path, kinds) as event:
            while True:
                event.clear()
                children = await self.get_children(path, watch=True)
                if children is None and await self.exists(path, watch=True):
                    continue  # created in between: read it again
                yield children
                await event.wait()

    async def watch_data(self, path: str) -> AsyncIterator[bytes | None]:
        """Yield the data of ``path`` now and after every change (``None``: no node)."""
        kinds = (
            aiozk.WatchEvent.DATA_CHANGED,
            aiozk.WatchEvent.DELETED,
            aiozk.WatchEvent.CREATED,
        )
        async with self._watch_event(path, kinds) as event:
            while True:
                event.clear()
                try:
                    data: bytes | None = await self._call(path, self._zk.get_data(path, watch=True))
                except ZookeeperNoNodeError:
                    if await self.exists(path, watch=True):
                        continue
                    data = None
                yield data
                await event.wait()

    async def wait_deleted(self, paths: Iterable[str], timeout_s: float) -> bool:
        """Wait until every node of ``paths`` is gone, at most ``timeout_s`` seconds.

        Used instead of sleeping ``rebalance.backoff.ms`` when an owner node of a previous
        owner is in the way.

        Returns:
            ``True`` if all are gone, ``False`` on timeout.
        """
        deadline = anyio.current_time() + timeout_s
        for path in paths:
            async with self._watch_event(path, (aiozk.WatchEvent.DELETED,)) as event:
                while await self.exists(path, watch=True):
                    with anyio.move_on_after(deadline - anyio.current_time()) as scope:
                        await event.wait()
                    if scope.cancelled_caught:
                        return False
                    event.clear()
        return True

    def __repr__(self) -> str:
        sid = self.session_id
        return (
            f"<ZkClient {self.connect} [{self.state}, session {'-' if sid is None else hex(sid)}]>"
        )
