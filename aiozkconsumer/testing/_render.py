"""What the local cluster writes before it starts a server: config texts and command lines.

Pure functions (values in, text or argument lists out), except :func:`read_cluster_id`, which
reads a formatted KRaft log directory. ZooKeeper gets ``zoo.cfg`` and a log4j 1 config; a
Kafka 3.9 broker (ZooKeeper mode) ``server.properties`` and log4j 1; a Kafka 4.x node (KRaft)
``server.properties``, log4j2 and a ``kafka-storage format`` command run before its first
start.

A secured cluster (:mod:`aiozkconsumer.testing.security`) adds, per broker, the secured
listeners to the listener properties and :func:`security_properties` (TLS key stores, SASL
JAAS per listener and mechanism) to ``server.properties``; a request log to the broker's log
config; SCRAM users to the KRaft format command (:func:`scram_format_arguments`); and a TLS
port and a digest super user to ZooKeeper (:func:`zookeeper_security_config`,
:func:`zookeeper_security_options`).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from aiozkconsumer.testing._processes import HOST
from aiozkconsumer.testing.security import (
    ADMIN_USER,
    LISTENER_PROTOCOLS,
    SASL_MECHANISMS,
    SCRAM_MECHANISMS,
    ClusterSecurity,
    SecurityMaterial,
    zookeeper_digest,
)

__all__ = [
    "COMMON_BROKER_PROPERTIES",
    "KRAFT_CONTROLLER_ID",
    "LinkEndpoint",
    "broker_command",
    "kraft_broker_properties",
    "listener_properties",
    "log4j2_option",
    "log4j2_properties",
    "log4j_option",
    "log4j_properties",
    "new_cluster_id",
    "properties",
    "read_cluster_id",
    "scram_format_arguments",
    "security_properties",
    "storage_format_command",
    "zk_broker_properties",
    "zookeeper_command",
    "zookeeper_config",
    "zookeeper_security_config",
    "zookeeper_security_options",
]

# The brokers' ZooKeeper session timeout. Kafka's default (18 s) is capped by ZooKeeper's
# maxSessionTimeout (20 x tickTime); 6 s keeps "restart a SIGKILLed broker" (which has to
# wait for the dead broker's registration to expire) short.
_BROKER_ZK_SESSION_TIMEOUT_MS = 6000
# KRaft's equivalent: the controller fences a broker that has not heartbeated for this long
# (default 9 s). A restarted broker cannot register again before its old session expires,
# even after a clean shutdown, and a controlled shutdown waits for a heartbeat round trip
# (default interval 2 s): short values keep restart_broker() and stop() short.
_KRAFT_BROKER_SESSION_TIMEOUT_MS = 4000
_KRAFT_BROKER_HEARTBEAT_INTERVAL_MS = 500
KRAFT_CONTROLLER_ID = 0
"""KRaft: the node that is also the (single) metadata quorum controller."""

_ZK_JVM = ["-Xms64m", "-Xmx256m"]
_BROKER_JVM = ["-Xms256m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]
_COMMON_JVM = ["-XX:-UsePerfData", "-Djava.awt.headless=true"]
# Short-lived tools (kafka-storage format): C1 only starts faster.
_TOOL_JVM = ["-Xms64m", "-Xmx256m", "-XX:TieredStopAtLevel=1"]
_FOUR_LETTER_WORDS = "ruok,srvr,stat"

_INTERNAL_LISTENER = "INTERNAL"

COMMON_BROKER_PROPERTIES: Mapping[str, object] = {
    "num.partitions": 1,
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 4,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 4,
    "group.initial.rebalance.delay.ms": 0,
    "auto.create.topics.enable": "false",
    # 2-core machines: fewer threads than the defaults (3 network, 8 I/O).
    "num.network.threads": 2,
    "num.io.threads": 4,
    "num.recovery.threads.per.data.dir": 1,
}
"""``server.properties`` entries shared by both flavours (a single-replica test cluster)."""

RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
"""The broker's ``replica.selector.class`` that names a replica in the consumer's rack as its
preferred read replica (KIP-392)."""


def rack_properties(rack: str) -> dict[str, str]:
    """``server.properties`` entries of a broker in ``rack`` that lets consumers fetch from
    the replica closest to them (``broker.rack`` and the rack-aware replica selector)."""
    return {"broker.rack": rack, "replica.selector.class": RACK_AWARE_SELECTOR}


LinkEndpoint = tuple[str, str, int]
"""A broker's listener for one proxied link: ``(listener name, advertised address, port)``,
the address being the link's proxy and the port the broker's real listening port."""


def properties(values: Mapping[str, object]) -> str:
    """A Java ``.properties`` text, one ``key=value`` line per entry, in order."""
    return "".join(f"{key}={value}\n" for key, value in values.items())


def log4j_properties(log_file: Path, request_log: Path | None = None) -> str:
    """A log4j 1 configuration (ZooKeeper, Kafka 3.9) appending to ``log_file``.

    Args:
        log_file: where everything goes.
        request_log: if given, ``kafka.request.logger`` logs at DEBUG (one line per
            completed request, with its principal and listener) into this file only.
    """
    values: dict[str, object] = {
        "log4j.rootLogger": "INFO, file",
        "log4j.appender.file": "org.apache.log4j.FileAppender",
        "log4j.appender.file.File": log_file,
        "log4j.appender.file.Append": "true",
        "log4j.appender.file.layout": "org.apache.log4j.PatternLayout",
        "log4j.appender.file.layout.ConversionPattern": "[%d] %p %m (%c)%n",
        "log4j.logger.kafka.request.logger": "WARN",
        "log4j.logger.kafka.authorizer.logger": "WARN",
        "log4j.logger.org.apache.zookeeper.audit": "WARN",
    }
    if request_log is not None:
        values.update(
            {
                "log4j.logger.kafka.request.logger": "DEBUG, requests",
                "log4j.additivity.kafka.request.logger": "false",
                "log4j.appender.requests": "org.apache.log4j.FileAppender",
                "log4j.appender.requests.File": request_log,
                "log4j.appender.requests.Append": "true",
                "log4j.appender.requests.layout": "org.apache.log4j.PatternLayout",
                "log4j.appender.requests.layout.ConversionPattern": "[%d] %m%n",
            }
        )
    return properties(values)


def log4j2_properties(log_file: Path, request_log: Path | None = None) -> str:
    """A log4j2 configuration (Kafka 4.x) with the same output as :func:`log4j_properties`.

    Args:
        log_file: where everything goes.
        request_log: as for :func:`log4j_properties`.
    """
    values: dict[str, object] = {
        "status": "warn",
        "appender.file.type": "File",
        "appender.file.name": "FILE",
        "appender.file.fileName": log_file,
        "appender.file.append": "true",
        "appender.file.layout.type": "PatternLayout",
        "appender.file.layout.pattern": "[%d] %p %m (%c)%n",
        "rootLogger.level": "INFO",
        "rootLogger.appenderRef.file.ref": "FILE",
        "logger.request.name": "kafka.request.logger",
        "logger.request.level": "WARN",
        "logger.authorizer.name": "kafka.authorizer.logger",
        "logger.authorizer.level": "WARN",
    }
    if request_log is not None:
        values.update(
            {
                "appender.requests.type": "File",
                "appender.requests.name": "REQUESTS",
                "appender.requests.fileName": request_log,
                "appender.requests.append": "true",
                "appender.requests.layout.type": "PatternLayout",
                "appender.requests.layout.pattern": "[%d] %m%n",
                "logger.request.level": "DEBUG",
                "logger.request.additivity": "false",
                "logger.request.appenderRef.requests.ref": "REQUESTS",
            }
        )
    return properties(values)


def log4j_option(config: Path) -> str:
    """The JVM option pointing log4j 1 at ``config``."""
    return f"-Dlog4j.configuration=file:{config}"


def log4j2_option(config: Path) -> str:
    """The JVM option pointing log4j2 at ``config``."""
    return f"-Dlog4j2.configurationFile={config}"


def new_cluster_id() -> str:
    """A random KRaft cluster id: 16 bytes, URL-safe base64 without padding (Kafka's ``Uuid``).

    Never starts with ``-`` (the storage tool would read it as an option), as Kafka's own
    ``Uuid.randomUuid`` avoids.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def read_cluster_id(meta_properties: Path) -> str | None:
    """The ``cluster.id`` of an already formatted log directory (None if not formatted)."""
    try:
        lines = meta_properties.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "cluster.id":
            return value.strip()
    return None


def zookeeper_config(
    tick_ms: int, data_dir: Path, port: int, extra: Mapping[str, object] | None = None
) -> str:
    """The ``zoo.cfg`` of the standalone ZooKeeper server.

    Args:
        tick_ms: ``tickTime``.
        data_dir: ``dataDir``.
        port: the plain client port.
        extra: more entries (:func:`zookeeper_security_config`).
    """
    return properties(
        {
            "tickTime": tick_ms,
            "dataDir": data_dir,
            "clientPort": port,
            "clientPortAddress": HOST,
            "maxClientCnxns": 0,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": _FOUR_LETTER_WORDS,
            # Test data: the page cache is durable enough (a killed process loses nothing),
            # and fsync per transaction would dominate rebalance latency.
            "forceSync": "no",
            **(extra or {}),
        }
    )


def zookeeper_security_config(
    secure_port: int, material: SecurityMaterial, options: ClusterSecurity
) -> dict[str, object]:
    """The ``zoo.cfg`` entries of ZooKeeper's TLS port (``secureClientPort``).

    The TLS port needs the Netty connection factory (the default NIO one has no TLS); it
    then serves the plain port too. ZooKeeper turns unknown ``zoo.cfg`` keys into
    ``zookeeper.<key>`` system properties, which is where its TLS settings
    (``zookeeper.ssl.*``) and auth providers (``zookeeper.authProvider.*``) are read from.
    ZooKeeper's PEM stores take the key and its certificate from one file.

    Args:
        secure_port: the TLS port.
        material: the cluster's key material.
        options: the cluster's security options (``zookeeper_client_auth``).
    """
    return {
        "secureClientPort": secure_port,
        "secureClientPortAddress": HOST,
        "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
        "ssl.keyStore.location": material.server_keystore_file,
        "ssl.keyStore.type": "PEM",
        "ssl.trustStore.location": material.ca_file,
        "ssl.trustStore.type": "PEM",
        "ssl.clientAuth": options.zookeeper_client_auth,
        # A client certificate authenticates its connection as x509:<subject DN>.
        "authProvider.x509": "org.apache.zookeeper.server.auth.X509AuthenticationProvider",
    }


def zookeeper_security_options(material: SecurityMaterial) -> list[str]:
    """JVM options of a secured cluster's ZooKeeper: the digest super user.

    A system property rather than a ``zoo.cfg`` entry: ``DigestAuthenticationProvider``
    reads it once, when the class loads.
    """
    digest = zookeeper_digest(material.zookeeper_super_user, material.zookeeper_super_password)
    return [f"-Dzookeeper.DigestAuthenticationProvider.superDigest={digest}"]


def zookeeper_command(
    java: str, libs: Path, log_config: Path, config: Path, jvm_options: Sequence[str] = ()
) -> list[str]:
    """The command line of the ZooKeeper server (``ZooKeeperServerMain`` from ``libs``).

    Args:
        java: the ``java`` executable.
        libs: the jar directory.
        log_config: the log4j 1 configuration.
        config: ``zoo.cfg``.
        jvm_options: more JVM options (:func:`zookeeper_security_options`).
    """
    return [
        java,
        *_ZK_JVM,
        *_COMMON_JVM,
        "-Dzookeeper.admin.enableServer=false",
        f"-Dzookeeper.4lw.commands.whitelist={_FOUR_LETTER_WORDS}",
        *jvm_options,
        log4j_option(log_config),
        "-cp",
        str(libs / "*"),
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(config),
    ]


def broker_command(
    java: str, libs: Path, logging_option: str, config: Path, heap: str = "512m"
) -> list[str]:
    """The command line of a Kafka broker (``kafka.Kafka`` from ``libs``).

    Args:
        logging_option: :func:`log4j_option` (Kafka 3.9) or :func:`log4j2_option` (4.x).
        heap: the JVM's maximum heap (``-Xmx``), e.g. ``"512m"``.
    """
    return [
        java,
        *_BROKER_JVM,
        f"-Xmx{heap}",
        *_COMMON_JVM,
        logging_option,
        "-cp",
        str(libs / "*"),
        "kafka.Kafka",
        str(config),
    ]


def storage_format_command(
    java: str,
    libs: Path,
    logging_option: str,
    config: Path,
    cluster_id: str,
    *,
    controller: bool,
    extra_arguments: Sequence[str] = (),
) -> list[str]:
    """The ``kafka-storage format`` command line of a KRaft node.

    The controller node is formatted ``--standalone`` (a single-voter dynamic quorum), the
    others ``--no-initial-controllers``; an already formatted log directory is left as it is
    (``--ignore-formatted``). ``extra_arguments`` go last (:func:`scram_format_arguments`).
    """
    return [
        java,
        *_TOOL_JVM,
        *_COMMON_JVM,
        logging_option,
        "-cp",
        str(libs / "*"),
        "kafka.tools.StorageTool",
        "format",
        "--cluster-id",
        cluster_id,
        "--config",
        str(config),
        "--ignore-formatted",
        "--standalone" if controller else "--no-initial-controllers",
        *extra_arguments,
    ]


def scram_format_arguments(passwords: Mapping[str, str]) -> list[str]:
    """``kafka-storage format`` arguments creating every user's SCRAM credentials.

    One ``--add-scram 'SCRAM-SHA-<n>=[name=<user>,password=<password>]'`` per user and
    mechanism: the records go into the bootstrap metadata, so the users exist as soon as
    the controller runs. Only the controller node's format needs them.
    """
    arguments: list[str] = []
    for user, password in passwords.items():
        for mechanism in SCRAM_MECHANISMS:
            arguments += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
    return arguments


def listener_properties(
    port: int, links: Sequence[LinkEndpoint], secure_ports: Mapping[str, int] | None = None
) -> dict[str, str]:
    """``listeners``, ``advertised.listeners``, the protocol map and the inter-broker
    listener of one broker.

    Without links: one ``PLAINTEXT`` listener on ``port``. With links: ``INTERNAL`` on
    ``port`` (direct, advertised as is, inter-broker), and per link a listener advertised
    at the link's proxy, ``PLAINTEXT`` (link 0) first, so that it is the endpoint clients
    reading ``/brokers/ids`` pick (the first PLAINTEXT one). The secured listeners come
    last, direct and advertised as they are.

    Args:
        port: the broker's own (direct) port.
        links: the broker's listener for each proxied link, by link index.
        secure_ports: a secured cluster's listener name -> port (names of
            :data:`~aiozkconsumer.testing.security.SECURE_LISTENERS`).
    """
    props = _plain_listener_properties(port, links)
    for name, secure_port in (secure_ports or {}).items():
        listener = f"{name}://{HOST}:{secure_port}"
        props["listeners"] += f",{listener}"
        props["advertised.listeners"] += f",{listener}"
        props["listener.security.protocol.map"] += f",{name}:{LISTENER_PROTOCOLS[name]}"
    return props


def _plain_listener_properties(port: int, links: Sequence[LinkEndpoint]) -> dict[str, str]:
    if not links:
        listener = f"PLAINTEXT://{HOST}:{port}"
        return {
            "listeners": listener,
            "advertised.listeners": listener,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
        }
    internal = f"{_INTERNAL_LISTENER}://{HOST}:{port}"
    advertised = [f"{name}://{address}" for name, address, _ in links]
    listening = [f"{name}://{HOST}:{real}" for name, _, real in links]
    protocols = [f"{name}:PLAINTEXT" for name in [_INTERNAL_LISTENER, *(n for n, _, _ in links)]]
    return {
        "listeners": ",".join([internal, *listening]),
        "advertised.listeners": ",".join([*advertised, internal]),
        "listener.security.protocol.map": ",".join(protocols),
        "inter.broker.listener.name": _INTERNAL_LISTENER,
    }


def security_properties(material: SecurityMaterial, options: ClusterSecurity) -> dict[str, str]:
    """``server.properties`` entries of the secured listeners (see
    :mod:`aiozkconsumer.testing.security`), the same for every broker.

    TLS: every SSL-based listener presents the server certificate from a PEM key store
    and trusts the CA; ``MTLS`` requires a client certificate and maps its subject to the
    principal ``User:<CN>``; ``SSL_WRONG_HOST`` presents the wrong-host certificate. SASL:
    ``SASL_SSL`` and ``SASL_PLAINTEXT`` enable every mechanism, with a JAAS config per
    listener and mechanism (the broker reads no JAAS file): PLAIN's users are its
    ``user_<name>`` options, SCRAM's live in the metadata (KRaft) or ZooKeeper, and
    OAUTHBEARER falls back to Kafka's unsecured JWT validator, as no validator class is
    configured.

    Args:
        material: the cluster's key material and passwords.
        options: the cluster's security options (``reauth_ms``).
    """
    props: dict[str, str] = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(material.server_keystore_file),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(material.ca_file),
        "listener.name.mtls.ssl.client.auth": "required",
        # STRING, not a list: the rule's commas stay in it.
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/,DEFAULT",
        "listener.name.ssl_wrong_host.ssl.keystore.location": str(
            material.wrong_host_keystore_file
        ),
    }
    admin_password = material.passwords[ADMIN_USER]
    plain_users = " ".join(f'user_{user}="{pw}"' for user, pw in material.passwords.items())
    # The username/password options are what the broker would send as a client (unused:
    # inter-broker traffic stays on PLAINTEXT), the user_<name> ones PLAIN's user table.
    jaas = {
        "plain": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{ADMIN_USER}" password="{admin_password}" {plain_users};',
        "scram-sha-256": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN_USER}" password="{admin_password}";',
        "scram-sha-512": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN_USER}" password="{admin_password}";',
        "oauthbearer": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
        f'required unsecuredLoginStringClaim_sub="{ADMIN_USER}";',
    }
    for listener in ("sasl_ssl", "sasl_plaintext"):
        prefix = f"listener.name.{listener}."
        props[f"{prefix}sasl.enabled.mechanisms"] = ",".join(SASL_MECHANISMS)
        for mechanism, config in jaas.items():
            props[f"{prefix}{mechanism}.sasl.jaas.config"] = config
        if options.reauth_ms is not None:
            props[f"{prefix}connections.max.reauth.ms"] = str(options.reauth_ms)
    return props


def zk_broker_properties(
    broker_id: int,
    port: int,
    links: Sequence[LinkEndpoint],
    zookeeper: str,
    data_dir: Path,
    overrides: Mapping[str, object],
    *,
    secure_ports: Mapping[str, int] | None = None,
    security: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """``server.properties`` of a Kafka 3.9 broker in ZooKeeper mode.

    Args:
        broker_id: its ``broker.id``.
        port: its direct port.
        links: its listener for each proxied link (see :func:`listener_properties`).
        zookeeper: the ``zookeeper.connect`` string.
        data_dir: its ``log.dirs``.
        overrides: entries replacing the defaults (the cluster's ``broker_properties``).
        secure_ports: a secured cluster's listener name -> port (None: not secured).
        security: a secured cluster's :func:`security_properties`.
    """
    props: dict[str, object] = {
        "broker.id": broker_id,
        **listener_properties(port, links, secure_ports),
        "zookeeper.connect": zookeeper,
        "zookeeper.session.timeout.ms": _BROKER_ZK_SESSION_TIMEOUT_MS,
        "log.dirs": data_dir,
        **COMMON_BROKER_PROPERTIES,
        # When the whole cluster stops, the controller goes away under the others'
        # controlled shutdown; the default 5 s retry backoff made stop() take ~11 s.
        "controlled.shutdown.retry.backoff.ms": 500,
        **(security or {}),
    }
    props.update(overrides)
    return props


def kraft_broker_properties(
    node_id: int,
    port: int,
    links: Sequence[LinkEndpoint],
    controller: str,
    data_dir: Path,
    overrides: Mapping[str, object],
    *,
    secure_ports: Mapping[str, int] | None = None,
    security: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """``server.properties`` of a Kafka 4.x node in KRaft mode.

    Node :data:`KRAFT_CONTROLLER_ID` is ``broker,controller`` with an extra ``CONTROLLER``
    listener at ``controller``; the others are brokers only. All find the quorum through
    ``controller.quorum.bootstrap.servers``.

    Args:
        node_id: its ``node.id``.
        port: its direct port.
        links: its listener for each proxied link (see :func:`listener_properties`).
        controller: ``"host:port"`` of the controller listener.
        data_dir: its ``log.dirs``.
        overrides: entries replacing the defaults (the cluster's ``broker_properties``).
        secure_ports: a secured cluster's listener name -> port (None: not secured).
        security: a secured cluster's :func:`security_properties`.
    """
    is_controller = node_id == KRAFT_CONTROLLER_ID
    listener_props = listener_properties(port, links, secure_ports)
    if not links:
        del listener_props["advertised.listeners"]
    if is_controller:
        listener_props["listeners"] += f",CONTROLLER://{controller}"
    listener_props["listener.security.protocol.map"] = (
        f"CONTROLLER:PLAINTEXT,{listener_props['listener.security.protocol.map']}"
    )
    props: dict[str, object] = {
        "process.roles": "broker,controller" if is_controller else "broker",
        "node.id": node_id,
        "controller.quorum.bootstrap.servers": controller,
        "controller.listener.names": "CONTROLLER",
        # Without proxied links advertised.listeners is left to default to listeners:
        # concrete loopback addresses, the controller's CONTROLLER one included
        # (KIP-853); with links, the controller listener is still taken from there.
        **listener_props,
        "broker.session.timeout.ms": _KRAFT_BROKER_SESSION_TIMEOUT_MS,
        "broker.heartbeat.interval.ms": _KRAFT_BROKER_HEARTBEAT_INTERVAL_MS,
        "log.dirs": data_dir,
        **COMMON_BROKER_PROPERTIES,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        **(security or {}),
    }
    props.update(overrides)
    return props
