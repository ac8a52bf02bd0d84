"""Consumer configuration: the old consumer's property keys, defaults and validation.

:class:`ConsumerConfig` holds one attribute per property key of Kafka's old ZooKeeper-based
consumer (``kafka.consumer.ConsumerConfig`` + ``ZKConfig``, 0.10.2), with dots turned into
underscores and the original defaults. Values are checked once, at construction, and every
failure is an :class:`~aiozkconsumer.errors.InvalidConfigError` naming the dotted key.
:meth:`ConsumerConfig.from_properties` reads the original dotted keys with string values, as a
``consumer.properties`` file holds them; :meth:`ConsumerConfig.to_properties` is its inverse.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import re
import types
import typing
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from aiozkconsumer.config_security import (
    check_choice as _check_choice,
)
from aiozkconsumer.config_security import (
    check_kafka_security,
    check_zookeeper_security,
)
from aiozkconsumer.config_security import (
    pem_store as _pem_store,
)
from aiozkconsumer.errors import InvalidConfigError

if typing.TYPE_CHECKING:
    from aiozkconsumer.security import KafkaSecurity, ZookeeperSecurity

__all__ = [
    "ConsumerConfig",
    "UnknownConfigWarning",
    "kafka_security_from_properties",
    "zookeeper_security_from_properties",
    "nearest_key",
    "validate_bootstrap_servers",
    "validate_group_id",
    "validate_zookeeper_connect",
]

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1

# As kafka.common.Config.validateChars (0.10.2), minus the empty string (see ConsumerConfig).
_LEGAL_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
_LEGAL_CHARS_TEXT = "ASCII alphanumerics, '.', '_' and '-'"
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_HOSTNAME = re.compile(r"[A-Za-z0-9._-]+")
_IPV6_LITERAL = re.compile(r"\[[0-9A-Fa-f:.]+\]")

_AUTO_OFFSET_RESET_VALUES = ("smallest", "largest")
_OFFSETS_STORAGE_VALUES = ("zookeeper", "kafka")
_ASSIGNMENT_STRATEGY_VALUES = ("range", "roundrobin")
_CLUSTER_METADATA_SOURCE_VALUES = ("auto", "zookeeper", "kafka")
_GROUP_COORDINATOR_VALUES = ("zookeeper", "kafka")
_CRC_ERROR_ACTION_VALUES = ("raise", "skip")
_GROUP_PROTOCOL_VALUES = ("classic", "consumer")
_GROUP_REMOTE_ASSIGNOR_VALUES = ("uniform", "range")
# Keys of the classic protocol the consumer protocol (KIP-848) does not use: the broker decides
# the assignment, the session timeout and the heartbeat interval. As the Java client (4.x),
# setting one of them with group.protocol=consumer is a config error; here "set" means "set
# to anything but its default" (a default cannot be told apart from a value given).
_CLASSIC_PROTOCOL_ONLY = (
    ("partition_assignment_strategy", "range"),
    ("session_timeout_ms", 45000),
    ("heartbeat_interval_ms", 3000),
)
# The Java KafkaConsumer's names for auto.offset.reset, accepted with group.coordinator=kafka.
_NEW_CONSUMER_RESETS = {"earliest": "smallest", "latest": "largest"}
# Keys of the Java KafkaConsumer that name an existing property of this consumer.
_KEY_ALIASES = {
    "enable.auto.commit": "auto.commit.enable",
    # The Java client's PEM spellings (ssl.truststore.type=PEM, ssl.keystore.type=PEM) and
    # KIP-1139's names of the OAuth client credentials.
    "ssl.key.password": "ssl.password",
    "sasl.oauthbearer.client.credentials.client.id": "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.credentials.client.secret": "sasl.oauthbearer.client.secret",
}
# Java client keys whose value is a file in a format named by a *.type key: PEM files are read
# here as they are (ssl.cafile / ssl.certfile); JKS and PKCS12 stores are refused with advice.
_STORE_KEYS = {
    "ssl.truststore.location": ("ssl.truststore.type", "ssl_cafile"),
    "ssl.keystore.location": ("ssl.keystore.type", "ssl_certfile"),
    "zookeeper.ssl.truststore.location": ("zookeeper.ssl.truststore.type", "zookeeper_ssl_cafile"),
    "zookeeper.ssl.keystore.location": ("zookeeper.ssl.keystore.type", "zookeeper_ssl_certfile"),
}
_STORE_TYPE_KEYS = {
    "ssl.truststore.type",
    "ssl.keystore.type",
    "zookeeper.ssl.truststore.type",
    "zookeeper.ssl.keystore.type",
}
_ISOLATION_LEVEL_VALUES = ("read_uncommitted", "read_committed")
SECRET_KEYS = frozenset(
    {
        "ssl.password",
        "sasl.password",
        "sasl.jaas.config",
        "sasl.oauthbearer.client.secret",
        "zookeeper.auth",
        "zookeeper.ssl.password",
    }
)
"""Dotted keys whose values are secrets: never in ``repr``, errors, logs or ``describe``."""
REDACTED = "[hidden]"
"""What stands in for a secret's value wherever a config is shown."""
# Attributes that hold objects given from code, never read from a properties file.
_OBJECT_FIELDS = ("ssl_context", "sasl_oauthbearer_token_provider")


class UnknownConfigWarning(UserWarning):
    """:meth:`ConsumerConfig.from_properties` was given keys it does not know; they are ignored.

    As the original's ``VerifiableProperties.verify()``, which only logged
    "Property X is not valid" and went on.
    """


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig:
    """Configuration of a :class:`ZookeeperConsumerConnector`, as ``ConsumerConfig.scala``, 0.10.2.

    Each attribute is an original property key with dots turned into underscores
    (``zookeeper.session.timeout.ms`` -> ``zookeeper_session_timeout_ms``). Times are
    milliseconds, sizes are bytes, all as ``int``. Keys whose default derives from another key
    (``client.id``, ``zookeeper.connection.timeout.ms``, ``rebalance.backoff.ms``,
    ``dual.commit.enabled``) stay ``None`` when not set, so that :meth:`replace` and
    :meth:`to_properties` keep the link; read the value in force from the matching
    ``effective_*`` property. ``offsets_storage`` is lower-cased at construction, as the
    original does; no other value is rewritten.

    Validation follows the original and is stricter where the original let a value through
    that cannot work: a zero duration where it would spin a polling loop or end a wait at once, an
    ``int`` outside Java's 32-bit range (every one of these was a Java ``Int``), an empty
    ``group.id`` (the original accepted it and then used ``/consumers/`` itself as the group
    directory).

    Attributes:
        group_id: ``group.id``, required. The consumer group; must match ``[a-zA-Z0-9._-]+``
            (``validateChars``; the original also accepted the empty string) and not be
            ``.`` or ``..`` (no ZooKeeper node can have that name). The command line checks
            ``--group`` with the same rule (:func:`validate_group_id`).
        consumer_id: ``consumer.id``, default ``None``: the connector generates
            ``<hostname>-<time ms>-<8 hex chars of a UUID>``. Same legal characters as
            ``group.id``; the original advises setting it only for testing.
        zookeeper_connect: ``zookeeper.connect``, required with ``group.coordinator=zookeeper``
            (the default), unused with ``kafka``. ``host:port[,host:port...][/chroot]``;
            port 1..65535, an IPv6 host in brackets (``[::1]:2181``), chroot an absolute
            ZooKeeper path (``/`` means none).
        zookeeper_session_timeout_ms: ``zookeeper.session.timeout.ms``, ms, default 6000, > 0.
        zookeeper_connection_timeout_ms: ``zookeeper.connection.timeout.ms``, ms, default
            ``None`` = the session timeout (``effective_zookeeper_connection_timeout_ms``), > 0.
        zookeeper_sync_time_ms: ``zookeeper.sync.time.ms``, ms, default 2000, >= 0. Used only as
            the default of ``rebalance.backoff.ms``.
        socket_timeout_ms: ``socket.timeout.ms``, ms, default 30000, > 0 and at least
            ``fetch.wait.max.ms`` (KAFKA-1147).
        socket_receive_buffer_bytes: ``socket.receive.buffer.bytes``, bytes, default 65536;
            >= 1, or -1 for the operating system's default.
        fetch_message_max_bytes: ``fetch.message.max.bytes``, bytes, default 1048576, >= 1.
            Per-partition ``maxBytes`` of each fetch. A soft limit with brokers of 0.10.1 or
            later (Fetch v3+, KIP-74), as for the original 0.10.2 against them: a record batch
            larger than it is returned whole, and handed out, when it is the first data of a
            fetch response; until then (while other partitions of the same fetch return data
            first) its partition waits at that offset. Nothing is skipped. Only a broker that
            answers with a truncated batch (older than 0.10.1) makes the stream raise
            ``MessageSizeTooLargeError`` for that partition, which then stops there.
        fetch_max_bytes: ``fetch.max.bytes``, bytes, default 52428800, >= 1. Added in 0.10.1
            (KIP-74); read but unused by the original.
        fetch_min_bytes: ``fetch.min.bytes``, bytes, default 1, >= 1. Fetch ``minBytes``.
        fetch_wait_max_ms: ``fetch.wait.max.ms``, ms, default 100, > 0. Fetch ``maxWait``.
        num_consumer_fetchers: ``num.consumer.fetchers``, default 1, >= 1. Fetch loops per
            broker (KAFKA-1184).
        check_crcs: ``check.crcs``, new (the Java ``KafkaConsumer``'s and aiokafka's name),
            default ``True``. Check the CRC of every fetched record batch before any of its
            records is handed out, as the original's ``ConsumerIterator`` did
            (``ensureValid()`` on every message). A batch whose CRC does not match is never
            delivered; ``crc.error.action`` says what happens instead. ``False`` skips the
            check and hands out whatever arrived. The check costs about 0.7 ms of CPU per MiB
            fetched with aiokafka's CRC-32C, under 0.2 ms with the ``crc32c`` package
            installed (hardware CRC-32C).
        crc_error_action: ``crc.error.action``, new, default ``"raise"``; ``"raise"`` or
            ``"skip"``. What a stream does with a record batch whose CRC does not match (with
            ``check.crcs``). ``"raise"``: the records before it are handed out, then the
            stream's iterator raises ``CorruptRecordError`` naming topic, partition and the
            batch's offsets, and that partition is not fetched further until the next
            rebalance; its consumed (and committed) offset stays before the batch, so a
            restarted consumer meets it again. ``"skip"``: the batch is logged as an error,
            counted in the ``CorruptBatchesPerSec`` meter and stepped over (its offsets count
            as consumed); the records after it are handed out. A batch that does not parse at
            all always raises.
        auto_commit_enable: ``auto.commit.enable``, default ``True``.
        auto_commit_interval_ms: ``auto.commit.interval.ms``, ms, default 60000, > 0. The first
            commit runs one interval after start.
        queued_max_message_chunks: ``queued.max.message.chunks``, default 2, >= 1. Capacity, in
            fetched chunks, of each stream's queue.
        rebalance_max_retries: ``rebalance.max.retries``, default 4, >= 1. Rebalance attempts
            before ``ConsumerRebalanceFailedError``.
        rebalance_backoff_ms: ``rebalance.backoff.ms``, ms, default ``None`` =
            ``zookeeper.sync.time.ms`` (``effective_rebalance_backoff_ms``), >= 0.
        refresh_leader_backoff_ms: ``refresh.leader.backoff.ms``, ms, default 200, > 0. Pause of
            the leader finder per loop, and the fetcher's idle and error backoff.
        auto_offset_reset: ``auto.offset.reset``, default ``"largest"``; ``"smallest"`` or
            ``"largest"`` (``validateAutoOffsetReset``, case-sensitive).
        consumer_timeout_ms: ``consumer.timeout.ms``, ms, default -1. Negative: the iterator
            waits forever; otherwise it raises ``ConsumerTimeoutError`` after this long.
        exclude_internal_topics: ``exclude.internal.topics``, default ``True``. Keeps
            ``__consumer_offsets`` out of wildcard subscriptions.
        client_id: ``client.id``, default ``None`` = ``group.id`` (``effective_client_id``).
            Same legal characters as ``group.id``; must not be empty.
        offsets_storage: ``offsets.storage``, default ``"zookeeper"``; ``"zookeeper"`` or
            ``"kafka"``, lower-cased (``validateOffsetsStorage``).
        dual_commit_enabled: ``dual.commit.enabled``, default ``None`` =
            ``offsets.storage == "kafka"`` (``effective_dual_commit_enabled``). Commit to
            ZooKeeper as well as Kafka.
        offsets_channel_backoff_ms: ``offsets.channel.backoff.ms``, ms, default 1000, > 0.
            Backoff for coordinator discovery, reconnects and offset commit/fetch retries.
        offsets_channel_socket_timeout_ms: ``offsets.channel.socket.timeout.ms``, ms, default
            10000, > 0. Timeout of offset commit/fetch and coordinator requests.
        offsets_commit_max_retries: ``offsets.commit.max.retries``, default 5, >= 0.
        partition_assignment_strategy: ``partition.assignment.strategy``, default ``"range"``;
            ``"range"`` or ``"roundrobin"`` (validated since 0.9.0, KAFKA-2032).
        bootstrap_servers: ``bootstrap.servers``, new, default ``None``: brokers are found
            under ZooKeeper's ``/brokers/ids``. Otherwise ``host:port[,host:port...]``.
        cluster_metadata_source: ``cluster.metadata.source``, new, default ``"auto"``;
            ``"auto"``, ``"zookeeper"`` (``/brokers`` in ZooKeeper, as the original) or
            ``"kafka"`` (broker metadata requests; needed for KRaft clusters).
        group_coordinator: ``group.coordinator``, new, default ``"zookeeper"``: who
            coordinates the group. ``"zookeeper"``: the original's ZooKeeper-coordinated group
            (registration and owner nodes, ``zookeeper.connect`` required). ``"kafka"``: the
            Java ``KafkaConsumer``'s group protocol (JoinGroup/SyncGroup with the broker's
            group coordinator); ``bootstrap.servers`` required, offsets stored in Kafka
            (``offsets.storage`` is ``kafka`` and dual commit is refused), metadata from
            Kafka, and ``auto.offset.reset`` may also be ``earliest``/``latest`` (read as
            ``smallest``/``largest``).
        session_timeout_ms: ``session.timeout.ms``, ms, default 45000 (the Java client's),
            > 0; ``group.coordinator=kafka`` only: the group coordinator removes a member it
            has not heard a heartbeat from for this long.
        heartbeat_interval_ms: ``heartbeat.interval.ms``, ms, default 3000, > 0 and below
            ``session.timeout.ms``; ``kafka`` only: the pace of the heartbeat coroutine.
        max_poll_interval_ms: ``max.poll.interval.ms``, ms, default 300000, > 0; ``kafka``
            only: sent as JoinGroup's rebalance timeout (how long the coordinator waits for
            every member to rejoin); with ``group.protocol=consumer``, the time the broker
            gives this member to revoke partitions it takes away.
        group_protocol: ``group.protocol``, new, default ``"classic"``; ``kafka`` only:
            ``"classic"`` (JoinGroup/SyncGroup, the leader assigns) or ``"consumer"`` (the
            KIP-848 protocol of Kafka 4.x: ConsumerGroupHeartbeat, the broker assigns and
            hands each member its delta, so partitions that do not move keep flowing). With
            ``consumer``, ``partition.assignment.strategy``, ``session.timeout.ms`` and
            ``heartbeat.interval.ms`` are the broker's (``group.consumer.*`` broker and
            group configs) and setting them to anything but their defaults is an error, as
            the Java client's.
        group_remote_assignor: ``group.remote.assignor``, new, default ``None`` (the
            broker's default, ``uniform``); ``group.protocol=consumer`` only: the broker-side
            assignor, ``"uniform"`` or ``"range"``.
        interceptor_classes: ``interceptor.classes``, default ``None``: comma-separated
            ``module:Class`` (or ``module.Class``) names of consumer interceptors, each built
            with no arguments (see ``ConsumerInterceptor``); both coordinators.
        offsets_malformed_reset: ``offsets.malformed.reset``, new, default ``False``; offsets
            in ZooKeeper only. What a rebalance does with a partition whose offset node
            (``/consumers/<group>/offsets/<topic>/<partition>``) does not hold a decimal
            offset. ``False``: the member the plan gives it to leaves it unclaimed (no owner
            node, not fetched, nothing skipped), logs the node and its bytes as an error,
            lists it in ``statistics().unowned_partitions``, and reads it again at every
            rebalance; the group's other partitions are consumed as usual. To consume it,
            write an offset to the node (``aiozkconsumer offsets import``) and trigger a
            rebalance (a member joining or leaving, ``connector.request_rebalance()``).
            ``True``: the partition is claimed and starts from ``auto.offset.reset`` (with
            ``largest`` its backlog is skipped), and the next commit overwrites the node;
            with ``dual.commit.enabled`` its Kafka offset is not read either. The original's
            rebalance failed on such a node (``NumberFormatException``).
        security_protocol: ``security.protocol``, the Java client's, default ``"PLAINTEXT"``;
            ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL`` (any letter case). Every
            Kafka connection (metadata, fetch, offsets, group coordination, the tools, Spark)
            uses it; with brokers found in ZooKeeper, the endpoint of the listener with this
            protocol is used (``listener_security_protocol_map``). See docs/security.md.
        ssl_cafile: ``ssl.cafile``, default ``None`` (the system's CAs): PEM file of the CAs to
            trust. ``ssl.truststore.location`` with ``ssl.truststore.type=PEM`` (the Java
            client's PEM spelling) is read as this key; JKS and PKCS12 stores are refused with
            how to convert them. Only with SSL or SASL_SSL; the file must exist.
        ssl_certfile: ``ssl.certfile``, default ``None``: PEM client certificate (chain) for
            mutual TLS, with its key unless ``ssl.keyfile`` is set; ``ssl.keystore.location``
            with ``ssl.keystore.type=PEM`` is read as this key.
        ssl_keyfile: ``ssl.keyfile``, default ``None``: PEM private key of ``ssl.certfile``.
        ssl_password: ``ssl.password`` (also ``ssl.key.password``), default ``None``: the
            private key's password. A secret: never shown in ``repr``, errors or logs.
        ssl_endpoint_identification_algorithm: ``ssl.endpoint.identification.algorithm``,
            default ``"https"``: the broker's certificate must name the host connected to;
            ``""`` turns the host name check off (the certificate is still verified).
        ssl_check_hostname: ``ssl.check.hostname``, default ``None`` (follows
            ``ssl.endpoint.identification.algorithm``); a boolean overrides it.
        ssl_context: an ``ssl.SSLContext`` given from code instead of the files (no properties
            key); only with SSL or SASL_SSL.
        sasl_mechanism: ``sasl.mechanism``, default ``"GSSAPI"`` (the Java client's);
            ``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``, ``OAUTHBEARER`` or ``GSSAPI``. Only
            with SASL_PLAINTEXT or SASL_SSL (another value with a protocol without SASL is an
            error).
        sasl_username: ``sasl.username``, default ``None``: PLAIN and SCRAM user; read from
            ``sasl.jaas.config`` when that is given.
        sasl_password: ``sasl.password``, default ``None``: PLAIN and SCRAM password; a secret.
        sasl_jaas_config: ``sasl.jaas.config``, default ``None``: the Java client's JAAS entry
            (``PlainLoginModule``/``ScramLoginModule`` with ``username``/``password``,
            ``OAuthBearerLoginModule`` with ``clientId``/``clientSecret``/``scope``,
            ``Krb5LoginModule``), so a Java client's properties file works as it is; a login
            module that does not go with ``sasl.mechanism`` is an error. A secret.
        sasl_kerberos_service_name: ``sasl.kerberos.service.name``, default ``"kafka"``: the
            brokers' Kerberos service (GSSAPI; needs the ``gssapi`` package and a ticket).
        sasl_kerberos_domain_name: ``sasl.kerberos.domain.name``, default ``None`` (each
            broker's host name): the host part of the brokers' principal.
        sasl_oauthbearer_token_provider: ``sasl.oauthbearer.token.provider``: an object with
            ``async token() -> str`` given from code, or (in a properties file or a Spark
            option) the ``module:Class`` name of one, built with no arguments; for OAUTHBEARER:
            its tokens are reused until 80% of their
            lifetime (from the JWT's ``exp``/``iat``), with jitter, and a failing provider is
            retried with backoff.
        sasl_oauthbearer_token_endpoint_url: ``sasl.oauthbearer.token.endpoint.url``, default
            ``None``: the OIDC token endpoint of the client-credentials flow (OAUTHBEARER).
        sasl_oauthbearer_client_id: ``sasl.oauthbearer.client.id`` (also KIP-1139's
            ``sasl.oauthbearer.client.credentials.client.id``), default ``None``.
        sasl_oauthbearer_client_secret: ``sasl.oauthbearer.client.secret`` (also
            ``sasl.oauthbearer.client.credentials.client.secret``), default ``None``; a secret.
        sasl_oauthbearer_scope: ``sasl.oauthbearer.scope``, default ``None``.
        reconnect_backoff_max_ms: ``reconnect.backoff.max.ms``, the Java client's, ms, default
            1000, > 0: the longest pause before connecting again after a failed connection or
            authentication.
        isolation_level: ``isolation.level``, the Java client's, default
            ``"read_uncommitted"``: every record up to the high watermark, including those of
            aborted and open transactions. ``"read_committed"``: records of committed
            transactions and records written outside transactions, up to the last stable
            offset (the first offset of the oldest open transaction); records of aborted
            transactions are skipped, as the Java client's ``CompletedFetch`` skips them, and
            their offsets and the transaction markers count as consumed. Lag is measured to the
            last stable offset, and ``auto.offset.reset=largest`` starts there. The Spark
            source also takes it as ``kafka.isolation.level``.
        client_rack: ``client.rack``, the Java client's, default ``None``: the rack this
            consumer runs in.
        zookeeper_auth: ``zookeeper.auth``, new, default ``None``: ``scheme:credentials``
            sent to ZooKeeper after every connect (``digest:user:password``, as kazoo's
            ``auth_data``). A secret.
        zookeeper_set_acl: ``zookeeper.set.acl`` (the broker's key), default ``False``: every
            node the consumer creates gets creator-all + world-read ACLs, as Kafka's brokers
            give theirs, so the original's tools can still read them.
        zookeeper_ssl_client_enable: ``zookeeper.ssl.client.enable`` (Kafka's ZooKeeper
            client key), default ``False``: TLS to ZooKeeper's ``secureClientPort``.
        zookeeper_ssl_cafile: ``zookeeper.ssl.cafile``, default ``None`` (the system's CAs);
            ``zookeeper.ssl.truststore.location`` with type PEM is read as this key.
        zookeeper_ssl_certfile: ``zookeeper.ssl.certfile``, default ``None``: client
            certificate for ZooKeeper's x509 authentication.
        zookeeper_ssl_keyfile: ``zookeeper.ssl.keyfile``, default ``None``.
        zookeeper_ssl_password: ``zookeeper.ssl.password``, default ``None``; a secret.
        zookeeper_ssl_endpoint_identification_algorithm: the host name check of ZooKeeper's
            certificate (``zookeeper.ssl.endpoint.identification.algorithm``), default
            ``"https"``; ``""`` turns it off.

    Raises:
        InvalidConfigError: at construction, when a value has the wrong type (``bool`` where
            ``bool`` is expected, ``int`` but not ``bool`` where ``int`` is, ``str`` for text),
            is out of range, is not one of the allowed words, or has the wrong syntax; or when
            ``fetch.wait.max.ms`` exceeds ``socket.timeout.ms``. ``key`` is the dotted key.
    """

    group_id: str
    consumer_id: str | None = None
    zookeeper_connect: str | None = None
    zookeeper_session_timeout_ms: int = 6000
    zookeeper_connection_timeout_ms: int | None = None
    zookeeper_sync_time_ms: int = 2000
    socket_timeout_ms: int = 30000
    socket_receive_buffer_bytes: int = 65536
    fetch_message_max_bytes: int = 1048576
    fetch_max_bytes: int = 52428800
    fetch_min_bytes: int = 1
    fetch_wait_max_ms: int = 100
    num_consumer_fetchers: int = 1
    check_crcs: bool = True
    crc_error_action: str = "raise"
    auto_commit_enable: bool = True
    auto_commit_interval_ms: int = 60000
    queued_max_message_chunks: int = 2
    rebalance_max_retries: int = 4
    rebalance_backoff_ms: int | None = None
    refresh_leader_backoff_ms: int = 200
    auto_offset_reset: str = "largest"
    consumer_timeout_ms: int = -1
    exclude_internal_topics: bool = True
    client_id: str | None = None
    offsets_storage: str = "zookeeper"
    dual_commit_enabled: bool | None = None
    offsets_channel_backoff_ms: int = 1000
    offsets_channel_socket_timeout_ms: int = 10000
    offsets_commit_max_retries: int = 5
    partition_assignment_strategy: str = "range"
    bootstrap_servers: str | None = None
    cluster_metadata_source: str = "auto"
    group_coordinator: str = "zookeeper"
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000
    group_protocol: str = "classic"
    group_remote_assignor: str | None = None
    interceptor_classes: str | None = None
    offsets_malformed_reset: bool = False
    # ---- Kafka connections: TLS and SASL (the Java client's keys) --------------------
    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = field(default=None, repr=False)
    ssl_endpoint_identification_algorithm: str = "https"
    ssl_check_hostname: bool | None = None
    ssl_context: Any = field(default=None, repr=False)
    sasl_mechanism: str = "GSSAPI"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_jaas_config: str | None = field(default=None, repr=False)
    sasl_kerberos_service_name: str = "kafka"
    sasl_kerberos_domain_name: str | None = None
    sasl_oauthbearer_token_provider: Any = field(default=None, repr=False)
    sasl_oauthbearer_token_endpoint_url: str | None = None
    sasl_oauthbearer_client_id: str | None = None
    sasl_oauthbearer_client_secret: str | None = field(default=None, repr=False)
    sasl_oauthbearer_scope: str | None = None
    reconnect_backoff_max_ms: int = 1000
    # ---- what is read -----------------------------------------------------------------
    isolation_level: str = "read_uncommitted"
    client_rack: str | None = None
    # ---- ZooKeeper: auth, TLS, ACLs ----------------------------------------------------
    zookeeper_auth: str | None = field(default=None, repr=False)
    zookeeper_set_acl: bool = False
    zookeeper_ssl_client_enable: bool = False
    zookeeper_ssl_cafile: str | None = None
    zookeeper_ssl_certfile: str | None = None
    zookeeper_ssl_keyfile: str | None = None
    zookeeper_ssl_password: str | None = field(default=None, repr=False)
    zookeeper_ssl_endpoint_identification_algorithm: str = "https"

    def __repr__(self) -> str:
        # Secrets are never shown (SECRET_KEYS), objects from code only by their type.
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None and f.name in _SECRET_FIELDS:
                parts.append(f"{f.name}={REDACTED!r}")
            elif value is not None and f.name in _OBJECT_FIELDS:
                parts.append(f"{f.name}=<{type(value).__name__}>")
            else:
                parts.append(f"{f.name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def __post_init__(self) -> None:
        for name, (kind, optional) in _FIELD_KINDS.items():
            _check_type(name, getattr(self, name), kind, optional)
        # The original lower-cases offsets.storage (ConsumerConfig.scala) and nothing else.
        object.__setattr__(self, "offsets_storage", self.offsets_storage.lower())

        validate_group_id(self.group_id)
        if self.consumer_id is not None:
            _check_legal_chars("consumer.id", self.consumer_id)
        if self.client_id is not None:
            _check_legal_chars("client.id", self.client_id)
        _check_choice("group.coordinator", self.group_coordinator, _GROUP_COORDINATOR_VALUES)
        self._check_group_protocol()
        if self.group_coordinator == "kafka":
            self._check_kafka_coordinated()
        elif self.zookeeper_connect is None:
            raise InvalidConfigError(
                "zookeeper.connect",
                "missing required property (group.coordinator=zookeeper); set it, or "
                "group.coordinator=kafka with bootstrap.servers for a Kafka-coordinated group",
            )
        if self.zookeeper_connect is not None:
            validate_zookeeper_connect(self.zookeeper_connect)
        if self.bootstrap_servers is not None:
            validate_bootstrap_servers(self.bootstrap_servers)
        _check_range("session.timeout.ms", self.session_timeout_ms, 1)
        _check_range("heartbeat.interval.ms", self.heartbeat_interval_ms, 1)
        _check_range("max.poll.interval.ms", self.max_poll_interval_ms, 1)
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise InvalidConfigError(
                "heartbeat.interval.ms",
                f"must be below session.timeout.ms ({self.session_timeout_ms}), got "
                f"{self.heartbeat_interval_ms}",
            )
        if self.interceptor_classes is not None:
            for name in self.interceptor_classes.split(","):
                if not re.fullmatch(r"\s*[A-Za-z_][\w.]*([:.][A-Za-z_]\w*)\s*", name):
                    raise InvalidConfigError(
                        "interceptor.classes",
                        f"{name.strip()!r} is not a module:Class or module.Class name",
                    )

        # Durations that pace an unbounded loop or bound a wait must be > 0; the rebalance
        # backoff may be 0 since rebalance.max.retries bounds that loop.
        _check_range("zookeeper.session.timeout.ms", self.zookeeper_session_timeout_ms, 1)
        if self.zookeeper_connection_timeout_ms is not None:
            _check_range("zookeeper.connection.timeout.ms", self.zookeeper_connection_timeout_ms, 1)
        _check_range("zookeeper.sync.time.ms", self.zookeeper_sync_time_ms, 0)
        _check_range("socket.timeout.ms", self.socket_timeout_ms, 1)
        if self.socket_receive_buffer_bytes != -1:
            _check_range(
                "socket.receive.buffer.bytes",
                self.socket_receive_buffer_bytes,
                1,
                extra=" (or -1 for the operating system's default)",
            )
        _check_range("fetch.message.max.bytes", self.fetch_message_max_bytes, 1)
        _check_range("fetch.max.bytes", self.fetch_max_bytes, 1)
        _check_range("fetch.min.bytes", self.fetch_min_bytes, 1)
        _check_range("fetch.wait.max.ms", self.fetch_wait_max_ms, 1)
        _check_range("num.consumer.fetchers", self.num_consumer_fetchers, 1)
        _check_range("auto.commit.interval.ms", self.auto_commit_interval_ms, 1)
        _check_range("queued.max.message.chunks", self.queued_max_message_chunks, 1)
        _check_range("rebalance.max.retries", self.rebalance_max_retries, 1)
        if self.rebalance_backoff_ms is not None:
            _check_range("rebalance.backoff.ms", self.rebalance_backoff_ms, 0)
        _check_range("refresh.leader.backoff.ms", self.refresh_leader_backoff_ms, 1)
        _check_range(
            "consumer.timeout.ms",
            self.consumer_timeout_ms,
            -1,
            extra=" (-1 waits forever; any value below -1 is a mistake)",
        )
        _check_range("offsets.channel.backoff.ms", self.offsets_channel_backoff_ms, 1)
        _check_range("offsets.channel.socket.timeout.ms", self.offsets_channel_socket_timeout_ms, 1)
        _check_range("offsets.commit.max.retries", self.offsets_commit_max_retries, 0)

        _check_choice("auto.offset.reset", self.auto_offset_reset, _AUTO_OFFSET_RESET_VALUES)
        _check_choice("offsets.storage", self.offsets_storage, _OFFSETS_STORAGE_VALUES)
        _check_choice(
            "partition.assignment.strategy",
            self.partition_assignment_strategy,
            _ASSIGNMENT_STRATEGY_VALUES,
        )
        _check_choice(
            "cluster.metadata.source",
            self.cluster_metadata_source,
            _CLUSTER_METADATA_SOURCE_VALUES,
        )
        _check_choice("crc.error.action", self.crc_error_action, _CRC_ERROR_ACTION_VALUES)
        _check_choice("isolation.level", self.isolation_level, _ISOLATION_LEVEL_VALUES)
        _check_range("reconnect.backoff.max.ms", self.reconnect_backoff_max_ms, 1)
        if self.client_rack is not None and not self.client_rack.strip():
            raise InvalidConfigError("client.rack", "must not be blank (leave it unset instead)")
        check_kafka_security(self)
        check_zookeeper_security(self)

        # As ConsumerConfig.scala's require (KAFKA-1147): a long poll must not outlast the socket.
        if self.fetch_wait_max_ms > self.socket_timeout_ms:
            raise InvalidConfigError(
                "socket.timeout.ms",
                f"must be at least fetch.wait.max.ms ({self.fetch_wait_max_ms}) to prevent "
                f"unnecessary socket timeouts, got {self.socket_timeout_ms}",
            )

    @property
    def tls(self) -> bool:
        """Whether Kafka connections use TLS (``security.protocol`` SSL or SASL_SSL)."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def read_committed(self) -> bool:
        """Whether ``isolation.level`` is ``read_committed``."""
        return self.isolation_level == "read_committed"

    def _check_group_protocol(self) -> None:
        """The rules of ``group.protocol`` and ``group.remote.assignor`` (at construction)."""
        _check_choice("group.protocol", self.group_protocol, _GROUP_PROTOCOL_VALUES)
        if self.group_remote_assignor is not None:
            _check_choice(
                "group.remote.assignor", self.group_remote_assignor, _GROUP_REMOTE_ASSIGNOR_VALUES
            )
        if self.group_protocol == "classic":
            if self.group_remote_assignor is not None:
                raise InvalidConfigError(
                    "group.remote.assignor",
                    "only used with group.protocol=consumer (the broker assigns); the classic "
                    "protocol's assignor is partition.assignment.strategy",
                )
            return
        if self.group_coordinator != "kafka":
            raise InvalidConfigError(
                "group.protocol",
                "group.protocol=consumer needs group.coordinator=kafka (and a Kafka 4.x "
                "broker); a ZooKeeper-coordinated group has no group protocol",
            )
        for name, default in _CLASSIC_PROTOCOL_ONLY:
            if getattr(self, name) != default:
                raise InvalidConfigError(
                    name.replace("_", "."),
                    f"not used with group.protocol=consumer (the broker decides it: "
                    f"group.remote.assignor, group.consumer.session.timeout.ms, "
                    f"group.consumer.heartbeat.interval.ms); leave it unset, got "
                    f"{getattr(self, name)!r}",
                )

    @property
    def consumer_protocol(self) -> bool:
        """Whether the group uses the KIP-848 consumer protocol (``group.protocol=consumer``)."""
        return self.group_protocol == "consumer"

    def _check_kafka_coordinated(self) -> None:
        """The rules of ``group.coordinator=kafka`` (at construction)."""
        if not self.bootstrap_servers:
            raise InvalidConfigError(
                "bootstrap.servers",
                "missing required property (group.coordinator=kafka: the group is coordinated "
                "by a broker, found through bootstrap.servers)",
            )
        if self.dual_commit_enabled:
            raise InvalidConfigError(
                "dual.commit.enabled",
                "a Kafka-coordinated group (group.coordinator=kafka) stores its offsets in "
                "Kafka only; dual commit needs ZooKeeper offsets",
            )
        if self.cluster_metadata_source == "zookeeper":
            raise InvalidConfigError(
                "cluster.metadata.source",
                "a Kafka-coordinated group (group.coordinator=kafka) reads metadata from Kafka",
            )
        reset = _NEW_CONSUMER_RESETS.get(self.auto_offset_reset)
        if reset is not None:
            object.__setattr__(self, "auto_offset_reset", reset)
        object.__setattr__(self, "offsets_storage", "kafka")
        object.__setattr__(self, "dual_commit_enabled", False)
        object.__setattr__(self, "cluster_metadata_source", "kafka")

    @property
    def kafka_coordinated(self) -> bool:
        """Whether the group is coordinated by Kafka (``group.coordinator=kafka``)."""
        return self.group_coordinator == "kafka"

    def require_zookeeper_connect(self) -> str:
        """``zookeeper.connect``, for the parts that need ZooKeeper.

        Raises:
            InvalidConfigError: it is not set (a Kafka-coordinated group without it).
        """
        if self.zookeeper_connect is None:
            raise InvalidConfigError(
                "zookeeper.connect", "this needs ZooKeeper, and zookeeper.connect is not set"
            )
        return self.zookeeper_connect

    @property
    def effective_client_id(self) -> str:
        """``client.id`` in force: ``client_id``, or ``group_id`` when unset (as the original)."""
        return self.client_id if self.client_id is not None else self.group_id

    @property
    def effective_zookeeper_connection_timeout_ms(self) -> int:
        """``zookeeper.connection.timeout.ms`` in force, in ms: the session timeout when unset."""
        if self.zookeeper_connection_timeout_ms is not None:
            return self.zookeeper_connection_timeout_ms
        return self.zookeeper_session_timeout_ms

    @property
    def effective_rebalance_backoff_ms(self) -> int:
        """``rebalance.backoff.ms`` in force, in ms: ``zookeeper.sync.time.ms`` when unset."""
        if self.rebalance_backoff_ms is not None:
            return self.rebalance_backoff_ms
        return self.zookeeper_sync_time_ms

    @property
    def effective_dual_commit_enabled(self) -> bool:
        """``dual.commit.enabled`` in force: ``offsets.storage == "kafka"`` when unset."""
        if self.dual_commit_enabled is not None:
            return self.dual_commit_enabled
        return self.offsets_storage == "kafka"

    @property
    def zookeeper_hosts(self) -> str:
        """The ``host:port[,host:port...]`` part of ``zookeeper.connect``, without the chroot."""
        return self.require_zookeeper_connect().partition("/")[0]

    @property
    def zookeeper_chroot(self) -> str | None:
        """The chroot path of ``zookeeper.connect`` (``"/kafka"``), or ``None`` if it has none.

        A bare ``/`` counts as none, as ZooKeeper's ``ConnectStringParser`` treats it.
        """
        _, slash, path = self.require_zookeeper_connect().partition("/")
        return slash + path if path else None

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> Self:
        """Build a config from the original's dotted property keys.

        Values may be strings, as a ``.properties`` file holds them, or already typed
        (``int``, ``bool``, ``str``). Strings are stripped of surrounding whitespace before
        they are read as ints or booleans. A ``None`` value counts as absent. As the
        original's ``VerifiableProperties``, booleans must be ``true`` or ``false`` (here in
        any letter case), and unknown keys are only warned about.

        Args:
            props: dotted key (``"group.id"``) to value. ``group.id`` is required, and
                ``zookeeper.connect`` unless ``group.coordinator=kafka``; every other key has
                its default. The Java client's ``enable.auto.commit`` is read as
                ``auto.commit.enable``.

        Returns:
            The validated config.

        Raises:
            InvalidConfigError: when ``group.id``, or ``zookeeper.connect`` of a
                ZooKeeper-coordinated group, is missing ("missing required property"), a
                string does not parse as the key's int or boolean, or any check of
                :class:`ConsumerConfig` fails; ``key`` is the dotted key at fault.

        Warns:
            UnknownConfigWarning: once, naming every key that is not a consumer property
                (JVM-only keys such as ``kafka.metrics.reporters`` included); those keys
                are ignored.
        """
        kinds = _FIELD_KINDS
        kwargs: dict[str, Any] = {}
        unknown: list[str] = []
        for key, value in props.items():
            if isinstance(key, str):
                key = _KEY_ALIASES.get(key, key)
            if key in _STORE_TYPE_KEYS:
                continue  # read with its store's location below
            if key == "sasl.oauthbearer.token.provider":
                if value is not None:
                    kwargs["sasl_oauthbearer_token_provider"] = str(value).strip()
                continue
            if key in _STORE_KEYS:
                if value is not None:
                    type_key, name = _STORE_KEYS[key]
                    kwargs[name] = _pem_store(key, str(value).strip(), props.get(type_key))
                continue
            name = key.replace(".", "_") if isinstance(key, str) else ""
            if not isinstance(key, str) or "_" in key or name not in kinds:
                unknown.append(_describe_unknown(key, kinds))
                continue
            if value is None:
                continue
            kind, _ = kinds[name]
            kwargs[name] = _parse(key, value, kind)
        if unknown:
            warnings.warn(
                "unknown consumer properties ignored: " + ", ".join(sorted(unknown)),
                UnknownConfigWarning,
                stacklevel=2,
            )
        required = ["group.id"]
        if kwargs.get("group_coordinator", "zookeeper") == "zookeeper":
            required.append("zookeeper.connect")
        for key in required:
            if key.replace(".", "_") not in kwargs:
                raise InvalidConfigError(key, "missing required property")
        return cls(**kwargs)

    def to_properties(self) -> dict[str, str]:
        """Return the config as dotted keys and string values: the inverse of ``from_properties``.

        Keys left unset (``None``, e.g. ``client.id`` when it follows ``group.id``) are left
        out, so ``ConsumerConfig.from_properties(c.to_properties()) == c``.

        Returns:
            Dotted key to value: ints in decimal, booleans as ``"true"``/``"false"``, in the
            order of the attributes.
        """
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or (f.name in _OBJECT_FIELDS and not isinstance(value, str)):
                continue
            key = f.name.replace("_", ".")
            if isinstance(value, bool):
                out[key] = "true" if value else "false"
            else:
                out[key] = str(value)
        return out

    def replace(self, **changes: Any) -> Self:
        """Return a copy with ``changes`` applied (``dataclasses.replace``), validated anew.

        Args:
            **changes: attribute name (underscored, ``group_id``) to new value.

        Returns:
            The new config; unset derived keys (``client_id`` ...) follow the new values.

        Raises:
            InvalidConfigError: when the result fails a check of :class:`ConsumerConfig`.
            TypeError: when a name is not an attribute.
        """
        return dataclasses.replace(self, **changes)


def _field_kinds(cls: type[ConsumerConfig]) -> dict[str, tuple[type, bool]]:
    """Map each attribute to its base type (int, bool or str) and whether ``None`` is allowed."""
    kinds: dict[str, tuple[type, bool]] = {}
    for name, hint in typing.get_type_hints(cls).items():
        if name in _OBJECT_FIELDS:
            continue  # objects from code (an SSLContext, a token provider): no properties key
        if isinstance(hint, types.UnionType):
            (base,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
            kinds[name] = (base, True)
        else:
            kinds[name] = (hint, False)
    return kinds


_FIELD_KINDS = _field_kinds(ConsumerConfig)
_ALL_FIELDS = frozenset(f.name for f in dataclasses.fields(ConsumerConfig))
_SECRET_FIELDS = frozenset(key.replace(".", "_") for key in SECRET_KEYS)

_dataclass_init = ConsumerConfig.__init__


def _init(self: ConsumerConfig, **kwargs: Any) -> None:
    # An unknown keyword is a config error naming the key (and the nearest known one), not
    # the TypeError of the generated __init__.
    _reject_unknown_keywords(kwargs)
    if "group_id" not in kwargs:
        raise InvalidConfigError("group.id", "missing required property")
    _dataclass_init(self, **kwargs)


_init.__doc__ = _dataclass_init.__doc__
_init.__signature__ = inspect.signature(_dataclass_init)  # type: ignore[attr-defined]
ConsumerConfig.__init__ = _init  # type: ignore[method-assign]


def _describe_unknown(key: object, kinds: Mapping[str, tuple[type, bool]]) -> str:
    text = key if isinstance(key, str) else repr(key)
    if isinstance(key, str) and "_" in key and key in kinds:
        return f"{text} (did you mean {key.replace('_', '.')}?)"
    near = nearest_key(key) if isinstance(key, str) else None
    return f"{text} (did you mean {near}?)" if near else text


def nearest_key(key: str) -> str | None:
    """The known dotted property key closest to a misspelt one (``difflib``), or ``None``.

    Args:
        key: a dotted (``zookeeper.conect``) or attribute (``zookeeper_conect``) spelling.

    Returns:
        The dotted key it most likely means, when one is close enough (ratio >= 0.75).
    """
    dotted = key.replace("_", ".")
    known = [name.replace("_", ".") for name in _FIELD_KINDS]
    found = difflib.get_close_matches(dotted, known, n=1, cutoff=0.75)
    return found[0] if found else None


def _reject_unknown_keywords(kwargs: Mapping[str, object]) -> None:
    unknown = sorted(set(kwargs) - _ALL_FIELDS)
    if unknown:
        name = unknown[0]
        near = nearest_key(name)
        hint = f"; did you mean {near.replace('.', '_')}?" if near else ""
        raise InvalidConfigError(
            name.replace("_", "."), f"unknown consumer property {name!r}{hint}"
        )


def _parse(key: str, value: object, kind: type) -> object:
    """Read one property value as ``kind``; values that are not strings pass through."""
    if not isinstance(value, str) or kind is str:
        return value
    text = value.strip()
    if kind is bool:
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise InvalidConfigError(
                key, f"boolean values must be either 'true' or 'false', got {value!r}"
            )
        return lowered == "true"
    if not _INT_TEXT.fullmatch(text):
        raise InvalidConfigError(key, f"must be an integer, got {value!r}")
    return int(text)


_KIND_NAMES = {int: "an int", bool: "a bool", str: "a str"}


def _check_type(name: str, value: object, kind: type, optional: bool) -> None:
    if value is None and optional:
        return
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        wanted = _KIND_NAMES[kind] + (" or None" if optional else "")
        shown = REDACTED if name in _SECRET_FIELDS else repr(value)
        raise InvalidConfigError(
            name.replace("_", "."),
            f"must be {wanted}, got {shown} ({type(value).__name__})",
        )


def _check_range(key: str, value: int, minimum: int, *, extra: str = "") -> None:
    if not minimum <= value <= _INT32_MAX:
        raise InvalidConfigError(
            key, f"must be between {minimum} and {_INT32_MAX}{extra}, got {value}"
        )


def kafka_security_from_properties(props: Mapping[str, str] | None) -> KafkaSecurity:
    """The Kafka connection security given by Java-client dotted keys.

    For the tools that take a ``--command-config`` file or Spark options: only
    ``security.protocol``, ``ssl.*``, ``sasl.*`` and ``reconnect.backoff.max.ms`` are read,
    with the rules of :class:`ConsumerConfig`; other keys are ignored here.

    Args:
        props: dotted keys to string values; ``None`` or empty means plaintext.

    Returns:
        The security of every connection to open.

    Raises:
        InvalidConfigError: a security key is wrong, as :class:`ConsumerConfig` would say.
    """
    from aiozkconsumer.security import KafkaSecurity

    wanted = {
        k: v
        for k, v in (props or {}).items()
        if k.startswith(("ssl.", "sasl.", "security.")) or k == "reconnect.backoff.max.ms"
    }
    if not wanted:
        return KafkaSecurity()
    # Only the security keys are checked: the required keys of a group are filled in.
    wanted.update({"group.id": "g", "group.coordinator": "kafka", "bootstrap.servers": "x:1"})
    return KafkaSecurity.from_config(ConsumerConfig.from_properties(wanted))


def zookeeper_security_from_properties(props: Mapping[str, str] | None) -> ZookeeperSecurity:
    """The ZooKeeper connection security given by dotted keys (a ``--zk-tls-config-file``).

    Reads ``zookeeper.auth``, ``zookeeper.set.acl`` and ``zookeeper.ssl.*`` (the names Kafka's
    own ZooKeeper client uses where they fit) with the rules of :class:`ConsumerConfig`; other
    keys are ignored here.

    Args:
        props: dotted keys to string values; ``None`` or empty means none.

    Returns:
        The security of ZooKeeper connections.

    Raises:
        InvalidConfigError: a key is wrong, as :class:`ConsumerConfig` would say.
    """
    from aiozkconsumer.security import ZookeeperSecurity

    wanted = {k: v for k, v in (props or {}).items() if k.startswith("zookeeper.")}
    wanted = {k: v for k, v in wanted.items() if k.split(".")[1] in ("auth", "set", "ssl")}
    if not wanted:
        return ZookeeperSecurity()
    wanted.update({"group.id": "g", "zookeeper.connect": "x:1"})
    return ZookeeperSecurity.from_config(ConsumerConfig.from_properties(wanted))


def _check_legal_chars(key: str, value: str) -> None:
    # Kafka's validateChars accepts "", which for group.id makes /consumers/ the group dir.
    if not _LEGAL_CHARS.fullmatch(value):
        what = "must not be empty" if not value else f"{value!r} is illegal"
        raise InvalidConfigError(key, f"{what}; allowed characters are {_LEGAL_CHARS_TEXT}")


def _check_host_ports(key: str, value: str) -> None:
    if not value:
        raise InvalidConfigError(key, "must not be empty; expected host:port[,host:port...]")
    for entry in value.split(","):
        host, colon, port = entry.rpartition(":")
        if not colon or not host:
            raise InvalidConfigError(
                key, f"{entry!r} is not host:port (in {value!r}); expected host:port[,host:port...]"
            )
        if not (_HOSTNAME.fullmatch(host) or _IPV6_LITERAL.fullmatch(host)):
            raise InvalidConfigError(
                key,
                f"{host!r} is not a valid host (in {value!r}); use a hostname, an IPv4 "
                f"address or an IPv6 address in brackets ([::1]:2181)",
            )
        if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise InvalidConfigError(
                key, f"port {port!r} of {entry!r} must be a number from 1 to 65535"
            )


def validate_group_id(value: str) -> str:
    """Check a ``group.id``: the rule of :class:`ConsumerConfig`, also used by the CLI.

    As ``kafka.common.Config.validateChars`` (0.10.2): ``[a-zA-Z0-9._-]+``; stricter than the
    original, the empty string, ``.`` and ``..`` are refused (the group's node
    ``/consumers/<group>`` could not exist).

    Args:
        value: the group id.

    Returns:
        ``value``, unchanged.

    Raises:
        InvalidConfigError: ``key`` ``"group.id"``; the message says what is wrong.
    """
    key = "group.id"
    if value in (".", "..") or "/" in value or "\x00" in value:
        raise InvalidConfigError(
            key,
            f"{value!r} cannot be a ZooKeeper path element; allowed characters are "
            f"{_LEGAL_CHARS_TEXT} (and not '.' or '..' alone)",
        )
    _check_legal_chars(key, value)
    return value


def validate_bootstrap_servers(value: str) -> str:
    """Check a ``bootstrap.servers`` list: the rule of :class:`ConsumerConfig`, also the CLI's.

    ``host:port[,host:port...]``: each host a hostname, an IPv4 address or an IPv6 address
    in brackets (``[::1]:9092``), each port 1..65535.

    Args:
        value: the list.

    Returns:
        ``value``, unchanged.

    Raises:
        InvalidConfigError: ``key`` ``"bootstrap.servers"``: empty, an entry without a port,
            a bad host or port.
    """
    _check_host_ports("bootstrap.servers", value)
    return value


def validate_zookeeper_connect(value: str) -> str:
    """Check a ``zookeeper.connect`` string: the rule of :class:`ConsumerConfig`, also the CLI's.

    ``host:port[,host:port...][/chroot]`` as :func:`validate_bootstrap_servers` for the hosts;
    the chroot an absolute ZooKeeper path (``PathUtils.validatePath``; ``/`` means none).

    Args:
        value: the connect string.

    Returns:
        ``value``, unchanged.

    Raises:
        InvalidConfigError: ``key`` ``"zookeeper.connect"``: empty, ``foo`` (no port),
            ``host:notaport``, a bad host or chroot.
    """
    key = "zookeeper.connect"
    if not value:
        raise InvalidConfigError(
            key, "must not be empty; expected host:port[,host:port...][/chroot]"
        )
    hosts, slash, path = value.partition("/")
    _check_host_ports(key, hosts)
    if not slash or not path:
        return value
    # As ZooKeeper's PathUtils.validatePath, which the chroot has to pass.
    segments = path.split("/")
    if any(seg in ("", ".", "..") for seg in segments):
        raise InvalidConfigError(
            key,
            f"chroot {slash + path!r} is not a valid ZooKeeper path: it must start with '/' and "
            f"have no empty, '.' or '..' segments and no trailing '/'",
        )
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in path):
        raise InvalidConfigError(key, f"chroot {slash + path!r} contains a control character")
    return value
