"""Consumer configuration: the old consumer's property keys, defaults and validation.

:class:`ConsumerConfig` holds one attribute per property key of Kafka's old ZooKeeper-based
consumer (``kafka.consumer.ConsumerConfig`` + ``ZKConfig``, 0.10.2), with dots turned into
underscores and the original defaults. Values are checked once, at construction, and every
failure is an :class:`~aiozkconsumer.errors.InvalidConfigError` naming the dotted key.
:meth:`ConsumerConfig.from_properties` reads the original dotted keys with string values, as a
``consumer.properties`` file holds them; :meth:`ConsumerConfig.to_properties` is its inverse.

This module declares the keys (the dataclass, its defaults and the ``Attributes:`` reference
``docs/configuration.md`` is generated from) and the values derived from them; the rules live
apart, each one job and pure: :mod:`aiozkconsumer.config_keys` (dotted keys and attributes,
aliases, secrets, reading a properties mapping), :mod:`aiozkconsumer.config_rules` (each value's
type, range and syntax, the rules tying keys together, the validators the CLI shares) and
:mod:`aiozkconsumer.config_security` (the security keys).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from aiozkconsumer.config_keys import (
    OBJECT_FIELDS,
    SECRET_FIELDS,
    UnknownConfigWarning,
    closest_key,
    field_kinds,
    kwargs_from_properties,
    properties_of,
    reject_unknown_keywords,
)
from aiozkconsumer.config_keys import REDACTED as REDACTED
from aiozkconsumer.config_keys import SECRET_KEYS as SECRET_KEYS
from aiozkconsumer.config_rules import (
    check_type,
    check_values,
    validate_bootstrap_servers,
    validate_group_id,
    validate_zookeeper_connect,
)
from aiozkconsumer.config_security import check_kafka_security, check_zookeeper_security
from aiozkconsumer.errors import InvalidConfigError

if typing.TYPE_CHECKING:
    from aiozkconsumer.security import KafkaSecurity, ZookeeperSecurity

__all__ = [
    "DEFAULT_QUEUED_MAX_MESSAGES_KBYTES",
    "ConsumerConfig",
    "UnknownConfigWarning",
    "kafka_security_from_properties",
    "zookeeper_security_from_properties",
    "nearest_key",
    "validate_bootstrap_servers",
    "validate_group_id",
    "validate_zookeeper_connect",
]

DEFAULT_QUEUED_MAX_MESSAGES_KBYTES = 16384
"""Each stream's default budget of fetched, unread data, KiB, when no queue bound is set
(``queued.max.messages.kbytes``); chosen by ``benchmarks/throughput.py`` (docs/configuration.md)."""


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
        fetch_io_thread_enable: ``fetch.io.thread.enable``, new, default ``False``. With
            ``True`` each fetch loop's connection is a blocking socket served by a worker
            thread of its own (``anyio.to_thread``): the kernel's receive copy, the TLS
            decryption and the record batches' CRC-32C run there with the GIL released, and
            the event loop gets each fetch response with its record sets parsed and checked.
            With ``False`` the connection is an asyncio protocol on the event loop's thread.
            Either way the same requests are sent and the same backpressure and memory budget
            apply. Off by default: on a busy two-core machine it measured no faster (the
            thread waits for the GIL each time it takes back a received buffer while the loop
            decodes records, about every 16 KiB over TLS); it can help where a core is idle.
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
        queued_max_message_chunks: ``queued.max.message.chunks``, default ``None`` (no chunk
            bound), >= 1. Capacity, in fetched chunks (fetches of one partition, each up to
            ``fetch.message.max.bytes``), of each stream's queue. Set alone, it is the only
            bound, as in the original (whose default was 2).
        queued_max_messages_kbytes: ``queued.max.messages.kbytes`` (librdkafka's name), KiB,
            default ``None`` = 16384 (16 MiB) unless ``queued.max.message.chunks`` is set,
            >= 1 (``effective_queued_max_messages_kbytes``). Budget of each stream for fetched
            data not yet read: queued chunks count their actual bytes, fetches in flight a
            whole ``fetch.message.max.bytes`` per partition asked for; the fetcher asks for a
            partition only while its stream has room, and at least one fetch goes out while
            a stream holds nothing. Per stream, not per partition as in librdkafka.
        rebalance_max_retries: ``rebalance.max.retries``, default 4, >= 1. Rebalance attempts
            before ``ConsumerRebalanceFailedError``; an attempt lost to the ZooKeeper
            connection, or planned again because the membership changed while it claimed,
            is not counted.
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
        partition_assignment_strategy: ``partition.assignment.strategy``, default ``None`` =
            ``"range"`` with ZooKeeper coordination, ``"range,cooperative-sticky"`` (the Java
            client's default) with ``group.coordinator=kafka`` and the classic protocol
            (:attr:`assignment_strategies`). With ZooKeeper: ``"range"`` or ``"roundrobin"``
            (validated since 0.9.0, KAFKA-2032). With ``group.coordinator=kafka`` (classic
            protocol), the Java client's list of assignors in order of preference,
            comma-separated: ``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky`` or
            their Java class names (``org.apache.kafka.clients.consumer.CooperativeStickyAssignor``
            ...), kept as the comma-joined names. A member whose assignors are all
            ``cooperative-sticky`` rebalances cooperatively (KIP-429: it keeps its partitions
            through a rebalance and gives up only those that move); any other list is eager,
            as the Java client's ``ConsumerCoordinator`` decides. The default list is eager
            too (the group picks ``range`` while every member offers it) and lets the member
            join a group of Java members that moved to ``cooperative-sticky`` alone (the
            second bounce of the Java client's upgrade to cooperative rebalancing).
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
            (``zookeeper`` with ``zookeeper.poll.liveness.enable``): poll liveness: a member
            whose stream's reader holds a record or batch this long without asking for the
            next leaves the group (after committing) and rejoins when it reads again, as the
            Java client; also sent as JoinGroup's rebalance
            timeout (how long the coordinator waits for every member to rejoin); with
            ``group.protocol=consumer``, the time the broker gives this member to revoke
            partitions it takes away.
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
        group_instance_id: ``group.instance.id``, the Java client's, default ``None``: dynamic
            membership. ``group.coordinator=kafka`` only: this member's static identity in the
            group (KIP-345), on both group protocols. A static member that closes does not
            leave the group (no LeaveGroup; with ``group.protocol=consumer`` it leaves with
            member epoch -2, which keeps its assignment), so a member restarted with the same
            id within the session timeout gets its partitions back without a rebalance, as
            the Java client's (``AbstractCoordinator.maybeLeaveGroup``,
            ``ConsumerMembershipManager.leaveGroupEpoch``); a member that stays away longer is
            removed when its session times out. Two live members must never share an id:
            the coordinator fences one (``FencedInstanceIdError``; with
            ``group.protocol=consumer`` the second is refused, ``UnreleasedInstanceIdError``).
            As ``JoinGroupRequest.validateGroupInstanceId``: 1 to 249 ASCII alphanumerics,
            ``'.'``, ``'_'`` and ``'-'``, not ``"."`` nor ``".."``.
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
        zookeeper_poll_liveness_enable: ``zookeeper.poll.liveness.enable``, new, default
            ``False`` (the original had no such check); ``group.coordinator=zookeeper`` only.
            ``True``: poll liveness with ``max.poll.interval.ms``: a member whose stream's
            reader holds a record or batch that long without asking for the next commits its
            consumed offsets (auto-commit on), logs one WARNING naming the stream and the
            interval, gives its partitions up and deletes its registration node
            (``/consumers/<group>/ids/<consumer id>``), so the other members rebalance and
            take them; it registers again and rebalances back in when the reader asks for
            records again. Kafka-coordinated members always apply ``max.poll.interval.ms``.
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
            consumer runs in, sent with every fetch (Fetch v11+, KIP-392). Brokers with a
            ``replica.selector.class`` (e.g. Kafka's ``RackAwareReplicaSelector`` and a
            ``broker.rack`` each) then name a replica in this rack as a partition's preferred
            read replica, and the partition is fetched from it, as by the Java client: for
            ``metadata.max.age.ms`` (5 minutes) before asking the leader again, and from the
            leader at once when the replica leaves the metadata or answers with an error
            (``OFFSET_OUT_OF_RANGE`` from it is retried at the leader, not reset). Without
            it, or with brokers that name no replica, every partition is fetched from its
            leader.
        metadata_max_age_ms: ``metadata.max.age.ms``, the Java client's, ms, default
            300000, >= 1: how long a preferred read replica (``client.rack``) is followed
            before the leader is asked again (the Java client's
            ``preferredReadReplicaExpirationTimeMs``); and, with
            ``group.coordinator=kafka``, how often the subscribed topics' metadata is
            refreshed to find added partitions and, for a pattern, new matching topics, then
            rejoin (the Java client's periodic metadata refresh; ``KafkaConsumer.subscribe``).
            Each refresh decodes the metadata of every subscribed partition (about 35 ms of
            CPU per 1,000 partitions). A ZooKeeper-coordinated member learns of both from
            ZooKeeper watches at once (on a KRaft cluster: Kafka metadata every 5 s).
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
    fetch_io_thread_enable: bool = False
    check_crcs: bool = True
    crc_error_action: str = "raise"
    auto_commit_enable: bool = True
    auto_commit_interval_ms: int = 60000
    queued_max_message_chunks: int | None = None
    queued_max_messages_kbytes: int | None = None
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
    partition_assignment_strategy: str | None = None
    bootstrap_servers: str | None = None
    cluster_metadata_source: str = "auto"
    group_coordinator: str = "zookeeper"
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000
    group_protocol: str = "classic"
    group_remote_assignor: str | None = None
    group_instance_id: str | None = None
    interceptor_classes: str | None = None
    offsets_malformed_reset: bool = False
    zookeeper_poll_liveness_enable: bool = False
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
    metadata_max_age_ms: int = 300_000
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
            if value is not None and f.name in SECRET_FIELDS:
                parts.append(f"{f.name}={REDACTED!r}")
            elif value is not None and f.name in OBJECT_FIELDS:
                parts.append(f"{f.name}=<{type(value).__name__}>")
            else:
                parts.append(f"{f.name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def __post_init__(self) -> None:
        for name, (kind, optional) in _FIELD_KINDS.items():
            check_type(name, getattr(self, name), kind, optional)
        check_values(self)
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

    @property
    def effective_queued_max_messages_kbytes(self) -> int | None:
        """Each stream's byte budget in KiB: ``queued.max.messages.kbytes`` when set, else
        ``None`` (no byte bound) when ``queued.max.message.chunks`` is set, else 16384."""
        if self.queued_max_messages_kbytes is not None:
            return self.queued_max_messages_kbytes
        if self.queued_max_message_chunks is not None:
            return None
        return DEFAULT_QUEUED_MAX_MESSAGES_KBYTES

    @property
    def assignment_strategies(self) -> tuple[str, ...]:
        """``partition.assignment.strategy`` in force, as the list of assignor names in order:
        when unset, ``("range", "cooperative-sticky")`` (the Java client's default) for a
        Kafka-coordinated classic group, ``("range",)`` otherwise (the original's)."""
        if self.partition_assignment_strategy is not None:
            return tuple(self.partition_assignment_strategy.split(","))
        if self.group_coordinator == "kafka" and self.group_protocol == "classic":
            return ("range", "cooperative-sticky")
        return ("range",)

    @property
    def consumer_protocol(self) -> bool:
        """Whether the group uses the KIP-848 consumer protocol (``group.protocol=consumer``)."""
        return self.group_protocol == "consumer"

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
        return cls(**kwargs_from_properties(props, _FIELD_KINDS, stacklevel=2))

    def to_properties(self) -> dict[str, str]:
        """Return the config as dotted keys and string values: the inverse of ``from_properties``.

        Keys left unset (``None``, e.g. ``client.id`` when it follows ``group.id``) are left
        out, so ``ConsumerConfig.from_properties(c.to_properties()) == c``.

        Returns:
            Dotted key to value: ints in decimal, booleans as ``"true"``/``"false"``, in the
            order of the attributes.
        """
        return properties_of(self)

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


_FIELD_KINDS = field_kinds(ConsumerConfig)
_ALL_FIELDS = frozenset(f.name for f in dataclasses.fields(ConsumerConfig))

_dataclass_init = ConsumerConfig.__init__


def _init(self: ConsumerConfig, **kwargs: Any) -> None:
    # An unknown keyword is a config error naming the key (and the nearest known one), not
    # the TypeError of the generated __init__.
    reject_unknown_keywords(kwargs, _ALL_FIELDS, _FIELD_KINDS)
    if "group_id" not in kwargs:
        raise InvalidConfigError("group.id", "missing required property")
    _dataclass_init(self, **kwargs)


_init.__doc__ = _dataclass_init.__doc__
_init.__signature__ = inspect.signature(_dataclass_init)  # type: ignore[attr-defined]
ConsumerConfig.__init__ = _init  # type: ignore[method-assign]


def nearest_key(key: str) -> str | None:
    """The known dotted property key closest to a misspelt one (``difflib``), or ``None``.

    Args:
        key: a dotted (``zookeeper.conect``) or attribute (``zookeeper_conect``) spelling.

    Returns:
        The dotted key it most likely means, when one is close enough (ratio >= 0.75).
    """
    return closest_key(key, _FIELD_KINDS)


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
