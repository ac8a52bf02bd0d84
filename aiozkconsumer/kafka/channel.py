"""The offsets channel: one request at a time to a group's offset coordinator.

The original's ``offsetsChannel`` (``ClientUtils.channelToOffsetManager``, 0.10.2): find the
group's coordinator with FindCoordinator, keep it until told it moved, and send it
OffsetCommit / OffsetFetch requests, one in flight at a time (``offsetsChannelLock``). Each
method makes exactly one attempt; the retry rules and the meaning of the answers are the
offset store's (``aiozkconsumer.offsets``). Every failure of an attempt — no Kafka client, no
broker, no answer within ``offsets.channel.socket.timeout.ms``, a broken connection, a broker
too old for the request — is raised as :class:`ChannelError`; no aiokafka exception escapes.

Requests go over aiokafka's coordination connection to the broker, not the one fetches use
(whose long polls would delay them).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio
from aiokafka.protocol.coordination import FindCoordinatorRequest

from ..errors import ConsumerError
from ..records import TopicPartition
from .client import KafkaClient, drop_coordination_connection, send_coordination
from .errors import NO_ANSWER, NONE, AiokafkaError, IncompatibleBrokerVersion, error_name
from .leader_epoch import OffsetCommitEpochRequest, OffsetFetchEpochRequest

__all__ = ["ChannelError", "KafkaGetter", "OffsetsChannel"]

log = logging.getLogger(__name__)

_NO_METADATA = ""  # OffsetMetadata.NoMetadata: the old consumer never committed metadata

KafkaGetter = Callable[[], Awaitable[KafkaClient]]
"""An async callable returning the connector's started :class:`~aiozkconsumer.cluster.KafkaClient`
(created on first use), e.g. ``connector.ensure_kafka``."""


class ChannelError(Exception):
    """One attempt over the offsets channel got no usable answer.

    Never leaves the offset store, which turns it into
    :class:`~aiozkconsumer.errors.OffsetCommitError` /
    :class:`~aiozkconsumer.errors.OffsetFetchError`.

    Attributes:
        reason: what went wrong, in words.
        fatal: retrying cannot help (the broker lacks the API version).
    """

    def __init__(self, reason: str, *, fatal: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fatal = fatal


class OffsetsChannel:
    """Requests to a group's offset coordinator, one at a time.

    The coordinator is found with FindCoordinator and kept until :meth:`forget_coordinator`
    or a failed request (as the original's ``offsetsChannel.disconnect()``). OffsetCommit is
    sent with generation -1 and member id ``""`` (a "simple consumer" commit: the group never
    joins Kafka's group protocol), retention -1 (the broker's ``offsets.retention.minutes``)
    and empty metadata unless the caller gives some (the Spark bridge's batch log); aiokafka
    negotiates the version: OffsetCommit v2, v3, v6 or v7 (v6+ carry each offset's leader
    epoch, KIP-320), OffsetFetch v1, v2, v3 or v5 (v5+ answer it).

    Args:
        kafka_getter: async callable returning the connector's started Kafka client. Its
            failures (``ConsumerError``: ``NoBrokersError``, ``KafkaConnectionError`` ...)
            are raised as :class:`ChannelError`. A different client than last time makes
            the channel look the coordinator up again.
        group: ``group.id``.
        socket_timeout_ms: ``offsets.channel.socket.timeout.ms``: time limit of each
            FindCoordinator, OffsetCommit and OffsetFetch request, ms.
    """

    def __init__(self, kafka_getter: KafkaGetter, group: str, *, socket_timeout_ms: int) -> None:
        self._kafka_getter = kafka_getter
        self.group = group
        self.socket_timeout_ms = socket_timeout_ms
        self._coordinator: int | None = None
        self._kafka: KafkaClient | None = None
        self._lock = anyio.Lock()

    @property
    def coordinator(self) -> int | None:
        """The broker id of the group's coordinator, ``None`` until known."""
        return self._coordinator

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        generation: int = -1,
        member_id: str = "",
        metadata: Mapping[TopicPartition, str] | None = None,
        leader_epochs: Mapping[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, int]:
        """Send one OffsetCommit of ``offsets``.

        Args:
            offsets: ``{partition: next offset to read}``, all sent as given.
            generation: the group generation (-1: a "simple consumer" commit, as the
                ZooKeeper-coordinated group makes).
            member_id: the member id of that generation (``""`` with generation -1).
            metadata: ``{partition: metadata string}`` the broker keeps with the offset
                (at most the broker's ``offset.metadata.max.bytes``, 4096 by default, or
                that partition is refused with ``OFFSET_METADATA_TOO_LARGE``); partitions
                left out, or all with ``None``, get empty metadata.
            leader_epochs: ``{partition: leader epoch of the record before the offset}``
                (``CommittedLeaderEpoch``, sent from OffsetCommit v6 on, as the Java
                client's ``OffsetAndMetadata.leaderEpoch``); left out or -1: unknown.

        Returns:
            ``{partition: error code}`` for every partition of ``offsets``; ``NO_ANSWER``
            (-1) for one the answer left out.

        Raises:
            ChannelError: no usable answer.
        """
        texts = metadata or {}
        epochs = leader_epochs or {}
        by_topic: dict[str, list[tuple[int, int, int, str]]] = {}
        for tp, offset in offsets.items():
            text = texts.get(tp, _NO_METADATA)
            epoch = epochs.get(tp, -1)
            by_topic.setdefault(tp.topic, []).append((tp.partition, offset, epoch, text))
        request = OffsetCommitEpochRequest(
            self.group, generation, member_id, sorted(by_topic.items())
        )
        async with self._lock:
            response = await self._to_coordinator(request, "OffsetCommit")
        codes = dict.fromkeys(offsets, NO_ANSWER)
        for topic, parts in response.topics:
            for partition, code in parts:
                tp = TopicPartition(topic, partition)
                if tp in codes:
                    codes[tp] = int(code)
        return codes

    async def fetch(
        self, tps: Iterable[TopicPartition]
    ) -> tuple[int, dict[TopicPartition, tuple[int, int]]]:
        """Send one OffsetFetch for ``tps``.

        Args:
            tps: the partitions.

        Returns:
            ``(group error code, {partition: (offset, error code)})`` as answered; the group
            error code is 0 for OffsetFetch v1, which has none.

        Raises:
            ChannelError: no usable answer.
        """
        code, answered = await self.fetch_with_metadata(tps)
        return code, {tp: (offset, err) for tp, (offset, _, err) in answered.items()}

    async def fetch_with_metadata(
        self, tps: Iterable[TopicPartition] | None
    ) -> tuple[int, dict[TopicPartition, tuple[int, str, int]]]:
        """Send one OffsetFetch, keeping the metadata committed with each offset.

        Args:
            tps: the partitions; ``None`` asks for every partition the group has an offset
                for (OffsetFetch v2+, KIP-88).

        Returns:
            ``(group error code, {partition: (offset, metadata, error code)})`` as
            answered; the group error code is 0 for OffsetFetch v1, which has none.

        Raises:
            ChannelError: no usable answer (also: ``None`` and a broker older than 0.10.2).
        """
        code, answered = await self.fetch_with_epochs(tps)
        return code, {tp: (o, m, err) for tp, (o, _, m, err) in answered.items()}

    async def fetch_with_epochs(
        self, tps: Iterable[TopicPartition] | None
    ) -> tuple[int, dict[TopicPartition, tuple[int, int, str, int]]]:
        """Send one OffsetFetch, keeping each offset's leader epoch and metadata.

        Args:
            tps: the partitions; ``None`` asks for every partition the group has an offset
                for (OffsetFetch v2+, KIP-88).

        Returns:
            ``(group error code, {partition: (offset, leader epoch, metadata, error
            code)})`` as answered; the leader epoch is -1 when none was committed or the
            broker answers below OffsetFetch v5.

        Raises:
            ChannelError: no usable answer (also: ``None`` and a broker older than 0.10.2).
        """
        topics: list[tuple[str, list[int]]] | None = None
        if tps is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = sorted(by_topic.items())
        request = OffsetFetchEpochRequest(self.group, topics)
        async with self._lock:
            response = await self._to_coordinator(request, "OffsetFetch")
        answered: dict[TopicPartition, tuple[int, int, str, int]] = {}
        for topic, parts in response.topics:
            for partition, offset, *rest in parts:
                epoch, metadata, code = rest if len(rest) == 3 else (-1, *rest)
                answered[TopicPartition(topic, partition)] = (
                    int(offset),
                    int(epoch),
                    metadata or _NO_METADATA,
                    int(code),
                )
        return int(getattr(response, "error_code", NONE)), answered

    def forget_coordinator(self) -> None:
        """Forget the coordinator and drop the connection to it; the next request looks it
        up again. Never raises."""
        if self._coordinator is not None:
            log.info("group %s: forgetting offset coordinator %d", self.group, self._coordinator)
            if self._kafka is not None:
                drop_coordination_connection(self._kafka, self._coordinator)
        self._coordinator = None

    def close(self) -> None:
        """Forget the coordinator and the Kafka client (which belongs to the connector)."""
        self.forget_coordinator()
        self._kafka = None

    # -- one request ---------------------------------------------------------------------

    async def _to_coordinator(self, request: Any, what: str) -> Any:
        """Send ``request`` to the coordinator (found first if unknown)."""
        kafka = await self._client()
        if self._coordinator is None:
            node = kafka.raw.get_random_node()
            if node is None:
                raise ChannelError("no broker known to ask for the group coordinator")
            response = await self._send(
                kafka, node, FindCoordinatorRequest(self.group, 0), "FindCoordinator"
            )
            code = int(response.error_code)
            if code != NONE:
                raise ChannelError(f"FindCoordinator answered {error_name(code)}")
            self._coordinator = int(response.coordinator_id)
            log.info(
                "group %s: offset coordinator is broker %d (%s)",
                self.group,
                self._coordinator,
                kafka.broker_address(self._coordinator),
            )
        try:
            return await self._send(kafka, self._coordinator, request, what)
        except ChannelError:
            # As the original's offsetsChannel.disconnect() on any failure: rediscover.
            self.forget_coordinator()
            raise

    async def _client(self) -> KafkaClient:
        try:
            kafka = await self._kafka_getter()
        except ConsumerError as e:
            raise ChannelError(f"no Kafka client: {e}") from e
        if kafka is not self._kafka:
            self._kafka = kafka
            self._coordinator = None
        return kafka

    async def _send(self, kafka: KafkaClient, node: int, request: Any, what: str) -> Any:
        """One request over the coordination connection, bounded by the socket timeout.

        Every aiokafka error is turned into a :class:`ChannelError` here.
        """
        try:
            return await send_coordination(kafka, node, request, self.socket_timeout_ms / 1000)
        except TimeoutError:
            raise ChannelError(
                f"{what} to {kafka.broker_address(node)} got no answer within "
                f"offsets.channel.socket.timeout.ms={self.socket_timeout_ms}"
            ) from None
        except IncompatibleBrokerVersion as e:
            raise ChannelError(f"{what}: broker too old: {e}", fatal=True) from e
        except AiokafkaError as e:
            raise ChannelError(f"{what} to {kafka.broker_address(node)} failed: {e!r}") from e
        except NotImplementedError as e:  # Request.prepare: no version both sides speak
            raise ChannelError(f"{what}: no protocol version in common: {e}", fatal=True) from e

    def __repr__(self) -> str:
        where = "unknown" if self._coordinator is None else f"broker {self._coordinator}"
        return f"<OffsetsChannel group={self.group} [coordinator {where}]>"
