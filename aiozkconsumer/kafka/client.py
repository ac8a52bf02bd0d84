"""The aiokafka client adapter: connections, metadata and plain requests to brokers.

``KafkaClient`` wraps aiokafka's ``AIOKafkaClient`` as ``zk/client.py``'s ``ZkClient`` wraps
aiozk: it translates aiokafka's exceptions into ``aiozkconsumer.errors`` (none escapes), reads
leaders and partitions from Kafka metadata (as the original's ``LeaderFinderThread`` with a
``TopicMetadataRequest``) and asks leaders for offsets (ListOffsets). Requests to the group
coordinator go over ``channel.py``'s ``OffsetsChannel``; each fetch loop's Fetch requests go
over a :class:`FetchChannel` (a connection of its own, ``fetch_connection.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
from aiokafka import conn as _aiokafka_conn
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import CloseReason
from aiokafka.protocol.admin import SaslAuthenticateRequest_v0, SaslAuthenticateRequest_v1
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from ..errors import (
    AuthenticationError,
    BrokerNotAvailableError,
    InvalidConfigError,
    KafkaConnectionError,
    NoBrokersError,
    UnknownTopicError,
)
from ..records import TopicPartition
from ..security import KafkaSecurity
from .diagnose import diagnose_bootstrap
from .errors import AiokafkaError, PartitionError, classify_partition_error, error_name
from .fetch_connection import MAX_VERSION, MIN_VERSION, FetchConnection

__all__ = ["EARLIEST", "LATEST", "FetchChannel", "KafkaClient"]

log = logging.getLogger(__name__)

EARLIEST = -2
"""ListOffsets timestamp asking for the log start offset (``OffsetRequest.EarliestTime``)."""
LATEST = -1
"""ListOffsets timestamp asking for the log end offset (``OffsetRequest.LatestTime``)."""


class KafkaClient:
    """Kafka protocol access through aiokafka's ``AIOKafkaClient``.

    Args:
        bootstrap_servers: ``host:port[,host:port]``.
        client_id: ``client.id`` sent with every request.
        request_timeout_ms: ``socket.timeout.ms``.
        retry_backoff_ms: ``refresh.leader.backoff.ms``.
        security: TLS and SASL of every connection (``security.protocol``, ``ssl.*``,
            ``sasl.*``); default plaintext. The fetch loops' own connections
            (:class:`FetchChannel`) take the same, and the same OAUTHBEARER token provider.

    Raises:
        InvalidConfigError: ``sasl.mechanism=GSSAPI`` without the ``gssapi`` package, or
            OAUTHBEARER settings that cannot give a token (see
            :func:`~aiozkconsumer.kafka.oauth.refreshing`).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 200,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._client_id = client_id
        self._request_timeout_s = request_timeout_ms / 1000
        self.security = security or KafkaSecurity()
        if self.security.sasl_mechanism == "GSSAPI" and _aiokafka_conn.gssapi is None:
            # aiokafka would fail an assertion on every connection instead.
            raise InvalidConfigError(
                "sasl.mechanism", "GSSAPI needs the gssapi package: pip install gssapi"
            )
        kwargs = aiokafka_security_kwargs(self.security)
        self.token_provider: Any = kwargs.get("sasl_oauth_token_provider")
        """OAUTHBEARER's token provider, shared by aiokafka's connections and the fetch
        loops' own (``None`` for other mechanisms)."""
        self._client = AIOKafkaClient(
            bootstrap_servers=bootstrap_servers.split(","),
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            **kwargs,
        )
        self._started = False

    @property
    def raw(self) -> AIOKafkaClient:
        """The underlying ``AIOKafkaClient``."""
        return self._client

    async def start(self) -> None:
        """Connect and read the cluster metadata.

        When no bootstrap server works, each is probed once (``diagnose.py``, all together
        within ``socket.timeout.ms``) to tell a security problem from an unreachable cluster.

        Raises:
            SslAuthenticationError: a bootstrap server's TLS handshake failed: its certificate
                is not trusted (``certificate verify failed: ...``) or not valid for the host
                (``hostname mismatch: ...``), it requires or refused the client's certificate,
                or the port does not speak TLS (``security.protocol`` is SSL or SASL_SSL for
                a port in the clear).
            AuthenticationError: a bootstrap server refused the SASL credentials or mechanism
                (its message and the mechanism named), the port speaks TLS to a client in the
                clear, requires SASL from a client without it (its mechanisms named), or does
                not use SASL for a SASL client; also an OAUTHBEARER token the broker refused
                (aiokafka takes that exchange for a success and its metadata request fails).
            KafkaConnectionError: no bootstrap broker answered.
        """
        try:
            await self._client.bootstrap()
        except AiokafkaError as e:
            await self.close()
            finding = await self._diagnose()
            if finding is not None:
                raise finding from e
            raise KafkaConnectionError(
                f"could not reach any Kafka broker of {self.bootstrap_servers!r}: {e}"
            ) from e
        if not self._client.cluster.brokers():
            # Every broker since 0.10 names the brokers in a metadata answer. aiokafka takes a
            # failed one for a cluster without topics, after an OAUTHBEARER exchange it
            # wrongly believed done: the broker then answered the request with errors.
            finding = await self._diagnose()
            if finding is not None:
                await self.close()
                raise finding
        self._started = True

    async def _diagnose(self) -> AuthenticationError | None:
        return await diagnose_bootstrap(
            self.bootstrap_servers,
            self.security,
            client_id=self._client_id,
            timeout_s=self._request_timeout_s,
            token_provider=self.token_provider,
        )

    async def close(self) -> None:
        """Close every connection and aiokafka's metadata task (never raises)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._client.close(), 5)

    async def refresh_metadata(self, topics: Iterable[str]) -> bool:
        """Track ``topics`` and refresh metadata now. Returns ``False`` if no broker answered."""
        wanted = set(topics)
        tracked = set(self._client._topics)
        if not wanted <= tracked:
            self._client.set_topics(tracked | wanted)
        return bool(await self._client.force_metadata_update())

    async def all_topics(self) -> set[str]:
        """Every topic in the cluster, from a fresh metadata request.

        Raises:
            NoBrokersError: no broker answered.
        """
        try:
            md = await self._client.fetch_all_metadata()
        except AiokafkaError as e:
            raise NoBrokersError(
                f"no broker of {self.bootstrap_servers!r} answered a metadata request: {e}"
            ) from e
        return set(md.topics())

    async def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """Number of partitions of each topic (0 for an unknown topic), from fresh metadata.

        Raises:
            NoBrokersError: no broker answered.
        """
        topics = sorted(set(topics))
        if topics and not await self.refresh_metadata(topics):
            raise NoBrokersError(f"no broker of {self.bootstrap_servers!r} answered")
        return {t: len(self.partitions_for(t) or ()) for t in topics}

    async def partitions_for_topics(self, topics: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """Sorted partition ids of each topic (empty for an unknown topic), from fresh metadata.

        Raises:
            NoBrokersError: no broker answered.
        """
        topics = sorted(set(topics))
        if topics and not await self.refresh_metadata(topics):
            raise NoBrokersError(f"no broker of {self.bootstrap_servers!r} answered")
        return {t: tuple(sorted(self.partitions_for(t) or ())) for t in topics}

    def leader_for(self, tp: TopicPartition) -> int | None:
        """The leader's broker id, or ``None`` when unknown or unavailable."""
        leader = self._client.cluster.leader_for_partition(
            KafkaTopicPartition(tp.topic, tp.partition)
        )
        return None if leader is None or leader < 0 else int(leader)

    def partitions_for(self, topic: str) -> set[int] | None:
        """Partition ids of ``topic`` from Kafka metadata, or ``None`` if unknown."""
        parts = self._client.cluster.partitions_for_topic(topic)
        return None if parts is None else set(parts)

    def brokers(self) -> list[tuple[int, str]]:
        """The brokers of the last metadata response, ``[(node id, "host:port")]`` sorted."""
        return sorted((int(b.nodeId), f"{b.host}:{b.port}") for b in self._client.cluster.brokers())

    def broker_address(self, node_id: int) -> str:
        """``host:port`` of a broker, for messages and metrics."""
        md = self._client.cluster.broker_metadata(node_id)
        return f"{md.host}:{md.port}" if md is not None else f"broker {node_id}"

    async def send(self, node_id: int, request: Any) -> Any:
        """Send a request to a broker and return its response.

        Raises:
            BrokerNotAvailableError: the broker could not be reached or timed out.
        """
        try:
            return await self._client.send(node_id, request)
        except AiokafkaError as e:
            raise BrokerNotAvailableError(
                f"request to {self.broker_address(node_id)} failed: {e!r}"
            ) from e

    def fetch_channel(self, node_id: int, *, dedicated: bool = True) -> FetchChannel:
        """A channel for one fetch loop's Fetch requests to ``node_id`` (close it when done).

        Args:
            node_id: the broker.
            dedicated: use a connection of the loop's own (``fetch_connection.py``); when
                ``False``, or the negotiated Fetch version is not one it parses, requests go
                over aiokafka's shared connection as :meth:`send`.
        """
        return FetchChannel(self, node_id, dedicated=dedicated)

    async def api_versions(self, node_id: int) -> dict[int, tuple[int, int]]:
        """``{api key: (min, max)}`` aiokafka negotiated with ``node_id`` (ApiVersions).

        Raises:
            BrokerNotAvailableError: the broker could not be reached.
        """
        try:
            ready = await self._client.ready(node_id)
        except AiokafkaError as e:
            raise BrokerNotAvailableError(f"broker {node_id} not reachable: {e!r}") from e
        conn = self._client._conns.get((node_id, ConnectionGroup.DEFAULT))
        if not ready or conn is None:
            raise BrokerNotAvailableError(f"broker {self.broker_address(node_id)} not reachable")
        return dict(conn._versions)

    def _broker_host_port(self, node_id: int) -> tuple[str, int] | None:
        md = self._client.cluster.broker_metadata(node_id)
        return None if md is None else (str(md.host), int(md.port))

    async def list_offsets(
        self, node_id: int, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Ask one broker (the partitions' leader) for offsets by timestamp (ListOffsets).

        Args:
            node_id: the leader of every partition in ``timestamps``.
            timestamps: ``{tp: EARLIEST | LATEST | epoch ms}``.

        Returns:
            ``{tp: offset}`` for the partitions the broker answered without error.

        Raises:
            BrokerNotAvailableError: the broker could not be reached.
            UnknownTopicError: the broker does not know a partition's topic.
        """
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp, ts in timestamps.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, ts))
        response = await self.send(node_id, OffsetRequest(-1, 0, list(by_topic.items())))
        result: dict[TopicPartition, int] = {}
        for topic, parts in response.topics:
            for partition, error_code, *info in parts:
                kind = classify_partition_error(error_code)
                if kind is PartitionError.NONE:
                    offset = info[-1] if response.API_VERSION >= 1 else (info[0] or [-1])[0]
                    result[TopicPartition(topic, partition)] = int(offset)
                elif kind is PartitionError.UNKNOWN_TOPIC:
                    raise UnknownTopicError(topic, f"broker {node_id} does not know {topic!r}")
                else:
                    log.debug(
                        "ListOffsets for [%s,%s] failed: %s",
                        topic,
                        partition,
                        error_name(error_code),
                    )
        return result

    async def log_end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Log end offsets of partitions, asking each partition's leader.

        Raises:
            NoBrokersError: metadata could not be refreshed from any broker.
            BrokerNotAvailableError: a leader could not be reached.
        """
        tps = list(tps)
        if not await self.refresh_metadata({tp.topic for tp in tps}):
            raise NoBrokersError(f"no broker of {self.bootstrap_servers!r} answered")
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp in tps:
            leader = self.leader_for(tp)
            if leader is None:
                raise BrokerNotAvailableError(f"partition {tp} has no leader")
            by_leader.setdefault(leader, {})[tp] = LATEST
        result: dict[TopicPartition, int] = {}
        for leader, ts in by_leader.items():
            result.update(await self.list_offsets(leader, ts))
        return result

    def __repr__(self) -> str:
        return f"<KafkaClient {self.bootstrap_servers} [{'started' if self._started else 'new'}]>"


def aiokafka_security_kwargs(security: KafkaSecurity) -> dict[str, Any]:
    """``AIOKafkaClient``/``AIOKafkaConsumer`` keyword arguments for ``security``.

    An OAUTHBEARER provider is wrapped so its token is refreshed before it expires
    (:func:`~aiozkconsumer.kafka.oauth.refreshing`). With SASL, aiokafka's DEBUG log of the
    requests it sends is kept from showing the SASL payloads (a PLAIN password, a token).

    Raises:
        InvalidConfigError: OAUTHBEARER settings that cannot give a token.
    """
    kwargs: dict[str, Any] = {"security_protocol": security.security_protocol}
    if security.sasl:
        _hide_sasl_payloads()
    if security.ssl_context is not None:
        kwargs["ssl_context"] = security.ssl_context
    if security.sasl_mechanism is not None:
        kwargs["sasl_mechanism"] = security.sasl_mechanism
        kwargs["sasl_plain_username"] = security.sasl_username
        kwargs["sasl_plain_password"] = security.sasl_password
        kwargs["sasl_kerberos_service_name"] = security.sasl_kerberos_service_name
        kwargs["sasl_kerberos_domain_name"] = security.sasl_kerberos_domain_name
        if security.sasl_mechanism == "OAUTHBEARER":
            from .oauth import refreshing

            kwargs["sasl_oauth_token_provider"] = refreshing(security.token_provider)
    return kwargs


class _HideSaslPayloads(logging.Filter):
    """Masks the SASL payloads aiokafka's connection logs at DEBUG.

    aiokafka logs every request it sends ("Request to host:port id: <request>"), and a
    ``SaslAuthenticateRequest``'s repr holds its payload: a PLAIN password or an OAUTHBEARER
    token in the clear.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(isinstance(a, _SASL_REQUESTS) for a in args):
            record.args = tuple(
                f"<{type(a).__name__} (payload hidden)>" if isinstance(a, _SASL_REQUESTS) else a
                for a in args
            )
        return True


_SASL_REQUESTS = (SaslAuthenticateRequest_v0, SaslAuthenticateRequest_v1)
_SASL_FILTER = _HideSaslPayloads()


def _hide_sasl_payloads() -> None:
    """Install :class:`_HideSaslPayloads` on aiokafka's connection logger (once)."""
    logger = logging.getLogger("aiokafka.conn")
    if _SASL_FILTER not in logger.filters:
        logger.addFilter(_SASL_FILTER)


class FetchChannel:
    """Where one fetch loop sends its FetchRequests to one broker.

    The request is built by aiokafka's ``FetchRequest`` at the version aiokafka negotiated
    with the broker. Versions 4-11 go over a :class:`~.fetch_connection.FetchConnection` of
    this channel's own, which reads the response without re-buffering it; any other version
    (or ``dedicated=False``) over aiokafka's shared connection. Either way the response has
    ``topics`` (``[(topic, [(partition, error code, high watermark, ..., records)])]``) and
    ``throttle_time_ms``.

    Args:
        kafka: the client.
        node_id: the broker.
        dedicated: whether to use a connection of its own.
    """

    def __init__(self, kafka: KafkaClient, node_id: int, *, dedicated: bool = True) -> None:
        self._kafka = kafka
        self.node_id = node_id
        self.dedicated = dedicated
        self._versions: dict[int, tuple[int, int]] | None = None
        self.connection = FetchConnection(
            node_id,
            lambda: kafka._broker_host_port(node_id),
            kafka._client_id,
            kafka._request_timeout_s,
            security=kafka.security,
            token_provider=kafka.token_provider,
        )

    async def fetch(self, request: Any, max_wait_ms: int) -> Any:
        """Send a FetchRequest and return its response.

        Args:
            request: an aiokafka ``FetchRequest``.
            max_wait_ms: its ``max_wait_time`` (the time limit allows for it).

        Raises:
            BrokerNotAvailableError: the broker could not be reached, the request failed or
                timed out.
            SslAuthenticationError: the own connection's TLS handshake failed, or the broker
                refused the client's certificate.
            AuthenticationError: the own connection's SASL authentication (or KIP-368
                re-authentication) failed; not retried before ``reconnect.backoff.max.ms``.
        """
        if not self.dedicated:
            return await self._kafka.send(self.node_id, request)
        if self._versions is None:
            self._versions = await self._kafka.api_versions(self.node_id)
        try:
            struct = request.prepare(self._versions)
        except AiokafkaError as e:
            raise BrokerNotAvailableError(f"no Fetch version for broker {self.node_id}") from e
        if not MIN_VERSION <= struct.API_VERSION <= MAX_VERSION:
            return await self._kafka.send(self.node_id, request)
        try:
            return await self.connection.fetch(struct, max_wait_ms)
        except BrokerNotAvailableError:
            self._versions = None  # the broker may come back as another version
            raise

    def close(self) -> None:
        """Close the channel's own connection (never raises)."""
        self.connection.close()

    def __repr__(self) -> str:
        return f"<FetchChannel broker {self.node_id} {self.connection!r}>"


async def send_coordination(kafka: KafkaClient, node: int, request: Any, timeout_s: float) -> Any:
    """Send a group or offsets request over the coordination connection, bounded.

    The coordination connection is kept apart from the one fetches use, whose long polls
    would delay it. Shared by the offsets channel and the group protocol client, which
    translate the failures into their own errors.

    Args:
        kafka: the started client.
        node: the broker id (the group's coordinator, or any broker for FindCoordinator).
        request: an aiokafka protocol request.
        timeout_s: time limit, seconds.

    Returns:
        The response.

    Raises:
        TimeoutError: no answer within ``timeout_s``; the connection was dropped, so the
            request given up on does not stay queued on it.
        AiokafkaError, NotImplementedError: as aiokafka's ``send`` (for the caller to
            translate).
    """
    try:
        with anyio.fail_after(timeout_s):
            return await kafka.raw.send(node, request, group=ConnectionGroup.COORDINATION)
    except TimeoutError:
        drop_coordination_connection(kafka, node)
        raise


def drop_coordination_connection(kafka: KafkaClient, node: int) -> None:
    """Close the coordination connection to ``node`` (never raises).

    aiokafka has no public way to drop one connection; a request given up on would otherwise
    stay queued on it until ``socket.timeout.ms``.
    """
    conn = kafka.raw._conns.get((node, ConnectionGroup.COORDINATION))
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close(reason=CloseReason.CONNECTION_TIMEOUT)
