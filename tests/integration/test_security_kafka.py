"""Kafka connections of our own over TLS and SASL, and clear errors for bad security input.

Against the kit's secured session clusters (``secure_cluster``: Kafka 3.9 in ZooKeeper mode,
``secure_kraft_cluster``: Kafka 4 in KRaft mode, through ``any_secure_cluster``):

- a fetch loop's own connection (``FetchChannel`` / ``FetchConnection``) fetches what was
  produced over each secured listener (SSL, mutual TLS, SASL_SSL with PLAIN, SCRAM-SHA-512 and
  OAUTHBEARER, SASL_PLAINTEXT with SCRAM-SHA-256) and returns what aiokafka's own connection
  returns for the same request;
- each kind of bad input ``KafkaClient.start`` can meet raises its own class with a message
  naming what is wrong, within one request timeout;
- a canary password appears in no exception and no log record, at DEBUG;
- with short-lived OAUTHBEARER tokens (and, on a cluster of the test's own, the brokers'
  ``connections.max.reauth.ms``), one fetch connection keeps fetching across several session
  lifetimes by re-authenticating (KIP-368), never reconnecting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any

import pytest
from aiokafka.protocol.fetch import FetchRequest

from aiozkconsumer._loops import close_loop
from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.errors import AuthenticationError, KafkaConnectionError, SslAuthenticationError
from aiozkconsumer.kafka.client import KafkaClient
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.security import KafkaSecurity
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.security import ClusterSecurity, unsecured_jwt

pytestmark = pytest.mark.integration

REQUEST_TIMEOUT_MS = 10_000
RECORDS = [(b"k%d" % i, b"secured-%d-" % i + b"x" * (i * 53 % 400)) for i in range(200)]
CANARY = "canary-Pa55w0rd-7f3e9c"


class _Tokens:
    """An OAUTHBEARER token source minting unsecured JWTs (the brokers' test validator)."""

    def __init__(self, lifetime_s: float = 600.0, subject: str = "alice") -> None:
        self.lifetime_s = lifetime_s
        self.subject = subject
        self.minted = 0

    async def token(self) -> str:
        self.minted += 1
        return unsecured_jwt(self.subject, self.lifetime_s)


def _security(props: Mapping[str, str], tokens: _Tokens | None = None) -> KafkaSecurity:
    """``KafkaSecurity`` of the kit's dotted properties (a token source for OAUTHBEARER)."""
    kwargs: dict[str, Any] = {k.replace(".", "_"): v for k, v in props.items()}
    if tokens is not None:
        kwargs["sasl_oauthbearer_token_provider"] = tokens
    config = ConsumerConfig(group_id="g", group_coordinator="kafka", **kwargs)
    return KafkaSecurity.from_config(config)


def _props(cluster: LocalCluster, listener: str, mechanism: str | None) -> dict[str, str]:
    return cluster.client_properties(listener, mechanism)


async def _client(props: Mapping[str, str], security: KafkaSecurity) -> KafkaClient:
    client = KafkaClient(
        props["bootstrap.servers"],
        client_id="test-security",
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        security=security,
    )
    await client.start()
    return client


async def _leader(client: KafkaClient, topic: str) -> int:
    assert await client.refresh_metadata([topic])
    leader = client.leader_for(TopicPartition(topic, 0))
    assert leader is not None
    return leader


def _rows(response: Any) -> list[tuple[str, list[tuple[Any, ...]]]]:
    return [(t, [(p[0], p[1], p[2], bytes(p[-1] or b"")) for p in ps]) for t, ps in response.topics]


LISTENERS = [
    ("SSL", None),
    ("MTLS", None),
    ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-512"),
    ("SASL_SSL", "OAUTHBEARER"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
]


@pytest.mark.parametrize(
    ("listener", "mechanism"), LISTENERS, ids=[f"{a}-{b}" if b else a for a, b in LISTENERS]
)
async def test_the_own_fetch_connection_fetches_over_every_secured_listener(
    any_secure_cluster: LocalCluster, unique_topic: str, listener: str, mechanism: str | None
) -> None:
    cluster = any_secure_cluster
    await cluster.create_topic(unique_topic, 1)
    await cluster.produce(unique_topic, RECORDS, partition=0)
    props = _props(cluster, listener, mechanism)
    tokens = _Tokens() if mechanism == "OAUTHBEARER" else None
    async with asyncio.timeout(60):
        client = await _client(props, _security(props, tokens))
        try:
            node = await _leader(client, unique_topic)
            own = client.fetch_channel(node)
            own.connection.io_thread = True  # the I/O thread's TLS socket and SASL exchange
            shared = client.fetch_channel(node, dedicated=False)
            try:
                request = FetchRequest(100, 1, 10_000_000, 0, [(unique_topic, [(0, 0, 1 << 20)])])
                mine = await own.fetch(request, 100)
                theirs = await shared.fetch(request, 100)
                assert _rows(mine) == _rows(theirs)
                assert _rows(mine)[0][1][0][-1]  # records came
                again = await own.fetch(request, 100)
                assert _rows(again) == _rows(mine)
                conn = own.connection
                assert conn.requests == 2 and conn.connects == 1
                assert conn._link is not None  # the I/O thread's socket
                if mechanism is not None:
                    session = conn.session
                    assert session is not None and session.mechanism == mechanism
            finally:
                own.close()
                shared.close()
        finally:
            await client.close()
    if tokens is not None:
        # aiokafka's connection and ours share one provider: one token for both.
        assert tokens.minted == 1
        assert client.token_provider is own.connection._token_provider


@pytest.mark.parametrize(
    ("listener", "mechanism"), [("SSL", None), ("SASL_SSL", "SCRAM-SHA-512")], ids=str
)
async def test_the_io_thread_and_the_event_loop_receive_the_same_over_tls(
    any_secure_cluster: LocalCluster, unique_topic: str, listener: str, mechanism: str | None
) -> None:
    """The I/O thread's blocking TLS socket (``fetch.io.thread.enable``) and asyncio's SSL
    transport (the default), with the same context and SASL exchange, return the same record
    sets."""
    cluster = any_secure_cluster
    await cluster.create_topic(unique_topic, 1)
    await cluster.produce(unique_topic, RECORDS, partition=0)
    props = _props(cluster, listener, mechanism)
    async with asyncio.timeout(60):
        client = await _client(props, _security(props))
        try:
            node = await _leader(client, unique_topic)
            threaded, on_loop = client.fetch_channel(node), client.fetch_channel(node)
            threaded.connection.io_thread = True
            try:
                request = FetchRequest(100, 1, 10_000_000, 0, [(unique_topic, [(0, 0, 1 << 20)])])
                a = await threaded.fetch(request, 100)
                b = await on_loop.fetch(request, 100)
                assert _rows(a) == _rows(b) and _rows(a)[0][1][0][-1]
                assert threaded.connection._link is not None
                assert on_loop.connection._protocol is not None
                if mechanism is not None:
                    for channel in (threaded, on_loop):
                        session = channel.connection.session
                        assert session is not None and session.mechanism == mechanism
            finally:
                threaded.close()
                on_loop.close()
        finally:
            await client.close()


# -- bad input: the exact class, a message naming what is wrong, within one request timeout


async def _start_fails(props: Mapping[str, str], security: KafkaSecurity) -> BaseException:
    started = time.monotonic()
    client = KafkaClient(
        props["bootstrap.servers"],
        client_id="test-security",
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        security=security,
    )
    with pytest.raises(Exception) as info:  # the exact class is checked by the caller
        await client.start()
    await client.close()
    assert time.monotonic() - started < REQUEST_TIMEOUT_MS / 1000
    return info.value


def _broker_of(props: Mapping[str, str]) -> str:
    return props["bootstrap.servers"].split(",")[0]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_a_wrong_password_is_an_authentication_error(
    any_secure_cluster: LocalCluster, mechanism: str
) -> None:
    props = _props(any_secure_cluster, "SASL_SSL", mechanism) | {"sasl.password": CANARY}
    error = await _start_fails(props, _security(props))
    assert type(error) is AuthenticationError
    assert error.mechanism == mechanism
    assert error.broker == _broker_of(props)
    assert _broker_of(props) in str(error) and mechanism in str(error)
    # The broker's own words: PLAIN "Invalid username or password", SCRAM "invalid credentials".
    assert "invalid" in str(error).lower()
    assert CANARY not in str(error) and CANARY not in repr(error)


async def test_an_expired_oauth_token_is_an_authentication_error(
    any_secure_cluster: LocalCluster,
) -> None:
    props = _props(any_secure_cluster, "SASL_SSL", "OAUTHBEARER")
    error = await _start_fails(props, _security(props, _Tokens(lifetime_s=-60)))
    assert type(error) is AuthenticationError
    assert error.mechanism == "OAUTHBEARER" and _broker_of(props) in str(error)


async def test_an_untrusted_certificate_is_named(any_secure_cluster: LocalCluster) -> None:
    props = _props(any_secure_cluster, "SSL", None)
    props["ssl.cafile"] = str(any_secure_cluster.security.wrong_ca_file)
    error = await _start_fails(props, _security(props))
    assert type(error) is SslAuthenticationError
    assert _broker_of(props) in str(error)
    assert "certificate verify failed" in str(error)


async def test_a_certificate_for_another_host_is_named(any_secure_cluster: LocalCluster) -> None:
    props = _props(any_secure_cluster, "SSL_WRONG_HOST", None)
    error = await _start_fails(props, _security(props))
    assert type(error) is SslAuthenticationError
    assert "hostname mismatch" in str(error) and "127.0.0.1" in str(error)


async def test_mutual_tls_without_a_client_certificate_is_named(
    any_secure_cluster: LocalCluster,
) -> None:
    props = _props(any_secure_cluster, "MTLS", None)
    del props["ssl.certfile"], props["ssl.keyfile"]
    error = await _start_fails(props, _security(props))
    assert type(error) is SslAuthenticationError
    assert "client certificate" in str(error)


async def test_plaintext_to_a_tls_port_says_to_set_the_security_protocol(
    any_secure_cluster: LocalCluster,
) -> None:
    props = {"bootstrap.servers": any_secure_cluster.bootstrap_servers_for("SASL_SSL")}
    error = await _start_fails(props, KafkaSecurity())
    assert type(error) is AuthenticationError
    assert "speaks TLS" in str(error) and "security.protocol=SSL or SASL_SSL" in str(error)
    assert _broker_of(props) in str(error)


async def test_plaintext_to_a_sasl_port_lists_the_brokers_mechanisms(
    any_secure_cluster: LocalCluster,
) -> None:
    props = {"bootstrap.servers": any_secure_cluster.bootstrap_servers_for("SASL_PLAINTEXT")}
    error = await _start_fails(props, KafkaSecurity())
    assert type(error) is AuthenticationError
    message = str(error)
    assert "requires SASL" in message and "security.protocol=SASL_PLAINTEXT" in message
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"):
        assert mechanism in message


async def test_tls_to_a_plaintext_port_says_the_port_does_not_speak_tls(
    any_secure_cluster: LocalCluster,
) -> None:
    props = _props(any_secure_cluster, "SSL", None)
    props["bootstrap.servers"] = any_secure_cluster.bootstrap_servers
    error = await _start_fails(props, _security(props))
    assert type(error) is SslAuthenticationError
    assert "does not speak TLS" in str(error)


async def test_sasl_to_a_port_without_sasl_says_so(any_secure_cluster: LocalCluster) -> None:
    props = _props(any_secure_cluster, "SASL_SSL", "SCRAM-SHA-512")
    props["bootstrap.servers"] = any_secure_cluster.bootstrap_servers_for("SSL")
    error = await _start_fails(props, _security(props))
    assert type(error) is AuthenticationError
    assert "does not use SASL" in str(error) and "security.protocol=SSL" in str(error)


async def test_an_unreachable_cluster_stays_a_connection_error() -> None:
    import socket

    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        props = {"bootstrap.servers": f"127.0.0.1:{sock.getsockname()[1]}"}
        error = await _start_fails(props, KafkaSecurity())
    assert type(error) is KafkaConnectionError


# -- secrets stay out of errors and logs ------------------------------------------------


async def test_a_password_appears_in_no_error_and_no_log(
    any_secure_cluster: LocalCluster, unique_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = any_secure_cluster
    caplog.set_level(logging.DEBUG)
    wrong = _props(cluster, "SASL_SSL", "PLAIN") | {"sasl.password": CANARY}
    error = await _start_fails(wrong, _security(wrong))
    texts = [str(error), repr(error), repr(_security(wrong))]
    # A working PLAIN session (the password sent in its SaslAuthenticate payload), both on
    # aiokafka's connections and on the fetch loop's own.
    await cluster.create_topic(unique_topic, 1)
    await cluster.produce(unique_topic, RECORDS[:3], partition=0)
    good = _props(cluster, "SASL_PLAINTEXT", "PLAIN")
    password = good["sasl.password"]
    client = await _client(good, _security(good))
    try:
        channel = client.fetch_channel(await _leader(client, unique_topic))
        request = FetchRequest(100, 1, 1 << 20, 0, [(unique_topic, [(0, 0, 1 << 20)])])
        await channel.fetch(request, 100)
        channel.close()
        texts += [repr(client), repr(channel)]
    finally:
        await client.close()
    logged = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "SaslAuthenticateRequest" in logged  # aiokafka's DEBUG log was captured
    for secret in (CANARY, password):
        assert secret not in logged
        assert not any(secret in t for t in texts)


# -- KIP-368: re-authentication instead of a dropped connection ---------------------------


async def _fetch_across(
    client: KafkaClient, topic: str, seconds: float, session_s: float
) -> tuple[int, int, int]:
    """Fetch in long polls for ``seconds``; returns (fetches, connects, re-authentications)."""
    node = await _leader(client, topic)
    channel = client.fetch_channel(node)
    # At the log end: the broker holds each fetch for max_wait, so no sleeping in between.
    request = FetchRequest(500, 1, 1 << 20, 0, [(topic, [(0, len(RECORDS[:3]), 1 << 20)])])
    first = FetchRequest(100, 1, 1 << 20, 0, [(topic, [(0, 0, 1 << 20)])])
    fetches = 0
    try:
        assert _rows(await channel.fetch(first, 100))[0][1][0][-1]
        session = channel.connection.session
        assert session is not None
        assert 0 < session.lifetime_ms <= session_s * 1000
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await channel.fetch(request, 500)
            fetches += 1
        # Still the first connection, and it still serves records.
        assert _rows(await channel.fetch(first, 100))[0][1][0][-1]
        conn = channel.connection
        return fetches, conn.connects, conn.reauthentications
    finally:
        channel.close()


async def test_short_lived_oauth_tokens_are_renewed_on_the_same_connection(
    any_secure_cluster: LocalCluster, unique_topic: str
) -> None:
    """The brokers end an OAUTHBEARER session when its token expires (10 s here)."""
    cluster = any_secure_cluster
    await cluster.create_topic(unique_topic, 1)
    await cluster.produce(unique_topic, RECORDS[:3], partition=0)
    props = _props(cluster, "SASL_SSL", "OAUTHBEARER")
    tokens = _Tokens(lifetime_s=10)
    client = await _client(props, _security(props, tokens))
    try:
        fetches, connects, reauths = await _fetch_across(client, unique_topic, 32, 10)
    finally:
        await client.close()
    assert connects == 1
    assert reauths >= 3
    assert tokens.minted >= 4  # a new token for each re-authentication (80% of 10 s)
    assert fetches > 30


@pytest.fixture(scope="module")
def reauth_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of its own whose SASL listeners set ``connections.max.reauth.ms=5000``.

    Started and stopped in private event loops, as the kit's session clusters are.
    """
    cluster = LocalCluster(
        security=ClusterSecurity(reauth_ms=5000), work_dir=tmp_path_factory.mktemp("reauth")
    )
    try:
        _run(asyncio.wait_for(cluster.start(), 180))
        yield cluster
    finally:
        _run(cluster.stop())


def _run(coro: Coroutine[Any, Any, None]) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(coro)
    finally:
        close_loop(loop, shutdown_executor=True)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "OAUTHBEARER"])
async def test_connections_max_reauth_ms_is_met_by_reauthenticating(
    reauth_cluster: LocalCluster, unique_topic: str, mechanism: str
) -> None:
    cluster = reauth_cluster
    await cluster.create_topic(unique_topic, 1)
    await cluster.produce(unique_topic, RECORDS[:3], partition=0)
    props = _props(cluster, "SASL_SSL", mechanism)
    tokens = _Tokens(lifetime_s=10) if mechanism == "OAUTHBEARER" else None
    client = await _client(props, _security(props, tokens))
    try:
        fetches, connects, reauths = await _fetch_across(client, unique_topic, 21, 5)
    finally:
        await client.close()
    assert connects == 1
    assert reauths >= 4
    assert fetches > 20
