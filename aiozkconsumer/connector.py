"""``ZookeeperConsumerConnector``: a member of a ZooKeeper-coordinated group, and its wiring.

The asyncio counterpart of ``ZookeeperConsumerConnector.scala`` (0.10.2). The shared part —
lifecycle, streams, commits, statistics — is ``base_connector.ConsumerConnector``; this module
adds the ZooKeeper coordinator's parts, each given what it needs, never the connector:

- ``rebalance.Rebalancer`` (decisions in ``plan.py``): the serialized rebalance worker;
- ``membership.Membership``: the registration node and the reset after a new session;
- ``watches.GroupWatches``: the ZooKeeper watches that trigger rebalances;
- ``lease.SessionLease``: records flow only while the session is proven alive;
- ``commits.FencedCommitter``: commits fenced by the partitions' fencing tokens;
- ``liveness.PollLiveness``: with ``zookeeper.poll.liveness.enable``, deregisters the member
  while a reader holds past ``max.poll.interval.ms``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

from anyio.abc import TaskGroup

from ._concurrency import gather
from .base_connector import (
    CLOSE_COMMIT_LIMIT_S,
    CLOSE_STEP_LIMIT_S,
    ConnectorState,
    ConnectorStatistics,
    ConsumerRebalanceListener,
    generate_consumer_id,
)
from .cluster import ClusterView
from .commits import FencedCommitter
from .config import ConsumerConfig
from .errors import (
    ConsumerError,
    ZookeeperConnectionError,
)
from .interceptors import ConsumerInterceptor
from .offsets import make_offset_store
from .records import OwnershipGate
from .security import KafkaSecurity, ZookeeperSecurity
from .verbs import ConnectorVerbs
from .zk.client import ZkClient
from .zk.retry import connection_retry_window_s, retry_until_connected
from .zkgroup.lease import SessionLease
from .zkgroup.liveness import PollLiveness
from .zkgroup.membership import Membership
from .zkgroup.rebalancer import Rebalancer
from .zkgroup.watches import GroupWatches

__all__ = [
    "CLOSE_COMMIT_LIMIT_S",
    "CLOSE_STEP_LIMIT_S",
    "ConnectorState",
    "ConnectorStatistics",
    "ConsumerRebalanceListener",
    "ZookeeperConsumerConnector",
    "generate_consumer_id",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

class ZookeeperConsumerConnector(ConnectorVerbs):
    """A member of a ZooKeeper-coordinated consumer group.

    Use as an async context manager, entered and left in one task::

        async with ZookeeperConsumerConnector(config) as connector:
            streams = await connector.create_message_streams({"payments": 2})
            async for msg in streams["payments"][0]:
                ...

    Entering opens the ZooKeeper session; leaving stops fetchers, ends the streams, commits
    consumed offsets (auto-commit on), and closes the session, so the group's other members
    rebalance at once (``shutdown``, 0.10.2 order).

    With ``zookeeper.poll.liveness.enable`` (off by default, as the original), a member whose
    stream's reader holds a record past ``max.poll.interval.ms`` commits, gives its partitions
    up and deregisters until the reader asks again (:attr:`poll_liveness`).

    The Java ``KafkaConsumer``'s runtime verbs (``seek``, ``pause``, ``position``,
    ``assign``, ...) come from :class:`~aiozkconsumer.verbs.ConnectorVerbs`.

    Args:
        config: the consumer configuration (``group.coordinator=zookeeper``).
        fetch: ``False`` makes a member that takes part in the group (registration,
            rebalances, owner nodes, offsets) but fetches nothing: whoever owns it reads the
            owned partitions itself (the Spark source plans offset ranges for them) and commits
            with ``commit_offsets(offsets)``. Its streams stay empty.
        interceptors: consumer interceptors besides those ``interceptor.classes`` names.

    The ZooKeeper session is secured as ``zookeeper.auth``, ``zookeeper.set.acl`` and
    ``zookeeper.ssl.*`` say (:class:`~aiozkconsumer.security.ZookeeperSecurity`).

    Raises:
        InvalidConfigError: ``zookeeper.connect`` is not set, ``interceptor.classes``
            names a class that cannot be loaded, or a ``zookeeper.ssl.*`` file does not load.
        ZookeeperConnectionError: (on entering) ZooKeeper did not answer within
            ``zookeeper.connection.timeout.ms``, or (TLS) no server's certificate verifies.
        ZookeeperAuthError: (on entering) ZooKeeper refused the credentials of
            ``zookeeper.auth``; (later) a node's ACL does not allow this member what it asks
            (its registration, an owner node, an offset): ``path`` names the node.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        fetch: bool = True,
        interceptors: Sequence[ConsumerInterceptor] = (),
    ) -> None:
        self.zk = ZkClient(
            config.require_zookeeper_connect(),
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.effective_zookeeper_connection_timeout_ms,
            security=ZookeeperSecurity.from_config(config),
        )
        cluster = ClusterView(
            self.zk,
            source=config.cluster_metadata_source,
            bootstrap_servers=config.bootstrap_servers,
            client_id=config.effective_client_id,
            request_timeout_ms=config.socket_timeout_ms,
            retry_backoff_ms=config.refresh_leader_backoff_ms,
            retry=self.retry_across_connection_loss,
            security=KafkaSecurity.from_config(config),
        )
        super().__init__(
            config,
            fetch=fetch,
            cluster=cluster,
            offset_store=make_offset_store(config, self.zk, cluster.kafka),
            interceptors=interceptors,
        )
        self.membership = Membership(
            config.group_id,
            self.consumer_id_string,
            self.zk,
            self.ownership,
            self.fetcher,
            self.offset_store,
            topic_count=lambda: self._topic_count,
            streams=self.streams,
        )
        self.committer = FencedCommitter(
            config,
            self.consumer_id_string,
            self.zk,
            self.offset_store,
            self.ownership,
            self.metrics,
            on_fenced=self._drop_fenced,
            on_commit=self.interceptors.on_commit,
        )
        self.watches = GroupWatches(
            config.group_id,
            self.consumer_id_string,
            self.zk,
            self.cluster,
            self.request_rebalance,
            lambda: self.task_group,
        )
        self.lease = SessionLease(
            self.zk, self.ownership.gate, self.consumer_id_string, lambda: self.closing
        )
        self.committer.session_replaced = self._session_replaced
        self.committer.on_connection_lost = self.lease.end_now
        self.committer.claiming_session = lambda: self.membership.registered_session
        self.coordinator = self._rebalancer = Rebalancer(
            self._member_parts(),
            zk=self.zk,
            membership=self.membership,
            on_no_brokers=self.watches.watch_broker_ids,
            connection_retry_window_s=self.connection_retry_window_s,
        )
        self.poll_liveness = PollLiveness(
            self._member_parts(),
            membership=self.membership,
            release_step=self._rebalancer.owners.delete_owned,
            rebalance_lock=self._rebalance_lock,
            request_rebalance=self.request_rebalance,
            retry=self.retry_across_connection_loss,
        )
        self._state_before_suspend = ConnectorState.RUNNING

    # -- the coordinator's parts of the lifecycle ----------------------------------------

    async def _open(self) -> None:
        await self.zk.start()

    def _start_background(self, tg: TaskGroup) -> None:
        tg.start_soon(self.lease.renew)
        tg.start_soon(self.lease.watch_connection)

    async def _close_coordination(self) -> None:
        # Closing the session deletes the registration and owner nodes at once.
        await self.zk.close(timeout_s=CLOSE_STEP_LIMIT_S)

    def _gate_closed_error(self) -> ConsumerError | None:
        return ZookeeperConnectionError(
            "the ZooKeeper session is suspended: not committing while another member may "
            "own the partitions"
        )

    @property
    def _session_id(self) -> int | None:
        return self.zk.session_id

    def _session_replaced(self) -> bool:
        """Whether the current session is not the one this member registered (and claimed its
        partitions) with: the old ownership is void until the member registered again."""
        registered = self.membership.registered_session
        current = self.zk.session_id
        return self.membership.session_replaced or (
            registered is not None and current is not None and current != registered
        )

    async def _subscribe(self, topics: Iterable[str], *, wildcard: bool) -> None:
        """Register, start the watches, run the first rebalance, start the workers."""
        await self.retry_across_connection_loss("registration", self.membership.register)
        tg = self.task_group
        # The watches are independent: set them up at once (each is armed before the first
        # rebalance reads the view, as the original's listeners were subscribed first).
        await gather(
            [tg.start(self.watches.watch_group)]
            + [self.watches.start_topic_watch(topic) for topic in topics]
        )
        if wildcard:
            await tg.start(self.watches.watch_topic_list, self._on_topic_list)
        if await self.cluster.metadata_from_kafka():
            tg.start_soon(self.watches.watch_partitions_by_metadata, self._subscribed_topics)
        tg.start_soon(self._watch_session)
        await self._run_rebalance("initial subscription", raise_on_failure=True)
        tg.start_soon(self._rebalance_worker)
        if self.config.zookeeper_poll_liveness_enable:
            tg.start_soon(self.poll_liveness.run)
        if self.config.auto_commit_enable:
            tg.start_soon(self.committer.auto_commit, self.config.auto_commit_interval_ms / 1000)

    def request_rebalance(self, reason: str) -> None:
        """Ask for a rebalance (bursts coalesce into one, KAFKA-265); the rebalance's
        ``queued_ms`` phase starts at the first request."""
        self._rebalancer.note_trigger()
        super().request_rebalance(reason)

    async def _rebalance(self, reason: str) -> None:
        await self.membership.handle_new_session_if_needed()
        await self._rebalancer.synced_rebalance(reason)

    async def _on_topic_list(self, all_topics: Iterable[str]) -> None:
        """A wildcard subscription follows the topic list; new matches are watched too."""
        for topic in sorted(self._apply_topic_list(all_topics)):
            await self.watches.start_topic_watch(topic)

    # -- ZooKeeper session ---------------------------------------------------------------

    @property
    def connection_retry_window_s(self) -> float:
        """How long a ZooKeeper step is retried across connection loss, in seconds.

        ``2 * zookeeper.session.timeout.ms + zookeeper.connection.timeout.ms``: long enough
        for the session to expire and a new one to be opened once the server is reachable
        again. The original's ZkClient retried for ever (``retryUntilConnected``).
        """
        cfg = self.config
        return connection_retry_window_s(
            cfg.zookeeper_session_timeout_ms, cfg.effective_zookeeper_connection_timeout_ms
        )

    async def retry_across_connection_loss(self, what: str, op: Callable[[], Awaitable[_T]]) -> _T:
        """Run a ZooKeeper step; after connection loss or session expiry, run it again.

        :func:`~aiozkconsumer.zk.retry.retry_until_connected` (the original's
        ``retryUntilConnected``) for up to :attr:`connection_retry_window_s`, stopping when
        the connector closes. Only for steps that are safe to repeat.

        Args:
            what: the step, for the log.
            op: makes and awaits the step.

        Returns:
            What ``op`` returned.

        Raises:
            ZookeeperConnectionError, ZookeeperSessionExpiredError: still failing at the end
                of the window (or the connector is closing).
            ZookeeperError: any other ZooKeeper failure, at once.
        """
        return await retry_until_connected(
            self.zk,
            what,
            op,
            window_s=self.connection_retry_window_s,
            give_up=lambda: self.closing,
            log_prefix=self.consumer_id_string,
            logger=log,
        )

    async def _watch_session(self) -> None:
        """Follow the session: hold records back while suspended; re-register after expiry.

        Connection loss shorter than the session timeout keeps the session and its ephemeral
        nodes: records flow again when it is back, without a rebalance. A new session (the old
        one expired) makes the next rebalance drop the old ownership and register again.
        """
        gate = self.ownership.gate

        def hold_back(state: str) -> None:
            # Synchronously, inside the transition: a record must not be handed out between
            # the connection dropping and this task's next turn.
            if state != "connected":
                gate.close()

        remove_listener = self.zk.add_state_listener(hold_back)
        try:
            await self._follow_session(gate)
        finally:
            remove_listener()

    async def _follow_session(self, gate: OwnershipGate) -> None:
        """The body of :meth:`_watch_session`: its reactions to each session transition."""
        async for state, session_id in self.zk.session_events():
            if state != "connected":
                log.warning(
                    "[%s] ZooKeeper session %s: holding records back",
                    self.consumer_id_string,
                    state,
                )
                gate.close()
                if self._state is not ConnectorState.SUSPENDED:
                    self._state_before_suspend = self._state
                    self._set_state(ConnectorState.SUSPENDED)
                continue
            if self.membership.note_session(session_id):
                log.warning(
                    "[%s] ZooKeeper session expired; a new session 0x%x re-registers",
                    self.consumer_id_string,
                    session_id,
                )
                self.request_rebalance("new ZooKeeper session")
            elif self.zk.state != "connected":
                # A stale event: the connection dropped again before this task ran (the
                # listener closed the gate then); the next event says what comes next.
                continue
            else:
                log.info("[%s] ZooKeeper session resumed", self.consumer_id_string)
                gate.reopen()
                if self._state is ConnectorState.SUSPENDED:
                    self._set_state(self._state_before_suspend)
