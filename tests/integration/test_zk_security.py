"""ZooKeeper security in the adapter: digest auth, creator ACLs, TLS to a secureClientPort.

Without a server: the ACL each created node gets, the errors ``NoAuth`` / ``InvalidACL`` /
``AUTH_FAILED`` become, and what a failed TLS connection attempt says. Against the session
cluster's ZooKeeper: a group with ``zookeeper.auth`` and ``zookeeper.set.acl`` consumes, its
nodes carry Kafka's ACL (creator-all + world-read), other clients can read them but not
change them, credentials are sent again on every new connection, and a ``NoAuth`` while
claiming leaves nothing claimed. Against a secured cluster of this module's own (ZooKeeper
with a TLS port; restarted by one test): a session over TLS, its prompt reconnect after a
ZooKeeper restart, and an untrusted certificate.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import secrets
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from _support import config_for
from aiozk import exc as zk_exc

from aiozkconsumer import ConsumerConfig, TopicPartition, ZookeeperConsumerConnector
from aiozkconsumer.errors import (
    ConsumerRebalanceFailedError,
    ZookeeperAuthError,
    ZookeeperConnectionError,
)
from aiozkconsumer.security import ZookeeperSecurity
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.zk import layout
from aiozkconsumer.zk.client import (
    CREATOR_ALL_READ_ACL,
    OPEN_ACL,
    ZkClient,
    acl_for,
    describe_connect_error,
    map_zk_errors,
)

ALL = 31  # ZooDefs.Perms.ALL
READ = 1


def _digest_id(user: str, password: str) -> str:
    """ZooKeeper's digest id, ``user:base64(sha1(user:password))``."""
    digest = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return f"{user}:{base64.b64encode(digest).decode()}"


def _acl(acls: list[Any]) -> list[tuple[int, str, str]]:
    return sorted((a.perms, a.id.scheme, a.id.id) for a in acls)


def _creator_all_world_read(user: str, password: str) -> list[tuple[int, str, str]]:
    return sorted([(ALL, "digest", _digest_id(user, password)), (READ, "world", "anyone")])


# -- without a server ------------------------------------------------------------------------


def test_kafkas_acls_creator_all_world_read_and_consumers_left_open() -> None:
    assert _acl(CREATOR_ALL_READ_ACL) == [(READ, "world", "anyone"), (ALL, "auth", "")]
    assert _acl(OPEN_ACL) == [(ALL, "world", "anyone")]
    for path in (
        "/consumers/g",
        "/consumers/g/ids/g_a",
        "/consumers/g/owners/t/0",
        "/consumers/g/offsets/t/0",
        "/",
    ):
        assert acl_for(path, True) is CREATOR_ALL_READ_ACL, path
    assert acl_for("/consumers", True) is OPEN_ACL
    assert acl_for("/consumers/", True) is OPEN_ACL
    assert acl_for("/consumers/g", False) is None


def test_noauth_names_the_path_the_operation_and_the_scheme_never_the_credentials() -> None:
    with (
        pytest.raises(ZookeeperAuthError) as info,
        map_zk_errors("/consumers/g/owners/t/0", op="delete", auth_scheme="digest"),
    ):
        raise zk_exc.NoAuth()
    assert info.value.path == "/consumers/g/owners/t/0"
    assert str(info.value) == (
        "ZooKeeper delete not allowed on /consumers/g/owners/t/0 by its ACL "
        "(zookeeper.auth scheme digest)"
    )
    with pytest.raises(ZookeeperAuthError) as info, map_zk_errors("/x", op="write"):
        raise zk_exc.NoAuth()
    assert "(no zookeeper.auth set)" in str(info.value)


def test_invalid_acl_and_auth_failed_become_auth_errors() -> None:
    with pytest.raises(ZookeeperAuthError) as info, map_zk_errors("/consumers/g", op="create"):
        raise zk_exc.InvalidACL()
    assert info.value.path == "/consumers/g"
    assert "zookeeper.set.acl=true" in str(info.value)
    assert "zookeeper.auth" in str(info.value)
    with pytest.raises(ZookeeperAuthError) as info, map_zk_errors("/x", auth_scheme="digest"):
        raise zk_exc.AuthFailed()
    assert info.value.path is None
    assert str(info.value) == "ZooKeeper refused the credentials of zookeeper.auth (scheme digest)"


def test_connect_errors_say_what_to_check() -> None:
    untrusted = ssl.SSLCertVerificationError(1, "certificate verify failed")
    untrusted.verify_message = "unable to get local issuer certificate"
    text = describe_connect_error("127.0.0.1:2182", untrusted)
    assert "127.0.0.1:2182" in text and "not trusted" in text
    assert "unable to get local issuer certificate" in text and "zookeeper.ssl.cafile" in text
    mismatch = ssl.SSLCertVerificationError(1, "certificate verify failed")
    mismatch.verify_message = "Hostname mismatch, certificate is not valid for 'zk1'."
    assert "not valid for that host" in describe_connect_error("zk1:2182", mismatch)
    assert "secureClientPort" in describe_connect_error("h:1", ssl.SSLError(1, "wrong version"))
    assert "zookeeper.ssl.client.enable" in describe_connect_error("h:1", ConnectionError())


# -- digest auth and ACLs on the session cluster's ZooKeeper -----------------------------------


@pytest.fixture
def password() -> str:
    return secrets.token_urlsafe(12)


def _secured(user: str, password: str, *, set_acl: bool = True) -> ZookeeperSecurity:
    return ZookeeperSecurity(auth=("digest", f"{user}:{password}"), set_acl=set_acl)


@pytest.fixture
async def cleanup(zk_kafka_cluster: LocalCluster) -> AsyncIterator[list[tuple[str, str]]]:
    """``(path, credentials)`` to delete recursively after the test, as that digest user."""
    paths: list[tuple[str, str]] = []
    yield paths
    for path, credentials in reversed(paths):
        zk = ZkClient(
            zk_kafka_cluster.zookeeper_connect,
            security=ZookeeperSecurity(auth=("digest", credentials)),
        )
        await zk.start()
        try:
            await zk.delete_recursive(path)
        finally:
            await zk.close()


async def _topic(cluster: LocalCluster, name: str, partitions: int, per_partition: int) -> None:
    await cluster.create_topic(name, partitions)
    await cluster.produce_to_partitions(
        name, {p: [(b"k", b"v%d" % i) for i in range(per_partition)] for p in range(partitions)}
    )


@pytest.mark.integration
async def test_group_with_digest_auth_and_set_acl_consumes_and_guards_its_nodes(
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    zk_client: Any,
    password: str,
    cleanup: list[tuple[str, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A group with ``zookeeper.auth=digest:alice:...`` and ``zookeeper.set.acl=true``
    consumes a topic and commits; its registration, owner and offset nodes (and the parents
    it created) are creator-all for alice + world-read, as Kafka's brokers make theirs; a
    client without credentials reads them but may not delete an owner node or write an
    offset; wrong credentials get ``ZookeeperAuthError`` naming the node, from our client as
    from a member that tries to join. The password is in no log line."""
    caplog.set_level(logging.DEBUG)
    group, topic = unique_group_id, unique_topic
    cleanup.append((layout.group_dir(group), f"alice:{password}"))
    await _topic(zk_kafka_cluster, topic, 2, 50)
    config = config_for(
        zk_kafka_cluster,
        group,
        consumer_id="a",
        zookeeper_auth=f"digest:alice:{password}",
        zookeeper_set_acl=True,
        auto_commit_enable=False,
    )
    async with ZookeeperConsumerConnector(config) as member:
        streams = await member.create_message_streams({topic: 1})
        got = 0
        with anyio.fail_after(60):
            async for _ in streams[topic][0]:
                got += 1
                if got == 100:
                    break
        await member.commit_offsets()
        assert set(member.statistics().owned_partitions) == {
            TopicPartition(topic, 0),
            TopicPartition(topic, 1),
        }

        ids = layout.ids_path(group, member.consumer_id_string)
        owner = layout.owner_path(group, topic, 0)
        offset = layout.offset_path(group, topic, 0)
        expected = _creator_all_world_read("alice", password)
        # ZooKeeper (3.6+) shows a digest id's hash only to a client with ADMIN on the node.
        redacted = sorted([(ALL, "digest", "alice:x"), (READ, "world", "anyone")])
        for path in (
            ids,
            owner,
            offset,
            layout.group_dir(group),
            layout.ids_dir(group),
            layout.owners_dir(group, topic),
            layout.offsets_dir(group, topic),
        ):
            assert _acl(await member.zk.raw.get_acl(path)) == expected, path
            assert _acl(await zk_client.get_acl(path)) == redacted, path
        # /consumers itself stays open: every group's members create their node under it.
        assert _acl(await zk_client.get_acl(layout.CONSUMERS_PATH)) == [(ALL, "world", "anyone")]

        # Without credentials: read, but neither delete an owner node nor write an offset.
        assert layout.decode_offset(await zk_client.get_data(offset)) == 50
        assert await zk_client.get_data(owner) == b"%s-0" % member.consumer_id_string.encode()
        with pytest.raises(zk_exc.NoAuth):
            await zk_client.delete(owner)
        with pytest.raises(zk_exc.NoAuth):
            await zk_client.set_data(offset, b"0")
        with pytest.raises(zk_exc.NoAuth):
            await zk_client.create(layout.owner_path(group, topic, 7), b"x", ephemeral=True)

        # Wrong credentials through our client: ZookeeperAuthError naming the node.
        wrong = ZkClient(
            zk_kafka_cluster.zookeeper_connect, security=_secured("alice", "not-" + password)
        )
        await wrong.start()
        try:
            with pytest.raises(ZookeeperAuthError) as info:
                await wrong.delete(owner)
            assert info.value.path == owner
            assert str(info.value) == (
                f"ZooKeeper delete not allowed on {owner} by its ACL (zookeeper.auth scheme digest)"
            )
            with pytest.raises(ZookeeperAuthError) as info:
                await wrong.set_or_create(offset, b"0")
            assert info.value.path == offset
            fence = layout.fencing_path(group, topic, 0)
            fenced = await wrong.get(fence)
            assert fenced is not None
            fence_version = fenced[1].version
            with pytest.raises(ZookeeperAuthError) as info:
                await wrong.fenced_write(offset, b"0", fence, fence_version)
            assert info.value.path == offset and "write not allowed" in str(info.value)
            assert await wrong.get_data(offset) == b"50"  # readable, unchanged
        finally:
            await wrong.close()

        # A member with wrong credentials cannot register; the group is untouched.
        intruder = config_for(
            zk_kafka_cluster,
            group,
            consumer_id="b",
            zookeeper_auth=f"digest:alice:not-{password}",
            zookeeper_set_acl=True,
        )
        with anyio.fail_after(60), pytest.raises(ZookeeperAuthError) as info:
            async with ZookeeperConsumerConnector(intruder) as other:
                await other.create_message_streams({topic: 1})
        assert info.value.path == layout.ids_path(group, f"{group}_b")
        assert "create not allowed" in str(info.value)
        assert password not in str(info.value)
        assert await zk_client.get_children(layout.ids_dir(group)) == [member.consumer_id_string]
        assert len(member.statistics().owned_partitions) == 2
        assert password not in repr(member.zk) + repr(member.zk.security) + repr(config)
    assert caplog.records and password not in caplog.text


@pytest.mark.integration
async def test_credentials_are_sent_again_on_every_new_connection(
    zk_kafka_cluster: LocalCluster,
    unique_group_id: str,
    password: str,
    cleanup: list[tuple[str, str]],
) -> None:
    """A dropped connection is replaced promptly, on the same session: the new connection
    authenticates before any request, so writing a node only alice may write still works
    (without AddAuth on it, the write would be NoAuth)."""
    path = f"{layout.group_dir(unique_group_id)}/probe"
    cleanup.append((layout.group_dir(unique_group_id), f"alice:{password}"))
    zk = ZkClient(zk_kafka_cluster.zookeeper_connect, security=_secured("alice", password))
    await zk.start()
    try:
        await zk.create(path, b"1")
        session = zk.session_id
        for n in range(2, 5):
            conn = zk.raw.session.conn
            conn.writer.transport.abort()  # the connection drops under the session
            with anyio.fail_after(10):
                await zk.wait_for_state("suspended", "lost")
                await zk.wait_for_state("connected")
            assert zk.raw.session.conn is not conn
            assert await zk.set_data(path, b"%d" % n) == n - 1
            assert zk.session_id == session
        assert await zk.get_data(path) == b"4"
    finally:
        await zk.close()


@pytest.mark.integration
async def test_credentials_refused_fail_start_at_once(zk_kafka_cluster: LocalCluster) -> None:
    """``AUTH_FAILED`` (ZooKeeper has no provider for the scheme) ends the session at once,
    with no reconnect loop, and the error does not show the credentials."""
    zk = ZkClient(
        zk_kafka_cluster.zookeeper_connect,
        connection_timeout_ms=20_000,
        security=ZookeeperSecurity(auth=("nosuchscheme", "secret-credentials")),
    )
    started = time.monotonic()
    with pytest.raises(ZookeeperAuthError) as info:
        await zk.start()
    assert time.monotonic() - started < 10
    assert info.value.path is None
    assert str(info.value) == (
        "ZooKeeper refused the credentials of zookeeper.auth (scheme nosuchscheme)"
    )
    assert "secret-credentials" not in repr(info.value)
    await zk.close()


@pytest.mark.integration
async def test_set_acl_without_an_identity_is_an_auth_error(
    zk_kafka_cluster: LocalCluster, unique_group_id: str
) -> None:
    """``zookeeper.set.acl`` gives the creator's identities every right: without one (no
    ``zookeeper.auth``, no client certificate) ZooKeeper refuses the ACL."""
    zk = ZkClient(zk_kafka_cluster.zookeeper_connect, security=ZookeeperSecurity(set_acl=True))
    await zk.start()
    try:
        path = f"{layout.group_dir(unique_group_id)}/x"
        with pytest.raises(ZookeeperAuthError) as info:
            await zk.create(path, b"")
        assert info.value.path == path  # the ACL is checked before the parent
        assert "needs an authenticated client" in str(info.value)
    finally:
        await zk.close()


@pytest.mark.integration
async def test_noauth_while_claiming_leaves_nothing_claimed(
    zk_kafka_cluster: LocalCluster,
    unique_topic: str,
    unique_group_id: str,
    zk_client: Any,
    password: str,
    cleanup: list[tuple[str, str]],
) -> None:
    """One topic's owners directory belongs to another identity (bob): alice registers, but
    the claim of its partitions is NoAuth. The rebalance fails with that error (naming the
    owner node), and the owner nodes it did create, of the other topic, are deleted again."""
    group = unique_group_id
    locked, free = f"{unique_topic}-locked", f"{unique_topic}-free"
    for topic in (locked, free):
        await _topic(zk_kafka_cluster, topic, 2, 5)
    # Deleting needs the parent's DELETE right: bob's directory first, then the group as alice.
    cleanup.append((layout.group_dir(group), f"alice:{password}"))
    cleanup.append((layout.owners_dir(group, locked), f"bob:{password}"))
    await zk_client.ensure_path(f"{layout.group_dir(group)}/owners")  # open, as /consumers
    bob = ZkClient(zk_kafka_cluster.zookeeper_connect, security=_secured("bob", password))
    await bob.start()
    try:
        await bob.create(layout.owners_dir(group, locked), b"", make_parents=False)
    finally:
        await bob.close()

    config = config_for(
        zk_kafka_cluster,
        group,
        consumer_id="a",
        zookeeper_auth=f"digest:alice:{password}",
        zookeeper_set_acl=True,
        rebalance_max_retries=2,
        rebalance_backoff_ms=100,
    )
    with (
        anyio.fail_after(60),
        pytest.raises((ZookeeperAuthError, ConsumerRebalanceFailedError)) as info,
    ):
        async with ZookeeperConsumerConnector(config) as member:
            await member.create_message_streams({locked: 1, free: 1})
    locked_owner = f"ZooKeeper create not allowed on {layout.owners_dir(group, locked)}/"
    if isinstance(info.value, ZookeeperAuthError):  # an auth error ends the rebalance at once
        assert info.value.path is not None
        assert info.value.path.startswith(layout.owners_dir(group, locked) + "/")
        assert str(info.value).startswith(locked_owner)
    else:  # the rebalancer retried it and gave up: its message names the refusal
        assert f"; last error: {locked_owner}" in str(info.value)
    assert "by its ACL (zookeeper.auth scheme digest)" in str(info.value)
    assert await zk_client.get_children(layout.owners_dir(group, locked)) == []
    free_owners = layout.owners_dir(group, free)
    assert not await zk_client.exists(free_owners) or (
        await zk_client.get_children(free_owners) == []
    )


# -- TLS to ZooKeeper's secureClientPort --------------------------------------------------------


@pytest.fixture(scope="module")
def tls_cluster() -> Iterator[LocalCluster]:
    """A cluster of this module's own whose ZooKeeper has a TLS port (a test restarts it)."""
    from aiozkconsumer.testing.security import ClusterSecurity

    cluster = LocalCluster(security=ClusterSecurity(zookeeper_tls=True))
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(cluster.start())
        yield cluster
    finally:
        loop.run_until_complete(cluster.stop())
        loop.close()


def _tls_config(cluster: LocalCluster, group: str, **kw: Any) -> ConsumerConfig:
    """A member's config reaching ZooKeeper on its TLS port, trusting the cluster's CA."""
    return config_for(
        cluster,
        group,
        zookeeper_ssl_client_enable=True,
        zookeeper_ssl_cafile=str(cluster.security.ca_file),
        **kw,
    ).replace(zookeeper_connect=cluster.zookeeper_secure_connect)


@pytest.mark.integration
async def test_a_group_works_over_tls_with_digest_auth_and_acls(
    tls_cluster: LocalCluster, unique_topic: str, unique_group_id: str, password: str
) -> None:
    """ZooKeeper over TLS + digest auth + ``zookeeper.set.acl``: a group consumes a topic and
    commits, and its nodes carry alice's creator ACL."""
    group, topic = unique_group_id, unique_topic
    await _topic(tls_cluster, topic, 2, 20)
    config = _tls_config(
        tls_cluster,
        group,
        zookeeper_auth=f"digest:alice:{password}",
        zookeeper_set_acl=True,
        auto_commit_enable=False,
    )
    async with ZookeeperConsumerConnector(config) as member:
        streams = await member.create_message_streams({topic: 1})
        got = 0
        with anyio.fail_after(60):
            async for _ in streams[topic][0]:
                got += 1
                if got == 40:
                    break
        await member.commit_offsets()
        offset = layout.offset_path(group, topic, 1)
        assert await member.zk.get_data(offset) == b"20"
        assert _acl(await member.zk.raw.get_acl(offset)) == _creator_all_world_read(
            "alice", password
        )
        conn = member.zk.raw.session.conn
        assert conn.writer.get_extra_info("ssl_object") is not None  # really over TLS
        await member.zk.delete_recursive(layout.group_dir(group))


@pytest.mark.integration
async def test_tls_session_reconnects_promptly_after_a_zookeeper_restart(
    tls_cluster: LocalCluster, unique_group_id: str, password: str
) -> None:
    """Over TLS, a ZooKeeper restart is outlived as on the plain port: the prompt reconnect
    finds the server again within the back-off cap, on the same session (its ephemeral node
    still there), and authenticates the new connection (an ACL'd node is writable)."""
    config = _tls_config(
        tls_cluster,
        unique_group_id,
        zookeeper_auth=f"digest:alice:{password}",
        zookeeper_set_acl=True,
        zookeeper_session_timeout_ms=6000,
    )
    zk = ZkClient(
        config.require_zookeeper_connect(),
        session_timeout_ms=6000,
        security=ZookeeperSecurity.from_config(config),
    )
    await zk.start()
    group_dir = layout.group_dir(unique_group_id)
    try:
        await zk.create(f"{group_dir}/ephemeral", b"e", ephemeral=True)
        await zk.create(f"{group_dir}/persistent", b"1")
        session = zk.session_id
        await tls_cluster.stop_zookeeper()
        with anyio.fail_after(5):
            await zk.wait_for_state("suspended", "lost")
        await anyio.sleep(1.0)
        await tls_cluster.start_zookeeper()
        serving = time.monotonic()
        with anyio.fail_after(3):
            await zk.wait_for_state("connected")
        reconnected_s = time.monotonic() - serving
        assert reconnected_s < 0.1 * 6 + 1.5, reconnected_s  # back-off cap + an attempt
        assert zk.session_id == session
        got = await zk.get(f"{group_dir}/ephemeral")
        assert got is not None and got[1].ephemeral_owner == session
        assert await zk.set_data(f"{group_dir}/persistent", b"2") == 1
        assert zk.raw.session.conn.writer.get_extra_info("ssl_object") is not None
    finally:
        await zk.delete_recursive(group_dir)
        await zk.close()


@pytest.mark.integration
async def test_an_untrusted_certificate_fails_at_once_naming_server_and_reason(
    tls_cluster: LocalCluster,
) -> None:
    security = ZookeeperSecurity(ssl_context=tls_cluster.security.client_ssl_context(wrong_ca=True))
    zk = ZkClient(
        tls_cluster.zookeeper_secure_connect, connection_timeout_ms=20_000, security=security
    )
    started = time.monotonic()
    with pytest.raises(ZookeeperConnectionError) as info:
        await zk.start()
    assert time.monotonic() - started < 10  # not the connection timeout
    text = str(info.value)
    assert f"TLS handshake with ZooKeeper at {tls_cluster.zookeeper_secure_connect} failed" in text
    assert "not trusted" in text and "zookeeper.ssl.cafile" in text
    await zk.close()


@pytest.mark.integration
async def test_plain_and_tls_ports_mixed_up_say_so(tls_cluster: LocalCluster) -> None:
    """A plain client on the TLS port, a TLS client on the plain port: the connection timeout's
    error says what the last attempt saw."""
    # Session timeout 3 s: each attempt is bounded by 1 s, so 4 s see several.
    plain = ZkClient(
        tls_cluster.zookeeper_secure_connect, session_timeout_ms=3000, connection_timeout_ms=4000
    )
    with pytest.raises(ZookeeperConnectionError) as info:
        await plain.start()
    assert "zookeeper.ssl.client.enable" in str(info.value)
    tls = ZkClient(
        tls_cluster.zookeeper_connect,
        session_timeout_ms=3000,
        connection_timeout_ms=4000,
        security=ZookeeperSecurity(ssl_context=tls_cluster.security.client_ssl_context()),
    )
    with pytest.raises(ZookeeperConnectionError) as info:
        await tls.start()
    assert "secureClientPort" in str(info.value)
