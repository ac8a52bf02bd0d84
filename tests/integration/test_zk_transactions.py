"""ZooKeeper transactions against a real server: ``ZkClient.multi`` (all or nothing, the
specific errors), the claims with their fencing bumps, the deletes, the fenced offset commit in
one transaction, and the writes of one loop turn sent together."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.errors import (
    CommitFencedError,
    ZookeeperBadVersionError,
    ZookeeperNodeExistsError,
    ZookeeperNoNodeError,
)
from aiozkconsumer.offsets import ZookeeperOffsetStore
from aiozkconsumer.plan import claim_transaction
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.subscription import ConsumerThreadId
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.zk import layout
from aiozkconsumer.zk.client import ZkClient
from aiozkconsumer.zk.ops import Check, Create, Delete, SetData
from aiozkconsumer.zkgroup.owners import OwnerNodes

pytestmark = pytest.mark.integration

TOPIC = "t"


def _tp(p: int) -> TopicPartition:
    return TopicPartition(TOPIC, p)


def _tid(consumer: str) -> ConsumerThreadId:
    return ConsumerThreadId(consumer, 0)


@pytest.fixture
async def zk(zk_kafka_cluster: LocalCluster, unique_group_id: str) -> AsyncIterator[ZkClient]:
    client = ZkClient(zk_kafka_cluster.zookeeper_connect)
    await client.start()
    try:
        yield client
    finally:
        await client.delete_recursive(f"/consumers/{unique_group_id}")
        await client.close()


@pytest.fixture
async def other(zk_kafka_cluster: LocalCluster) -> AsyncIterator[ZkClient]:
    """A second session: another member."""
    client = ZkClient(zk_kafka_cluster.zookeeper_connect)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


class _Calls:
    """Counts the ZkClient requests a step makes (wraps the instance's methods)."""

    def __init__(self, zk: ZkClient, *names: str) -> None:
        self.counts = dict.fromkeys(names, 0)
        for name in names:
            setattr(zk, name, self._counted(name, getattr(zk, name)))

    def _counted(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            return await method(*args, **kwargs)

        return call


async def _versions(zk: ZkClient, paths: list[str]) -> list[int | None]:
    out: list[int | None] = []
    for path in paths:
        got = await zk.get(path)
        out.append(None if got is None else int(got[1].version))
    return out


# -- ZkClient.multi ----------------------------------------------------------------------


async def test_multi_applies_all_and_returns_the_new_versions(
    zk: ZkClient, unique_group_id: str
) -> None:
    base = f"/consumers/{unique_group_id}/m"
    await zk.ensure_path(base)
    result = await zk.multi(
        [Create(f"{base}/a", b"1"), SetData(f"{base}/a", b"2"), Create(f"{base}/b", b"x")]
    )
    assert result.applied and result.error is None and result.failed_op is None
    assert result.versions == (None, 1, None)
    assert await zk.get_data(f"{base}/a") == b"2"
    result = await zk.multi([Check(f"{base}/a", 1), Delete(f"{base}/b")])
    assert result.applied
    assert await zk.get(f"{base}/b") is None
    assert (await zk.multi([])).applied  # nothing sent


@pytest.mark.parametrize(
    ("failing", "error"),
    [
        ("exists", ZookeeperNodeExistsError),
        ("no_node", ZookeeperNoNodeError),
        ("bad_version", ZookeeperBadVersionError),
        ("delete_missing", ZookeeperNoNodeError),
    ],
)
async def test_a_failed_multi_leaves_nothing_done_and_names_the_failed_node(
    zk: ZkClient, unique_group_id: str, failing: str, error: type[Exception]
) -> None:
    base = f"/consumers/{unique_group_id}/m"
    await zk.ensure_path(base)
    await zk.create(f"{base}/taken", b"theirs")
    bad = {
        "exists": Create(f"{base}/taken", b"mine"),
        "no_node": SetData(f"{base}/missing", b"x"),
        "bad_version": Check(f"{base}/taken", 7),
        "delete_missing": Delete(f"{base}/missing"),
    }[failing]
    ops = [
        Create(f"{base}/new", b"1", ephemeral=True),
        SetData(f"{base}/taken", b"changed"),
        bad,
        Create(f"{base}/after", b"2"),
    ]
    result = await zk.multi(ops)
    assert not result.applied
    assert result.failed_at == 2 and result.failed_op == bad
    assert type(result.error) is error
    assert result.error is not None and result.error.path == bad.path
    with pytest.raises(error):
        result.raise_for_failure()
    # Nothing of it happened: neither the operations before the failed one nor after it.
    assert await zk.get(f"{base}/new") is None
    assert await zk.get(f"{base}/after") is None
    got = await zk.get(f"{base}/taken")
    assert got is not None and got[0] == b"theirs" and got[1].version == 0


# -- claims, fencing bumps, deletes --------------------------------------------------------


def _owner_nodes(zk: ZkClient, group: str, consumer: str) -> OwnerNodes:
    config = ConsumerConfig(
        group_id=group, zookeeper_connect="127.0.0.1:1", rebalance_backoff_ms=5000
    )

    async def unchanged() -> bool:
        return False

    return OwnerNodes(
        config=config,
        consumer_id=consumer,
        zk=zk,
        membership=SimpleNamespace(registered_session=zk.session_id),  # type: ignore[arg-type]
        membership_changed=unchanged,
        is_closing=lambda: False,
        lap=lambda phase: None,
    )


async def test_claims_and_fencing_bumps_are_one_transaction(
    zk: ZkClient, unique_group_id: str
) -> None:
    group = unique_group_id
    mine = {_tp(p): _tid("a") for p in range(4)}
    fences = [layout.fencing_path(group, TOPIC, p) for p in range(4)]
    for path in fences:  # claimed before: the fencing nodes exist
        await zk.set_or_create(path, b"old")
    await zk.ensure_path(layout.owners_dir(group, TOPIC))
    owners = _owner_nodes(zk, group, "a")
    calls = _Calls(zk, "multi", "create_ephemeral_expect_conflict", "bump")
    assert await owners.claim(mine, []) == set()
    tokens = await owners.fence(mine)
    assert calls.counts == {"multi": 1, "create_ephemeral_expect_conflict": 0, "bump": 0}
    assert tokens == {_tp(p): 1 for p in range(4)}
    assert await _versions(zk, fences) == [1, 1, 1, 1]
    for p in range(4):  # the original's owner node, byte for byte
        assert await zk.get_data(layout.owner_path(group, TOPIC, p)) == b"a-0"
    # Released in one transaction too.
    await owners.delete_owned(mine)
    assert calls.counts["multi"] == 2
    assert await zk.get_children(layout.owners_dir(group, TOPIC)) == []


async def test_nodes_read_with_the_claims_see_them_applied(
    zk: ZkClient, other: ZkClient, unique_group_id: str
) -> None:
    """The offsets are read right behind the claim transaction, in the same round trip, and
    after it was applied (the owner nodes read there hold our claims)."""
    group = unique_group_id
    mine = {_tp(p): _tid("a") for p in range(2)}
    for p in range(2):
        await zk.set_or_create(layout.fencing_path(group, TOPIC, p), b"old")
    await zk.set_or_create(layout.offset_path(group, TOPIC, 0), b"42")
    await zk.ensure_path(layout.owners_dir(group, TOPIC))
    reads = [
        layout.offset_path(group, TOPIC, 0),
        layout.offset_path(group, TOPIC, 1),
        layout.owner_path(group, TOPIC, 1),
    ]
    owners = _owner_nodes(zk, group, "a")
    calls = _Calls(zk, "multi", "get_many", "get")
    assert await owners.claim(mine, [], read_after=reads) == set()
    assert owners.read_with_claims == {reads[0]: b"42", reads[1]: None, reads[2]: b"a-0"}
    assert await owners.fence(mine) == {_tp(0): 1, _tp(1): 1}
    assert calls.counts == {"multi": 0, "get_many": 0, "get": 0}
    await owners.delete_owned(mine)

    # A claim that had to be made node by node reads nothing with it (the caller reads after
    # the fencing bumps).
    await other.create(layout.owner_path(group, TOPIC, 0), b"b-0", ephemeral=True)
    owners.waits_left = 0
    assert await owners.claim(mine, [], read_after=reads) is None
    assert owners.read_with_claims is None


async def test_a_claim_transaction_that_fails_on_one_node_creates_no_owner_node(
    zk: ZkClient, other: ZkClient, unique_group_id: str
) -> None:
    group = unique_group_id
    mine = {_tp(p): _tid("a") for p in range(3)}
    fences = [layout.fencing_path(group, TOPIC, p) for p in range(3)]
    for path in fences:
        await zk.set_or_create(path, b"old")
    blocked = layout.owner_path(group, TOPIC, 1)
    await other.create(blocked, b"b-0", ephemeral=True)  # another member has not released

    result = await zk.multi(claim_transaction(group, mine))
    assert not result.applied
    assert isinstance(result.error, ZookeeperNodeExistsError) and result.error.path == blocked
    assert await zk.get_children(layout.owners_dir(group, TOPIC)) == ["1"]
    assert await _versions(zk, fences) == [0, 0, 0]  # no former owner fenced

    # The claim step then creates each node alone, keeps the free ones while it may wait,
    # and deletes them again when it gives up: nothing of the attempt stays.
    owners = _owner_nodes(zk, group, "a")
    owners.waits_left = 0
    blocking: list[str] = []
    assert await owners.claim(mine, blocking) is None
    assert blocking == [blocked]
    assert await zk.get_children(layout.owners_dir(group, TOPIC)) == ["1"]
    assert await other.get_data(blocked) == b"b-0"
    assert await _versions(zk, fences) == [0, 0, 0]

    # Once released, the wait ends and the claim holds. The round after the wait is one
    # transaction: the claim waited for, and the fences of all three (those claimed before
    # the wait too); the offsets are read right behind it.
    owners.waits_left = 1

    async def release_soon() -> None:
        await anyio.sleep(0.3)
        await other.delete(blocked)

    offset = layout.offset_path(group, TOPIC, 1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(release_soon)
        assert await owners.claim(mine, [], read_after=[offset]) == {_tp(1)}
    assert owners.read_with_claims == {offset: None}
    calls = _Calls(zk, "multi", "bump")
    assert await owners.fence(mine) == {_tp(p): 1 for p in range(3)}
    assert calls.counts == {"multi": 0, "bump": 0}
    assert await _versions(zk, fences) == [1, 1, 1]
    assert sorted(await zk.get_children(layout.owners_dir(group, TOPIC)) or []) == ["0", "1", "2"]


async def test_a_first_claim_creates_the_fencing_nodes(zk: ZkClient, unique_group_id: str) -> None:
    """No fencing node yet (a new group): the transaction fails whole, each node is created
    alone."""
    group = unique_group_id
    mine = {_tp(p): _tid("a") for p in range(2)}
    owners = _owner_nodes(zk, group, "a")
    assert await owners.claim(mine, []) == set()
    assert await owners.fence(mine) == {_tp(0): 0, _tp(1): 0}
    assert await zk.get_data(layout.fencing_path(group, TOPIC, 1)) == b"a-0"
    assert sorted(await zk.get_children(layout.owners_dir(group, TOPIC)) or []) == ["0", "1"]


async def test_deleting_owner_nodes_one_of_which_is_gone_deletes_the_others(
    zk: ZkClient, unique_group_id: str
) -> None:
    group = unique_group_id
    for p in range(3):
        await zk.create(layout.owner_path(group, TOPIC, p), b"a-0", ephemeral=True)
    await zk.delete(layout.owner_path(group, TOPIC, 1))
    owners = _owner_nodes(zk, group, "a")
    await owners.delete_owned([_tp(0), _tp(1), _tp(2)])
    assert await zk.get_children(layout.owners_dir(group, TOPIC)) == []


# -- fenced offset commits ---------------------------------------------------------------


async def _claimed(zk: ZkClient, group: str, partitions: range) -> dict[TopicPartition, int]:
    """Fencing tokens as a claim leaves them."""
    return {_tp(p): await zk.bump(layout.fencing_path(group, TOPIC, p), b"a-0") for p in partitions}


async def test_a_fenced_commit_is_one_transaction(zk: ZkClient, unique_group_id: str) -> None:
    group = unique_group_id
    fences = await _claimed(zk, group, range(3))
    store = ZookeeperOffsetStore(zk, group)
    # A new group: no offset node, not even the topic's node.
    assert await store.fetch(fences) == dict.fromkeys(fences, -1)
    assert await store.commit({_tp(0): 5, _tp(1): 6, _tp(2): 7}, fences=fences) == 3
    for p, offset in enumerate((b"5", b"6", b"7")):  # the original's decimal string
        assert await zk.get_data(layout.offset_path(group, TOPIC, p)) == offset

    calls = _Calls(zk, "multi", "get_many", "get", "exists", "get_data")
    assert await store.commit({_tp(0): 50, _tp(1): 6, _tp(2): 70}, fences=fences) == 2
    assert calls.counts == {"multi": 1, "get_many": 0, "get": 0, "exists": 0, "get_data": 0}
    # Nothing changed: the fences are only read, in one request (no transaction, nothing
    # logged).
    assert await store.commit({_tp(0): 50, _tp(1): 6, _tp(2): 70}, fences=fences) == 0
    assert calls.counts == {"multi": 1, "get_many": 1, "get": 0, "exists": 0, "get_data": 0}
    assert await zk.get_data(layout.offset_path(group, TOPIC, 2)) == b"70"


async def test_a_fenced_commit_of_a_zombie_is_refused_in_one_round_trip(
    zk: ZkClient, other: ZkClient, unique_group_id: str
) -> None:
    group = unique_group_id
    fences = await _claimed(zk, group, range(1))
    store = ZookeeperOffsetStore(zk, group)
    await store.fetch(fences)
    assert await store.commit({_tp(0): 100}, fences=fences) == 1
    # Another member claims the partition: its fence moves on.
    await other.bump(layout.fencing_path(group, TOPIC, 0), b"b-0")
    await other.set_data(layout.offset_path(group, TOPIC, 0), b"120")

    calls = _Calls(
        zk, "multi", "get_many", "get", "exists", "get_data", "set_data", "set_or_create"
    )
    with pytest.raises(CommitFencedError) as info:
        await store.commit({_tp(0): 90}, fences=fences)
    assert info.value.fenced == {_tp(0)}
    assert calls.counts == {
        "multi": 1,
        "get_many": 0,
        "get": 0,
        "exists": 0,
        "get_data": 0,
        "set_data": 0,
        "set_or_create": 0,
    }
    assert await zk.get_data(layout.offset_path(group, TOPIC, 0)) == b"120"  # never moved back


async def test_a_fenced_commit_writes_the_partitions_still_owned(
    zk: ZkClient, other: ZkClient, unique_group_id: str
) -> None:
    group = unique_group_id
    fences = await _claimed(zk, group, range(4))
    store = ZookeeperOffsetStore(zk, group)
    await store.fetch(fences)
    assert await store.commit(dict.fromkeys(fences, 10), fences=fences) == 4
    for p in (1, 3):  # two of them claimed by another member since
        await other.bump(layout.fencing_path(group, TOPIC, p), b"b-0")

    calls = _Calls(zk, "multi", "get_many", "get")
    with pytest.raises(CommitFencedError) as info:
        await store.commit(dict.fromkeys(fences, 20), fences=fences)
    assert info.value.fenced == {_tp(1), _tp(3)}
    # The failed transaction, one read of the other fences, the transaction without them.
    assert calls.counts == {"multi": 2, "get_many": 1, "get": 0}
    got = [await zk.get_data(layout.offset_path(group, TOPIC, p)) for p in range(4)]
    assert got == [b"20", b"10", b"20", b"10"]
    assert store.commits == 6


async def test_a_fenced_commit_creates_an_offset_node_deleted_meanwhile(
    zk: ZkClient, unique_group_id: str
) -> None:
    group = unique_group_id
    fences = await _claimed(zk, group, range(2))
    store = ZookeeperOffsetStore(zk, group)
    await store.fetch(fences)
    assert await store.commit({_tp(0): 1, _tp(1): 1}, fences=fences) == 2
    await zk.delete(layout.offset_path(group, TOPIC, 1))  # an operator's offset reset
    assert await store.commit({_tp(0): 2, _tp(1): 2}, fences=fences) == 2
    assert await zk.get_data(layout.offset_path(group, TOPIC, 1)) == b"2"


# -- one send per loop turn ----------------------------------------------------------------


async def test_the_requests_of_one_loop_turn_go_out_in_one_write(
    zk: ZkClient, unique_group_id: str
) -> None:
    base = f"/consumers/{unique_group_id}/w"
    await zk.ensure_path(base)
    writer = zk.raw.session.conn.writer
    writes: list[int] = []
    write = writer.write

    def counted(data: bytes) -> None:
        writes.append(len(data))
        write(data)

    writer.write = counted
    try:
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(zk.create, f"{base}/n{i}", b"x")
    finally:
        writer.write = write
    assert len(await zk.get_children(base) or []) == 20
    assert len(writes) < 20
    assert writes and max(writes) > 20 * len(f"{base}/n0")


# -- one request for many reads ------------------------------------------------------------


@pytest.mark.parametrize("server", ["3.8", "3.5"])
async def test_many_reads_in_one_request(
    zk: ZkClient, unique_group_id: str, server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = f"/consumers/{unique_group_id}/r"
    await zk.ensure_path(base)
    await zk.create(f"{base}/a", b"1")
    await zk.create(f"{base}/b", b"")
    await zk.set_data(f"{base}/b", b"2")
    if server == "3.5":  # no multiRead: one request each
        monkeypatch.setattr(zk.raw.session.conn, "version_info", (3, 5, 9))
    calls = _Calls(zk, "get")
    got = await zk.get_many([f"{base}/a", f"{base}/missing", f"{base}/b"])
    assert calls.counts["get"] == (0 if server == "3.8" else 3)
    assert [None if g is None else (g[0], g[1].version) for g in got] == [
        (b"1", 0),
        None,
        (b"2", 1),
    ]
    assert await zk.get_many([]) == []


async def test_children_and_their_version_from_one_snapshot(
    zk: ZkClient, unique_group_id: str
) -> None:
    ids = layout.ids_dir(unique_group_id)
    assert await zk.get_children_and_stat(ids) is None
    await zk.ensure_path(ids)
    for name in ("m1", "m2", "m3"):
        await zk.create(f"{ids}/{name}", b"{}", ephemeral=True)
    await zk.delete(f"{ids}/m2")
    got = await zk.get_children_and_stat(ids)
    assert got is not None
    children, stat = got
    assert sorted(children) == ["m1", "m3"]
    assert stat.child_version == 4  # three creations and a deletion
