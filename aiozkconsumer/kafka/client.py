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
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio
from aiokafka import conn as _aiokafka_conn
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import CloseReason
from aiokafka.protocol.admin import SaslAuthenticateRequest_v0, SaslAuthenticateRequest_v1
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from .._repeats import throttle_aiokafka
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
from . import fetch_request, topic_ids
from .diagnose import diagnose_bootstrap
from .errors import AiokafkaError, PartitionError, classify_partition_error, error_name
from .fetch_connection import MAX_NON_FLEXIBLE, MIN_VERSION, FetchConnection, FetchResponse
from .fetch_request import ZERO_UUID, FetchPartition, FlexibleFetchRequest, topic_id_str
from .fetch_session import (
    FETCH_SESSION_TOPIC_ID_ERROR,
    INVALID_SESSION_ID,
    LEGACY,
    FetchRequestData,
    FetchSessionHandler,
)
from .leader_epoch import leaders_and_epochs
from .stable_offsets import list_offsets as list_offsets_at

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
        throttle_aiokafka()  # a down broker: one connection error per broker per 10 s
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
        self._closed = False

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
        self._closed = False
        try:
            await self._bootstrap()
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

    async def _bootstrap(self) -> None:
        """aiokafka's bootstrap; a cancelled start lets it end, then closes the client.

        aiokafka closes the bootstrap connection when its Metadata request fails but not when
        it is cancelled (``AIOKafkaClient.bootstrap``, aiokafka 0.14): a start cancelled then
        (a connector closed while it started) left the connection open. So a cancelled start
        waits for the request in flight (bounded by ``request.timeout.ms``, as the request
        is), closes the client and re-raises the cancellation. Raises what the bootstrap
        raises.
        """
        task = asyncio.ensure_future(self._client.bootstrap())
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(self._request_timeout_s + 1):
                    await asyncio.wait([task])
                task.cancel()  # past the bound: opening a connection, which closes it
                with contextlib.suppress(BaseException):
                    await task
                await self.close()
            raise

    async def _diagnose(self) -> AuthenticationError | None:
        return await diagnose_bootstrap(
            self.bootstrap_servers,
            self.security,
            client_id=self._client_id,
            timeout_s=self._request_timeout_s,
            token_provider=self.token_provider,
        )

    async def close(self) -> None:
        """Close every connection and aiokafka's metadata task (never raises; bounded by 10 s).

        A connection aiokafka was still opening when the close began (a request racing the
        close) is stored after aiokafka's own close listed the connections; the close waits
        for it (at most 5 s) and closes it too. From here :meth:`send` refuses.
        """
        self._closed = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._client.close(), 5)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._close_late_connections(), 5)

    async def _close_late_connections(self) -> None:
        client = self._client
        async with client._get_conn_lock:  # held while aiokafka opens a connection
            late, client._conns = list(client._conns.values()), {}
        for conn in late:
            conn.close()

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

    async def partition_ids(self, topics: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """Sorted partition ids of each topic, from one Metadata v7 request to a known broker
        (empty for an unknown topic or one answered with a topic error, as
        :meth:`partitions_for_topics` gives them).

        Unlike :meth:`partitions_for_topics`, the client's own metadata is not refreshed (nor
        decoded again into aiokafka's cluster table), and the answer is decoded by
        :mod:`~aiozkconsumer.kafka.leader_epoch`'s own reader: with thousands of partitions,
        aiokafka's refresh took tens of milliseconds of the event loop per call (a ZooKeeper
        member with Kafka metadata checks the partition counts every 5 s). Callers that need
        the client's metadata fresh afterwards (leaders, replicas and their racks) use
        :meth:`partitions_for_topics`. Falls back to it when no known broker answers
        Metadata v7 (brokers before 2.1, or none known yet).

        Raises:
            NoBrokersError: no broker answered.
            KafkaConnectionError: the client is closed.
        """
        topics = sorted(set(topics))
        if not topics:
            return {}
        for node, _address in self.brokers():
            try:
                answer = await leaders_and_epochs(self, node, topics)
            except BrokerNotAvailableError as e:
                log.debug("no partitions from broker %s: %s", node, e)
                continue
            found: dict[str, list[int]] = {t: [] for t in topics}
            for tp in answer:
                if tp.topic in found:
                    found[tp.topic].append(tp.partition)
            return {t: tuple(sorted(ids)) for t, ids in found.items()}
        return await self.partitions_for_topics(topics)

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
            KafkaConnectionError: the client is closed (:meth:`close`); nothing was sent.
        """
        if self._closed:
            raise KafkaConnectionError(
                f"request to {self.broker_address(node_id)} not sent: the Kafka client is closed"
            )
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

    async def log_end_offsets(
        self, tps: Iterable[TopicPartition], *, isolation_level: int = 0
    ) -> dict[TopicPartition, int]:
        """Log end offsets of partitions, asking each partition's leader.

        Args:
            tps: the partitions.
            isolation_level: ``0`` (read_uncommitted, default): the high watermark; ``1``
                (read_committed): the last stable offset (ListOffsets v2+).

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
            result.update(await list_offsets_at(self, leader, ts, isolation_level=isolation_level))
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
    """Where one fetch loop sends its FetchRequests to one broker, and keeps its fetch session.

    Two ways in:

    - :meth:`fetch_partitions` (the fetch loops'): the newest FetchRequest version both this
      client and the broker know. v12-v18 (the flexible versions: Kafka 2.7+) are built here
      (``fetch_request.py``) with every field of the Java consumer's request, in an
      incremental fetch session (KIP-227, ``fetch_session.py``: the channel's
      :attr:`session`) and, from v13 on, with topic ids (asked of the broker once per topic
      with a MetadataRequest v10+, ``topic_ids.py``). Older brokers, or ``dedicated=False``,
      get aiokafka's ``FetchRequest`` (v4-v11, sessionless, leader epochs not sent) as
      :meth:`fetch` sends it.
    - :meth:`fetch`: an aiokafka ``FetchRequest`` at the version aiokafka negotiated, v4-v11.

    Either goes over a :class:`~.fetch_connection.FetchConnection` of this channel's own,
    which reads the response without re-buffering it, unless ``dedicated=False`` or the
    version is not one it parses: then over aiokafka's shared connection. Either way the
    response has ``topics`` (``[(topic, [(partition, error code, high watermark, ...,
    records)])]``, topics named even when the request used ids) and ``throttle_time_ms``.

    Args:
        kafka: the client.
        node_id: the broker.
        dedicated: whether to use a connection of its own.
        sessions: whether :meth:`fetch_partitions` uses a fetch session (else every
            request is full and sessionless, as aiokafka's).
        max_version: the newest Fetch version to use (lower it to compare versions).
    """

    def __init__(
        self,
        kafka: KafkaClient,
        node_id: int,
        *,
        dedicated: bool = True,
        sessions: bool = True,
        max_version: int = fetch_request.MAX_VERSION,
    ) -> None:
        self._kafka = kafka
        self.node_id = node_id
        self.dedicated = dedicated
        self.sessions = sessions
        self.max_version = max_version
        self._versions: dict[int, tuple[int, int]] | None = None
        self.connection = FetchConnection(
            node_id,
            lambda: kafka._broker_host_port(node_id),
            kafka._client_id,
            kafka._request_timeout_s,
            security=kafka.security,
            token_provider=kafka.token_provider,
        )
        self.session = FetchSessionHandler(node_id)
        """The fetch session with the broker (:meth:`fetch_partitions`')."""
        self._topic_ids: dict[str, bytes] = {}
        self._topics_of: tuple[tuple[FetchPartition, ...], set[str]] | None = None
        """The last tuple of partitions asked for, and its topics (an idle loop's request)."""
        self.last_version: int | None = None
        """The version of the last request :meth:`fetch_partitions` sent."""

    async def fetch(
        self,
        request: Any,
        max_wait_ms: int,
        *,
        after: Callable[[FetchResponse], None] | None = None,
    ) -> Any:
        """Send an aiokafka FetchRequest and return its response.

        Args:
            request: an aiokafka ``FetchRequest``.
            max_wait_ms: its ``max_wait_time`` (the time limit allows for it).
            after: run on the response in the own connection's I/O thread (see
                :meth:`~.fetch_connection.FetchConnection.fetch`); not on aiokafka's path.

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
        versions = await self._api_versions()
        try:
            struct = request.prepare(versions)
        except AiokafkaError as e:
            raise BrokerNotAvailableError(f"no Fetch version for broker {self.node_id}") from e
        if not MIN_VERSION <= struct.API_VERSION <= MAX_NON_FLEXIBLE:
            return await self._kafka.send(self.node_id, request)
        try:
            return await self.connection.fetch(struct, max_wait_ms, after=after)
        except BrokerNotAvailableError:
            self._versions = None  # the broker may come back as another version
            raise

    async def _api_versions(self) -> dict[int, tuple[int, int]]:
        if self._versions is None:
            self._versions = await self._kafka.api_versions(self.node_id)
        return self._versions

    async def flexible_version(self) -> int | None:
        """The Fetch version :meth:`fetch_partitions` uses with this broker when topic ids
        are known: the newest both sides know, if flexible (v12+); else ``None`` (aiokafka's
        request then).

        Raises:
            BrokerNotAvailableError: the broker could not be reached.
        """
        if not self.dedicated:
            return None
        low, high = (await self._api_versions()).get(fetch_request.FETCH_API_KEY, (0, -1))
        version = min(high, self.max_version, fetch_request.MAX_VERSION)
        if version < fetch_request.MIN_VERSION or version < low:
            return None
        return version

    async def fetch_partitions(
        self,
        partitions: Sequence[FetchPartition],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int = 0,
        rack_id: str = "",
        after: Callable[[FetchResponse], None] | None = None,
    ) -> Any:
        """Fetch ``partitions`` with the newest Fetch version, in the channel's fetch session.

        The session decides what the request carries (``FetchSessionHandler``): the first
        request is full; later ones carry only the partitions added, or whose fetch offset,
        leader epoch or max bytes changed, and forget the ones left out. The broker answers
        only the partitions with something new (records, high watermark, log start offset,
        an error): a partition of ``partitions`` missing from the response has nothing new.
        When the broker answers with a session error (``FETCH_SESSION_ID_NOT_FOUND`` after a
        restart, ``INVALID_FETCH_SESSION_EPOCH``, ``FETCH_SESSION_TOPIC_ID_ERROR``), or with a
        response the session cannot use, the request is sent again at once as a full one
        (a new session), so the caller sees one answer either way.

        Args:
            partitions: what to fetch, in order (one per topic partition): fetch offset,
                ``PartitionMaxBytes``, and the leader epoch the client knows (-1: none).
            max_wait_ms: ``MaxWaitMs``.
            min_bytes: ``MinBytes``.
            max_bytes: ``MaxBytes`` of the response.
            isolation_level: 0 read_uncommitted, 1 read_committed.
            rack_id: ``client.rack`` (v11+).
            after: run on the response in the own connection's I/O thread (see
                :meth:`~.fetch_connection.FetchConnection.fetch`); not on aiokafka's path.

        Returns:
            A :class:`~.fetch_response.FetchResponse` (``topics`` named), or aiokafka's
            decoded response on the aiokafka path; both have ``topics`` and
            ``throttle_time_ms``, partitions as ``(partition, error code, high watermark,
            ..., records)``.

        Raises:
            BrokerNotAvailableError: the broker could not be reached, the request failed or
                timed out, or the broker refused two requests in a row with a top-level
                error (the second a full one); the next call starts a new session.
            SslAuthenticationError: the own connection's TLS handshake failed.
            AuthenticationError: the own connection's SASL authentication failed.
        """
        if not partitions:
            return FetchResponse()
        version = await self.flexible_version()
        if version is None:
            by_topic: dict[str, list[tuple[int, int, int]]] = {}
            for p in partitions:
                by_topic.setdefault(p.topic, []).append(
                    (p.partition, p.fetch_offset, p.partition_max_bytes)
                )
            request = FetchRequest(
                max_wait_ms, min_bytes, max_bytes, isolation_level, list(by_topic.items()), rack_id
            )
            return await self.fetch(request, max_wait_ms, after=after)
        last = self._topics_of
        if last is not None and partitions is last[0]:
            topics = last[1]  # the very same request again: no pass over its partitions
        else:
            topics = set(map(_TOPIC, partitions))
            if isinstance(partitions, tuple):
                self._topics_of = (partitions, topics)
        for attempt in range(2):
            ids: Mapping[str, bytes] = {}
            if version >= fetch_request.TOPIC_ID_VERSION:
                ids = await self._topic_ids_for(topics)
            if self.sessions:
                data = self.session.build(partitions, ids)
            else:
                data = _sessionless(partitions, ids, topics)
            v = version if data.can_use_topic_ids else min(version, 12)
            request_v = FlexibleFetchRequest(
                v,
                max_wait_ms,
                min_bytes,
                max_bytes,
                isolation_level,
                data.metadata.session_id,
                data.metadata.epoch,
                data.to_send,
                data.topic_ids,
                data.forgotten(v),
                rack_id,
            )
            names = (
                self.session.session_topic_names
                if self.sessions
                else {i: t for t, i in data.topic_ids.items()}
            )
            self.last_version = v
            try:
                response = await self.connection.fetch(
                    request_v, max_wait_ms, topic_names=names, after=after
                )
            except BaseException as e:
                self.session.handle_error()
                if isinstance(e, BrokerNotAvailableError):
                    self._versions = None  # the broker may come back as another version
                raise
            self._forget_stale_topic_ids(response)
            if not self.sessions:
                return response
            if self.session.handle_response(
                error_code=response.error_code,
                session_id=response.session_id,
                partitions=[(t, part[0]) for t, parts in response.topics for part in parts],
                topic_ids=response.topic_ids,
                throttle_time_ms=response.throttle_time_ms,
                version=v,
            ):
                return response
            if not response.error_code and not response.topics and response.throttle_time_ms:
                return response  # throttled (KIP-219): nothing to hand out, nothing lost
            if response.error_code == FETCH_SESSION_TOPIC_ID_ERROR:
                self._topic_ids.clear()
            log.debug(
                "fetch from broker %s not usable (error %d, attempt %d): asking again with a "
                "full request",
                self.node_id,
                response.error_code,
                attempt + 1,
            )
        raise BrokerNotAvailableError(
            f"broker {self._kafka.broker_address(self.node_id)} answered a full fetch request, "
            f"sent after a fetch session error, with a response the session cannot use "
            f"(top-level error code {response.error_code})"
        )

    def _forget_stale_topic_ids(self, response: FetchResponse) -> None:
        """Drop the cached ids of topics the broker did not know by id (re-created)."""
        for topic, parts in response.topics:
            if any(part[1] in _STALE_TOPIC_ID_ERRORS for part in parts):
                self._topic_ids.pop(topic, None)
        if response.unknown_topic_ids:
            self._topic_ids.clear()

    async def _topic_ids_for(self, topics: set[str]) -> Mapping[str, bytes]:
        """The ids of ``topics``, asked of the broker (MetadataRequest v10+) when not cached;
        :data:`~.fetch_request.ZERO_UUID` for a topic without one (then FetchRequest v12)."""
        cache = self._topic_ids
        missing = sorted(t for t in topics if t not in cache)
        if not missing:
            return cache
        low, high = (await self._api_versions()).get(topic_ids.METADATA_API_KEY, (0, -1))
        version = min(high, topic_ids.MAX_VERSION)
        if version < topic_ids.MIN_VERSION or version < low:
            cache.update(dict.fromkeys(missing, ZERO_UUID))
            return cache
        sent: list[int] = []

        def encode(correlation_id: int, client_id: str) -> bytes:
            sent.append(correlation_id)
            return topic_ids.encode_metadata_request(version, correlation_id, client_id, missing)

        frame = await self.connection.request_raw(encode)
        try:
            error, answers = topic_ids.decode_metadata_response(version, sent[-1], frame)
        except ValueError as e:
            log.warning(
                "broker %s sent a MetadataResponse v%d that does not parse (%s): fetching %s "
                "by name",
                self.node_id,
                version,
                e,
                missing,
            )
            error, answers = -1, []
        found = {a.name: a.topic_id for a in answers if not a.error_code}
        for topic in missing:
            cache[topic] = found.get(topic, ZERO_UUID)
        log.debug(
            "topic ids from broker %s (Metadata v%d, error %d): %s",
            self.node_id,
            version,
            error,
            {t: topic_id_str(cache[t]) for t in missing},
        )
        return cache

    async def close_session(self) -> None:
        """Close the fetch session on the broker, if the channel has one and is connected.

        As ``AbstractFetch.prepareCloseFetchSessionRequests``: a request with the session's
        id, epoch -1 (``FINAL_EPOCH``) and no partitions; the broker drops the session and
        answers at once. Frees the broker's session cache slot now rather than when it is
        evicted. Best effort: failures are logged at DEBUG, never raised (but cancellation
        is: bound it with a shielded time limit at cleanup).
        """
        version = self.last_version
        if (
            not self.sessions
            or version is None
            or version <= MAX_NON_FLEXIBLE
            or self.session.session_id == INVALID_SESSION_ID
            or not self.connection.connected
        ):
            return
        self.session.notify_close()
        data = self.session.build([], {})
        request = FlexibleFetchRequest(
            version, 0, 0, 1, 0, data.metadata.session_id, data.metadata.epoch
        )
        try:
            response = await self.connection.fetch(request, 0)
        except (BrokerNotAvailableError, AuthenticationError) as e:
            self.session.handle_error()
            log.debug("closing the fetch session with broker %s failed: %s", self.node_id, e)
            return
        self.session.handle_response(
            error_code=response.error_code,
            session_id=response.session_id,
            partitions=(),
            version=version,
        )

    def close(self) -> None:
        """Close the channel's own connection (never raises)."""
        self.connection.close()

    def __repr__(self) -> str:
        return f"<FetchChannel broker {self.node_id} {self.session!r} {self.connection!r}>"


_TOPIC = operator.itemgetter(0)  # a FetchPartition's topic

_STALE_TOPIC_ID_ERRORS = frozenset((100, 103))
"""``UNKNOWN_TOPIC_ID``, ``INCONSISTENT_TOPIC_ID``: the topic's id changed (re-created)."""


def _sessionless(
    partitions: Sequence[FetchPartition], known: Mapping[str, bytes], topics: set[str]
) -> FetchRequestData:
    """A full request outside any session (``FetchMetadata.LEGACY``)."""
    ids = {t: known.get(t, ZERO_UUID) for t in topics}
    return FetchRequestData(
        list(partitions), ids, [], [], LEGACY, ZERO_UUID not in ids.values(), len(partitions)
    )


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
