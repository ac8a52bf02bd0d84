"""Integration tests of the secured listeners of aiozkconsumer.testing (real brokers, real TLS).

The cluster tests run on both flavours through ``any_secure_cluster``: Kafka 3.9 in
ZooKeeper mode (``secure_cluster``) and Kafka 4.x in KRaft mode (``secure_kraft_cluster``),
one session cluster each; ZooKeeper's TLS port is ``secure_cluster``'s only. Clients are
aiokafka's, configured from ``cluster.client_properties(...)`` the way a test of the consumer
would. Refusals are checked on a single connection, which shows the real cause where a
bootstrapping client only reports "unable to bootstrap": SASL ones with one
``aiokafka.conn.AIOKafkaConnection`` (OAUTHBEARER by hand: aiokafka does not read the broker's
error challenge), TLS ones with a blocking ``ssl`` socket (asyncio leaks the transport of a
failed handshake on Python 3.11, which the suite's ``error`` warning filter would turn into
failures of later tests).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import ssl
import struct
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.abc import AbstractTokenProvider
from aiokafka.conn import AIOKafkaConnection
from aiokafka.protocol.admin import SaslAuthenticateRequest, SaslHandShakeRequest
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import TopicPartition
from aiozk import ACL, ZKClient
from aiozk import exc as zk_exc
from aiozk.protocol import AuthRequest

from aiozkconsumer.testing import LocalCluster, LocalClusterError
from aiozkconsumer.testing._render import (
    properties,
    security_properties,
    zk_broker_properties,
)
from aiozkconsumer.testing.plugin import LOG_SECTION, _log_section
from aiozkconsumer.testing.security import (
    CLIENT_DN,
    SASL_MECHANISMS,
    ClusterSecurity,
    create_material,
    scram_credential,
    unsecured_jwt,
    zookeeper_digest,
)

pytestmark = pytest.mark.integration

_RECORDS = [(b"k%d" % i, b"secured-%d" % i) for i in range(3)]
_TIMEOUT_S = 30


class _JwtProvider(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka is untyped
    """An OAUTHBEARER token provider handing out one unsecured JWT."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def token(self) -> str:
        return self._token


def _aiokafka_options(props: Mapping[str, str], token: str | None = None) -> dict[str, Any]:
    """aiokafka's keyword arguments for the dotted properties of ``client_properties``."""
    options: dict[str, Any] = {
        "bootstrap_servers": props["bootstrap.servers"],
        "security_protocol": props["security.protocol"],
    }
    if "ssl.cafile" in props:
        context = ssl.create_default_context(cafile=props["ssl.cafile"])
        if "ssl.certfile" in props:
            context.load_cert_chain(props["ssl.certfile"], props["ssl.keyfile"])
        options["ssl_context"] = context
    mechanism = props.get("sasl.mechanism")
    if mechanism is not None:
        options["sasl_mechanism"] = mechanism
    if mechanism == "OAUTHBEARER":
        options["sasl_oauth_token_provider"] = _JwtProvider(token or unsecured_jwt("alice", 600))
    elif mechanism is not None:
        options["sasl_plain_username"] = props["sasl.username"]
        options["sasl_plain_password"] = props["sasl.password"]
    return options


async def _round_trip(cluster: LocalCluster, options: Mapping[str, Any]) -> None:
    """Produce a few records and read them back, both over the listener of ``options``."""
    topic = f"secured-{uuid.uuid4().hex[:12]}"
    await cluster.create_topic(topic, 1)  # over PLAINTEXT: the kit's own path
    producer = AIOKafkaProducer(acks="all", **options)
    async with asyncio.timeout(_TIMEOUT_S):
        await producer.start()
    try:
        for key, value in _RECORDS:
            await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(enable_auto_commit=False, **options)
    async with asyncio.timeout(_TIMEOUT_S):
        await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[tuple[bytes | None, bytes | None]] = []
        async with asyncio.timeout(_TIMEOUT_S):
            while len(got) < len(_RECORDS):
                batch = await consumer.getmany(tp, timeout_ms=500)
                got.extend((m.key, m.value) for m in batch.get(tp, []))
    finally:
        await consumer.stop()
    assert got == _RECORDS


@contextlib.asynccontextmanager
async def _connection(
    props: Mapping[str, str], **overrides: Any
) -> AsyncIterator[AIOKafkaConnection]:
    """One aiokafka connection to broker 0 (ApiVersions and SASL done), closed afterwards.

    Unlike ``create_conn`` this waits until the socket is really closed, also when
    connecting fails: a TLS transport closes a few loop iterations later, and one still
    open when the test's loop ends is a ResourceWarning (an error in this suite).
    """
    options = _aiokafka_options(props)
    options.update(overrides)
    host, port = options.pop("bootstrap_servers").split(",")[0].rsplit(":", 1)
    conn = AIOKafkaConnection(host, int(port), request_timeout_ms=10_000, **options)
    try:
        await conn.connect()
        yield conn
    finally:
        closed = conn.close()
        if closed is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_TIMEOUT_S):
                    await closed


async def _connect(props: Mapping[str, str], **overrides: Any) -> None:
    """Open and close one connection to broker 0 with ``props``; raise what it raises."""
    async with _connection(props, **overrides):
        pass


# ApiVersions v0, correlation id 7, client id "tls": the smallest request a broker answers.
_API_VERSIONS = struct.pack(">ihhih3s", 2 + 2 + 4 + 2 + 3, 18, 0, 7, 3, b"tls")


def _tls_request(address: str, context: ssl.SSLContext) -> int:
    """Send an ApiVersions request to a TLS listener over a blocking socket.

    Returns:
        The correlation id of the broker's answer.

    Raises:
        ssl.SSLError: if the handshake fails, or the broker rejects it with an alert (which
            TLS 1.3 delivers after the client's side of the handshake, so on the read).
    """
    host, port = address.split(",")[0].rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as sock,
    ):
        sock.sendall(_API_VERSIONS)
        header = b""
        while len(header) < 8:
            chunk = sock.recv(8 - len(header))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            header += chunk
    _, correlation_id = struct.unpack(">ii", header)
    return int(correlation_id)


async def _oauth_authenticate(cluster: LocalCluster, token: str) -> tuple[bytes, int]:
    """Authenticate with OAUTHBEARER on SASL_PLAINTEXT, by hand (RFC 7628 messages).

    Returns:
        The broker's answer to the token (b"" if accepted, else its JSON error challenge)
        and the error code of the exchange (0 if authenticated; then a metadata request
        has been answered too).
    """
    # PLAINTEXT as far as aiokafka knows: it then leaves the SASL exchange to us.
    plain = {"bootstrap.servers": cluster.bootstrap_servers_for("SASL_PLAINTEXT")}
    async with _connection(plain | {"security.protocol": "PLAINTEXT"}) as conn:
        handshake = await conn.send(SaslHandShakeRequest("OAUTHBEARER"))
        assert handshake.error_code == 0, handshake
        first = await conn.send(
            SaslAuthenticateRequest(b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01")
        )
        if first.error_code == 0 and not first.sasl_auth_bytes:
            await conn.send(MetadataRequest([], False))
            return b"", 0
        # An error challenge: the client acknowledges it with %x01, the broker then fails.
        final = await conn.send(SaslAuthenticateRequest(b"\x01"))
        return bytes(first.sasl_auth_bytes), int(final.error_code)


def _jwt_claims(token: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    header, claims, signature = token.split(".")

    def decode(part: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
        return data

    return decode(header), decode(claims), signature


def _tls_four_letter_word(address: str, context: ssl.SSLContext, word: bytes) -> bytes:
    host, port = address.rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as sock,
    ):
        sock.sendall(word)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


# ---- listeners that work -------------------------------------------------------------------


async def test_ssl_listener_serves_clients_that_trust_the_ca(
    any_secure_cluster: LocalCluster,
) -> None:
    cluster = any_secure_cluster
    props = cluster.client_properties("SSL")
    assert props == {
        "bootstrap.servers": cluster.bootstrap_servers_for("SSL"),
        "security.protocol": "SSL",
        "ssl.cafile": str(cluster.security.ca_file),
    }
    await _round_trip(cluster, _aiokafka_options(props))
    # Server-side TLS only: the connection has no identity of its own.
    await cluster.wait_for_principal("User:ANONYMOUS", listener="SSL")


async def test_mtls_listener_needs_the_client_certificate(
    any_secure_cluster: LocalCluster,
) -> None:
    cluster = any_secure_cluster
    props = cluster.client_properties("MTLS")
    assert props["security.protocol"] == "SSL"
    assert Path(props["ssl.certfile"]) == cluster.security.client_cert_file
    assert Path(props["ssl.keyfile"]) == cluster.security.client_key_file
    await _round_trip(cluster, _aiokafka_options(props))
    # The certificate's CN=alice becomes the principal (ssl.principal.mapping.rules).
    await cluster.wait_for_principal(cluster.security.mtls_principal, listener="MTLS")
    assert cluster.security.mtls_principal == "User:alice"

    address = cluster.bootstrap_servers_for("MTLS")
    assert _tls_request(address, cluster.security.client_ssl_context(client_cert=True)) == 7
    with pytest.raises(ssl.SSLError, match="BAD_CERTIFICATE|CERTIFICATE_REQUIRED"):
        _tls_request(address, cluster.security.client_ssl_context())


@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
async def test_sasl_ssl_authenticates_every_mechanism(
    any_secure_cluster: LocalCluster, mechanism: str
) -> None:
    cluster = any_secure_cluster
    props = cluster.client_properties("SASL_SSL", mechanism)
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == mechanism
    if mechanism == "OAUTHBEARER":
        assert "sasl.username" not in props and "sasl.password" not in props
    else:
        assert props["sasl.username"] == "alice"
        assert props["sasl.password"] == cluster.security.password("alice")
    await _round_trip(cluster, _aiokafka_options(props, unsecured_jwt("alice", 600)))
    await cluster.wait_for_principal("User:alice", listener="SASL_SSL")


async def test_sasl_plaintext_scram_authenticates_as_alice(
    any_secure_cluster: LocalCluster,
) -> None:
    cluster = any_secure_cluster
    props = cluster.client_properties("SASL_PLAINTEXT", "SCRAM-SHA-256")
    assert "ssl.cafile" not in props
    await _round_trip(cluster, _aiokafka_options(props))
    await cluster.wait_for_principal("User:alice", listener="SASL_PLAINTEXT")
    assert "User:alice" in cluster.principals_seen(0)
    assert "User:alice" not in cluster.principals_seen(listener="PLAINTEXT")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_the_admin_user_authenticates_too(
    any_secure_cluster: LocalCluster, mechanism: str
) -> None:
    cluster = any_secure_cluster
    props = cluster.client_properties("SASL_PLAINTEXT", mechanism, user="admin")
    assert props["sasl.username"] == "admin"
    await _connect(props)


# ---- listeners that refuse -----------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_a_wrong_password_is_refused(
    any_secure_cluster: LocalCluster, mechanism: str
) -> None:
    cluster = any_secure_cluster
    props = cluster.client_properties("SASL_SSL", mechanism)
    with pytest.raises(kafka_errors.SaslAuthenticationFailed):
        await _connect(props, sasl_plain_password="not-" + props["sasl.password"])
    with pytest.raises(kafka_errors.SaslAuthenticationFailed):
        await _connect(props, sasl_plain_username="mallory")


async def test_unsecured_jwt_is_accepted_and_bad_tokens_are_refused(
    any_secure_cluster: LocalCluster,
) -> None:
    cluster = any_secure_cluster
    assert await _oauth_authenticate(cluster, unsecured_jwt("bob", 60)) == (b"", 0)
    await cluster.wait_for_principal("User:bob", listener="SASL_PLAINTEXT")

    refused = kafka_errors.SaslAuthenticationFailed.errno
    expired = unsecured_jwt("alice", -60, issued_at=time.time() - 600)
    challenge, code = await _oauth_authenticate(cluster, expired)
    assert json.loads(challenge)["status"] == "invalid_token" and code == refused
    header, claims, _ = unsecured_jwt("alice", 600).split(".")
    signed = f"{header}.{claims}.c2lnbmF0dXJl"  # an unsecured JWS has no signature
    challenge, code = await _oauth_authenticate(cluster, signed)
    assert json.loads(challenge)["status"] == "invalid_token" and code == refused


def test_tls_with_the_wrong_ca_or_host_fails(any_secure_cluster: LocalCluster) -> None:
    cluster = any_secure_cluster
    security = cluster.security
    for listener in ("SSL", "MTLS", "SASL_SSL"):
        address = cluster.bootstrap_servers_for(listener)
        with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
            _tls_request(address, security.client_ssl_context(wrong_ca=True))
    # SSL_WRONG_HOST's certificate is signed by the right CA, for another host name.
    wrong_host = cluster.bootstrap_servers_for("SSL_WRONG_HOST")
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        _tls_request(wrong_host, security.client_ssl_context())
    lenient = security.client_ssl_context()
    lenient.check_hostname = False  # a client skipping hostname checks gets through
    assert _tls_request(wrong_host, lenient) == 7


# ---- ZooKeeper -------------------------------------------------------------------------------


def test_zookeeper_tls_port_answers_with_and_without_a_client_certificate(
    secure_cluster: LocalCluster,
) -> None:
    # ZooKeeper is the same server in both flavours: only secure_cluster's has a TLS port.
    cluster = secure_cluster
    props = cluster.zookeeper_client_properties()
    assert props == {
        "zookeeper.connect": cluster.zookeeper_secure_connect,
        "zookeeper.ssl.client.enable": "true",
        "zookeeper.ssl.cafile": str(cluster.security.ca_file),
        "zookeeper.ssl.certfile": str(cluster.security.client_cert_file),
        "zookeeper.ssl.keyfile": str(cluster.security.client_key_file),
    }
    assert cluster.zookeeper_secure_connect != cluster.zookeeper_connect
    address = cluster.zookeeper_secure_connect
    with_cert = cluster.security.client_ssl_context(client_cert=True)
    assert _tls_four_letter_word(address, with_cert, b"ruok") == b"imok"
    # clientAuth=want: a client without certificate (digest auth, say) gets in too.
    without_cert = cluster.security.client_ssl_context()
    assert _tls_four_letter_word(address, without_cert, b"srvr").startswith(b"Zookeeper version")
    with pytest.raises(ssl.SSLCertVerificationError):
        _tls_four_letter_word(address, cluster.security.client_ssl_context(wrong_ca=True), b"ruok")
    # The certificate authenticated the connection: ZooKeeper's x509 id is its subject.
    assert CLIENT_DN == "CN=alice,OU=tests,O=aiozkconsumer"
    log = cluster.log_tail("zookeeper", lines=100_000)
    assert f"Authenticated Id '{CLIENT_DN}' for Scheme 'x509'" in log


def test_secure_kraft_cluster_leaves_zookeeper_plain(secure_kraft_cluster: LocalCluster) -> None:
    with pytest.raises(LocalClusterError, match="no TLS port"):
        _ = secure_kraft_cluster.zookeeper_secure_connect
    assert (
        "secureClientPort"
        not in (secure_kraft_cluster.work_dir / "zookeeper" / "zoo.cfg").read_text()
    )


async def test_zookeeper_digest_super_user_overrides_acls(
    any_secure_cluster: LocalCluster, unique_group_id: str
) -> None:
    cluster = any_secure_cluster
    security = cluster.security
    path = f"/{unique_group_id}"
    zk = ZKClient(cluster.zookeeper_connect, session_timeout=10)
    await zk.start()
    try:
        await zk.create(path, b"locked", acl=[ACL.make("world", "anyone", read=True)])
        with pytest.raises(zk_exc.NoAuth):
            await zk.set_data(path, b"changed", force=True)
    finally:
        await zk.close()
    su = ZKClient(cluster.zookeeper_connect, session_timeout=10)
    await su.start()
    try:
        credentials = f"{security.zookeeper_super_user}:{security.zookeeper_super_password}"
        async with asyncio.timeout(_TIMEOUT_S):  # aiozk has no addauth call of its own
            await su.send(AuthRequest(type=0, scheme="digest", auth=credentials.encode()))
        await su.set_data(path, b"changed", force=True)
        await su.delete(path)
    finally:
        await su.close()
    digest = zookeeper_digest(security.zookeeper_super_user, security.zookeeper_super_password)
    assert digest.startswith("admin:") and len(digest) == len("admin:") + 28


# ---- accessors and helpers ------------------------------------------------------------------


def test_client_properties_refuse_what_does_not_apply(any_secure_cluster: LocalCluster) -> None:
    cluster = any_secure_cluster
    assert cluster.client_properties("plaintext") == {
        "bootstrap.servers": cluster.bootstrap_servers,
        "security.protocol": "PLAINTEXT",
    }
    with pytest.raises(ValueError, match="needs a SASL mechanism"):
        cluster.client_properties("SASL_SSL")
    with pytest.raises(ValueError, match="needs a SASL mechanism"):
        cluster.client_properties("SASL_SSL", "GSSAPI")
    with pytest.raises(ValueError, match="not a SASL listener"):
        cluster.client_properties("SSL", "PLAIN")
    with pytest.raises(ValueError, match="no user"):
        cluster.client_properties("SASL_SSL", "PLAIN", user="mallory")
    with pytest.raises(ValueError, match="no listener"):
        cluster.bootstrap_servers_for("INTERNAL")
    ports = {cluster.bootstrap_servers_for(name) for name in ("SSL", "MTLS", "SASL_SSL")}
    assert len(ports) == 3 and all(p.startswith("127.0.0.1:") for p in ports)
    assert "secured" in repr(cluster)
    assert set(cluster.security.passwords) == {"alice", "admin"}
    assert cluster.security.password("alice") != cluster.security.password("admin")


def test_plain_clusters_have_no_security_accessors(tmp_path: Path) -> None:
    cluster = LocalCluster()  # never started: the answers do not depend on it
    assert not cluster.secured and cluster.security_options is None
    with pytest.raises(LocalClusterError, match="no secured listeners"):
        _ = cluster.security
    with pytest.raises(LocalClusterError, match="no TLS port"):
        _ = cluster.zookeeper_secure_connect
    with pytest.raises(ValueError, match="no listener"):
        cluster.bootstrap_servers_for("SSL")
    with pytest.raises(LocalClusterError, match="secured cluster"):
        cluster.principals_seen()
    assert cluster.request_log_files == {}
    assert "secured" not in repr(cluster)
    plain = properties(zk_broker_properties(0, 9092, [], "127.0.0.1:2181", tmp_path, {}))
    assert "ssl." not in plain and "sasl" not in plain
    assert "listener.security.protocol.map=PLAINTEXT:PLAINTEXT\n" in plain


def test_unsecured_jwt_has_the_shape_the_broker_validates() -> None:
    token = unsecured_jwt("alice", 300, issued_at=1_700_000_000, scope="read write")
    header, claims, signature = _jwt_claims(token)
    assert header == {"alg": "none"}
    assert claims == {
        "sub": "alice",
        "iat": 1_700_000_000,
        "exp": 1_700_000_300,
        "scope": "read write",
    }
    assert signature == "" and token.endswith(".") and "=" not in token


def test_scram_credential_matches_rfc_7677_test_vector() -> None:
    # RFC 7677 section 3: user "user", password "pencil", the salt and iteration count of
    # its example; its ServerSignature is derived from the same ServerKey.
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = scram_credential("pencil", "SCRAM-SHA-256", salt=salt, iterations=4096)
    fields = dict(field.split("=", 1) for field in credential.split(","))
    assert fields["salt"] == "W22ZaJ0SNY7soEsUEjb6gQ=="
    assert fields["iterations"] == "4096"
    assert fields["stored_key"] == "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
    assert fields["server_key"] == "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
    with pytest.raises(ValueError, match="SCRAM"):
        scram_credential("pencil", "PLAIN")


def test_material_and_broker_properties(tmp_path: Path) -> None:
    material = create_material(tmp_path / "security", ClusterSecurity(reauth_ms=30_000))
    for path in (
        material.ca_file,
        material.client_cert_file,
        material.server_keystore_file,
        material.wrong_ca_file,
        material.wrong_host_keystore_file,
    ):
        assert path.read_text().count("BEGIN CERTIFICATE") >= 1
    for path in (material.client_key_file, material.server_keystore_file):
        assert "BEGIN PRIVATE KEY" in path.read_text()  # PKCS#8, what Kafka reads
    again = create_material(tmp_path / "security", ClusterSecurity())
    assert again.passwords == material.passwords  # kept for a reused work dir
    props = security_properties(material, ClusterSecurity(reauth_ms=30_000))
    assert props["listener.name.sasl_ssl.connections.max.reauth.ms"] == "30000"
    assert props["listener.name.mtls.ssl.client.auth"] == "required"
    text = properties(props)
    assert f'user_alice="{material.password("alice")}"' in text
    with pytest.raises(ValueError, match="zookeeper_client_auth"):
        ClusterSecurity(zookeeper_client_auth="always")
    with pytest.raises(TypeError, match="security"):
        LocalCluster(security="yes")  # type: ignore[arg-type]


def test_failure_reports_name_the_secured_clusters() -> None:
    assert _log_section(LocalCluster(security=True)) == f"{LOG_SECTION} (secure)"
    assert _log_section(LocalCluster(security=True, flavour="kraft")) == (
        f"{LOG_SECTION} (secure kraft)"
    )
    assert _log_section(LocalCluster(flavour="kraft")) == f"{LOG_SECTION} (kraft)"
    assert _log_section(LocalCluster(security=False)) == LOG_SECTION
