"""``KafkaConsumerConnector``: a member of a Kafka-coordinated group, behind the same API.

The group is coordinated by a broker's group coordinator with the Java ``KafkaConsumer``'s
classic protocol (``group.classic.KafkaCoordinator``), not by ZooKeeper: no registration
or owner nodes, no ZooKeeper at all. Streams, batches, commits, the rebalance listener,
interceptors, statistics and metrics are those of every ``ConsumerConnector``; offsets live in
Kafka, committed with the member's generation and member id, so a member whose generation is
over cannot commit (``CommitFencedError``), as the Java client's ``CommitFailedException``.

With ``group.protocol=consumer`` the member speaks the consumer group protocol of KIP-848
instead (``group.consumer_protocol.ConsumerProtocolCoordinator``): the broker assigns, the
member reconciles incrementally, and commits carry the member epoch (OffsetCommit v9).

With ``group.instance.id`` the member is static (KIP-345) on either protocol: its group
requests and commits carry the instance id, and closing does not hand its partitions to the
others (no LeaveGroup; epoch -2 with the consumer protocol), so a restart within the session
timeout takes them back without a rebalance.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import anyio
from anyio.abc import TaskGroup

from .cluster import ClusterView
from .commits import FencedCommitter
from .config import ConsumerConfig
from .errors import ConsumerError, InvalidConfigError
from .group.base import GroupMember
from .group.classic import KafkaCoordinator
from .group.consumer_protocol import ConsumerProtocolCoordinator
from .interceptors import ConsumerInterceptor
from .kafka.consumer_group import ConsumerGroupClient, MemberEpochOffsetsChannel
from .kafka.group import GroupClient, StaticMemberOffsetsChannel
from .offsets import OffsetStore, make_offset_store
from .offsets.kafka_store import KafkaOffsetStore
from .offsets.rules import default_fetch_timeout_ms
from .records import TopicPartition
from .security import KafkaSecurity
from .verbs import ConnectorVerbs

__all__ = ["KafkaConsumerConnector"]

log = logging.getLogger(__name__)


class KafkaConsumerConnector(ConnectorVerbs):
    """A member of a Kafka-coordinated consumer group (``group.coordinator=kafka``).

    Use as an async context manager, entered and left in one task, exactly as a
    ``ZookeeperConsumerConnector``::

        config = ConsumerConfig(group_id="billing", group_coordinator="kafka",
                                bootstrap_servers="127.0.0.1:9092")
        async with KafkaConsumerConnector(config) as connector:
            streams = await connector.create_message_streams({"payments": 2})
            async for msg in streams["payments"][0]:
                ...

    Entering connects to the brokers; ``create_message_streams`` joins the group and takes
    the assignment (partition ``p`` of a topic with ``n`` streams feeds stream ``p mod n``);
    leaving commits (auto-commit on) and sends LeaveGroup, so the group rebalances at once;
    a static member (``group.instance.id``) does not: its partitions wait for it for the
    session timeout (the Java client's behaviour). The runtime verbs (``seek``, ``pause``,
    ``position``, ``assign`` with no group, ...) come from
    :class:`~aiozkconsumer.verbs.ConnectorVerbs`.

    Args:
        config: the consumer configuration, ``group.coordinator=kafka``.
        fetch: ``False``: a member that takes part in the group but fetches nothing (see
            ``ZookeeperConsumerConnector``).
        interceptors: consumer interceptors besides those ``interceptor.classes`` names.

    With ``group.protocol=consumer`` the member uses the consumer group protocol (KIP-848,
    Kafka 4.x brokers): ``create_message_streams`` raises ``GroupCoordinatorError`` naming
    ``group.protocol=consumer`` when the broker does not support it.

    A static member whose ``group.instance.id`` another member takes is fenced for good:
    ``FencedInstanceIdError`` (from ``create_message_streams`` while joining, else raised when
    the ``async with`` block exits, which the failure cancels); with
    ``group.protocol=consumer`` a member joining with an instance id a live member holds is
    refused with ``UnreleasedInstanceIdError``. Both are ``GroupCoordinatorError``.

    Raises:
        InvalidConfigError: ``group.coordinator`` is not ``kafka``, or ``interceptor.classes``
            names a class that cannot be loaded.
        KafkaConnectionError: (on entering) no broker of ``bootstrap.servers`` answered.
    """

    coordinator: GroupMember

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        fetch: bool = True,
        interceptors: Sequence[ConsumerInterceptor] = (),
    ) -> None:
        if not config.kafka_coordinated:
            raise InvalidConfigError(
                "group.coordinator",
                "KafkaConsumerConnector needs group.coordinator=kafka "
                f"(got {config.group_coordinator!r}); use create_connector(config)",
            )
        cluster = ClusterView(
            None,
            source="kafka",
            bootstrap_servers=config.bootstrap_servers,
            client_id=config.effective_client_id,
            request_timeout_ms=config.socket_timeout_ms,
            retry_backoff_ms=config.refresh_leader_backoff_ms,
            security=KafkaSecurity.from_config(config),
        )
        offset_store: OffsetStore
        if config.consumer_protocol:
            offset_store = KafkaOffsetStore(
                cluster.kafka,
                config.group_id,
                backoff_ms=config.offsets_channel_backoff_ms,
                socket_timeout_ms=config.offsets_channel_socket_timeout_ms,
                fetch_timeout_ms=default_fetch_timeout_ms(
                    config.offsets_channel_socket_timeout_ms, config.offsets_commit_max_retries
                ),
                group_generation=self._generation_and_member,
                channel=MemberEpochOffsetsChannel(
                    cluster.kafka,
                    config.group_id,
                    socket_timeout_ms=config.offsets_channel_socket_timeout_ms,
                    group_instance_id=config.group_instance_id,
                ),
            )
        elif config.group_instance_id is not None:
            offset_store = KafkaOffsetStore(
                cluster.kafka,
                config.group_id,
                backoff_ms=config.offsets_channel_backoff_ms,
                socket_timeout_ms=config.offsets_channel_socket_timeout_ms,
                fetch_timeout_ms=default_fetch_timeout_ms(
                    config.offsets_channel_socket_timeout_ms, config.offsets_commit_max_retries
                ),
                group_generation=self._generation_and_member,
                channel=StaticMemberOffsetsChannel(
                    cluster.kafka,
                    config.group_id,
                    socket_timeout_ms=config.offsets_channel_socket_timeout_ms,
                    group_instance_id=config.group_instance_id,
                ),
            )
        else:
            offset_store = make_offset_store(
                config, None, cluster.kafka, group_generation=self._generation_and_member
            )
        super().__init__(
            config,
            fetch=fetch,
            cluster=cluster,
            offset_store=offset_store,
            interceptors=interceptors,
        )
        self.committer = FencedCommitter(
            config,
            self.consumer_id_string,
            None,
            self.offset_store,
            self.ownership,
            self.metrics,
            on_fenced=self._drop_fenced,
            on_commit=self.interceptors.on_commit,
        )
        request_timeout_ms = min(config.socket_timeout_ms, config.session_timeout_ms)
        self.group: GroupClient | ConsumerGroupClient
        if config.consumer_protocol:
            self.group = ConsumerGroupClient(
                cluster.kafka,
                config.group_id,
                request_timeout_ms=request_timeout_ms,
                group_instance_id=config.group_instance_id,
            )
            self.coordinator = ConsumerProtocolCoordinator(
                self._member_parts(), group=self.group, request_rebalance=self.request_rebalance
            )
        else:
            self.group = GroupClient(
                cluster.kafka,
                config.group_id,
                request_timeout_ms=request_timeout_ms,
                group_instance_id=config.group_instance_id,
            )
            self.coordinator = KafkaCoordinator(
                self._member_parts(), group=self.group, request_rebalance=self.request_rebalance
            )
            # The classic protocol refuses commits between JoinGroup and SyncGroup; a
            # cooperative member still owns partitions then.
            machine = self.coordinator.machine
            self.committer.auto_commit_paused = lambda: machine.rebalancing

    def _generation_and_member(self) -> tuple[int, str]:
        if self.manual:
            # assign(): no membership; a commit as the Java client's in assign mode.
            return (-1, "")
        return self.coordinator.commit_generation()

    # -- the coordinator's parts of the lifecycle ----------------------------------------

    async def _open(self) -> None:
        await self.cluster.kafka()

    def _start_background(self, tg: TaskGroup) -> None:
        pass  # the heartbeat starts with the membership (_subscribe)

    async def _subscribe(self, topics: Iterable[str], *, wildcard: bool) -> None:
        """Join the group, then keep the membership: heartbeats, metadata, the worker."""
        await self._run_rebalance("initial subscription", raise_on_failure=True)
        tg = self.task_group
        for task in self.coordinator.background_tasks():
            tg.start_soon(task)
        if wildcard:
            tg.start_soon(self._follow_topic_list)
        tg.start_soon(self._rebalance_worker)
        if self.config.auto_commit_enable:
            tg.start_soon(self.committer.auto_commit, self.config.auto_commit_interval_ms / 1000)

    async def _rebalance(self, reason: str) -> None:
        await self.coordinator.rebalance(reason)

    async def _follow_topic_list(self) -> None:
        """A pattern subscription: a new matching topic triggers a rejoin. The topic list is
        read every ``metadata.max.age.ms``, as the Java client matches a pattern at each
        periodic metadata refresh (``KafkaConsumer.subscribe(Pattern)``)."""
        while True:
            await anyio.sleep(self.config.metadata_max_age_ms / 1000)
            try:
                topics = await self.cluster.all_topics()
            except ConsumerError as e:
                log.info("[%s] topic list refresh failed: %s", self.consumer_id_string, e)
                continue
            self._apply_topic_list(topics)

    async def _close_coordination(self) -> None:
        await self.coordinator.leave()

    def _drop_fenced(self, fenced: set[TopicPartition]) -> None:
        """A commit refused because the member's generation (or epoch) is over: every
        partition of that generation may be another member's now, not only the refused ones.
        The gate closes at once, as on a fenced heartbeat (nothing more is handed out until
        the coordinator answers a heartbeat again), then the refused partitions are dropped
        and a rejoin is asked for, whose revocation gives up the others (as the Java client,
        whose ``CommitFailedException`` resets the generation: the next poll rejoins)."""
        if fenced and not self.manual:
            self.ownership.gate.end_lease()
        super()._drop_fenced(fenced)

    def _gate_closed_error(self) -> ConsumerError | None:
        # The group coordinator fences commits by generation: a member whose heartbeats
        # lapsed commits anyway and the coordinator refuses it (CommitFencedError) if its
        # generation is over. A member fenced for good (its group.instance.id taken) commits
        # nothing more: the error that ended it.
        return self.coordinator.fatal_error

    @property
    def _group_generation(self) -> tuple[int | None, str | None]:
        if self.manual:
            return (None, None)  # assign(): no membership
        return self.coordinator.membership()

    def _seconds_since_coordinator(self) -> float | None:
        return self.group.seconds_since_answer
