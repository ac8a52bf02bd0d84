"""Bad input that loses nothing: malformed offset nodes, oversized records, bad connect strings.

- A malformed offset node leaves its partition unowned (not skipped by ``auto.offset.reset``)
  until it is fixed, unless ``offsets.malformed.reset`` opts in to the reset.
- A record larger than ``fetch.message.max.bytes`` is delivered (KIP-74), against a real
  broker.
- Every command that takes ``--zookeeper`` / ``--bootstrap-server`` refuses a malformed value
  at once (exit status 2, one ``Error:`` line), by the validators ``ConsumerConfig`` uses.
- The pytest plugin's fixtures fail with a hint when pytest-asyncio would not run the test.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import anyio
import click
import pytest
from _support import config_for, owner_nodes, wait_settled
from click.testing import CliRunner

from aiozkconsumer import (
    ConnectorState,
    TopicPartition,
    ZookeeperConsumerConnector,
)
from aiozkconsumer.cli import cli
from aiozkconsumer.config import (
    validate_bootstrap_servers,
    validate_group_id,
    validate_zookeeper_connect,
)
from aiozkconsumer.errors import InvalidConfigError, MalformedZookeeperDataError
from aiozkconsumer.offsets import NO_OFFSET, ZookeeperOffsetStore
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.testing.plugin import ASYNCIO_HINT
from aiozkconsumer.zk import layout

integration = pytest.mark.integration

GARBAGE = b"12abc\xff"
"""What an operator's broken script left in an offset node: not a number (nor UTF-8)."""


# -- the ZooKeeper offset store (no servers) ---------------------------------------------------


class FakeZk:
    """The ZkClient calls the ZooKeeper offset store makes, over a dict."""

    def __init__(self, nodes: dict[str, bytes]) -> None:
        self.nodes = nodes

    async def get_data(self, path: str) -> bytes | None:
        return self.nodes.get(path)

    async def get_many(self, paths: Iterable[str]) -> list[tuple[bytes, None] | None]:
        # ZkClient.get_many (one multiRead): per path its data and stat, None when missing.
        datas = [self.nodes.get(path) for path in paths]
        return [None if data is None else (data, None) for data in datas]

    async def set_or_create(self, path: str, data: bytes) -> None:
        self.nodes[path] = data


async def test_zk_store_refuses_to_read_a_malformed_node_as_no_offset() -> None:
    t0, t1, t2 = (TopicPartition("t", p) for p in range(3))
    path = layout.offset_path("g", "t", 1)
    zk = FakeZk({layout.offset_path("g", "t", 0): b"7", path: GARBAGE})
    store = ZookeeperOffsetStore(zk, "g")  # type: ignore[arg-type]
    with pytest.raises(MalformedZookeeperDataError) as info:
        await store.fetch([t0, t1, t2])
    assert info.value.path == path
    assert info.value.data == GARBAGE
    assert path in str(info.value) and repr(GARBAGE) in str(info.value)
    # Without the bad one, the others read as usual.
    assert await store.fetch([t0, t2]) == {t0: 7, t2: NO_OFFSET}
    # Its checkpoint is gone: a commit of it (after an opt-in reset) overwrites the node.
    assert await store.commit({t1: 3}) == 1
    assert zk.nodes[path] == b"3"


# -- malformed offset node, against ZooKeeper and Kafka ----------------------------------------


async def _topic_with_records(cluster: LocalCluster, topic: str, per_partition: int) -> None:
    await cluster.create_topic(topic, 3)
    await cluster.produce_to_partitions(
        topic, {p: [(None, b"%d-%d" % (p, i)) for i in range(per_partition)] for p in range(3)}
    )


async def _set_offset_node(zk_client: Any, group: str, topic: str, p: int, data: bytes) -> str:
    path = layout.offset_path(group, topic, p)
    await zk_client.ensure_path(layout.offsets_dir(group, topic))
    if await zk_client.exists(path):
        await zk_client.set_data(path, data)
    else:
        await zk_client.create(path, data)
    return path


class Delivered:
    """(partition, offset) pairs handed out by the streams, with a wait for a condition."""

    def __init__(self) -> None:
        self.pairs: list[tuple[int, int]] = []
        self._grew = anyio.Event()

    async def drain(self, stream: KafkaStream) -> None:
        async for msg in stream:
            self.pairs.append((msg.partition, msg.offset))
            self._grew.set()
            self._grew = anyio.Event()

    def of(self, partition: int) -> list[int]:
        return [o for p, o in self.pairs if p == partition]

    async def wait_until(self, predicate: Callable[[], bool], limit_s: float = 60) -> None:
        with anyio.fail_after(limit_s):
            while not predicate():
                await self._grew.wait()


async def _wait_owns(c: ZookeeperConsumerConnector, tp: TopicPartition) -> None:
    with anyio.fail_after(60):
        while tp not in c.statistics().owned_partitions or c.state is not ConnectorState.RUNNING:
            await c.wait_for_state_change()


@integration
async def test_malformed_offset_node_leaves_its_partition_unowned_and_skips_nothing(
    zk_kafka_cluster: LocalCluster,
    zk_client: Any,
    unique_topic: str,
    unique_group_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    group, topic = unique_group_id, unique_topic
    await _topic_with_records(zk_kafka_cluster, topic, 10)
    # largest: what the malformed node used to be read as "no offset" with, skipping 10 records.
    for p in (0, 2):
        await _set_offset_node(zk_client, group, topic, p, b"0")
    path = await _set_offset_node(zk_client, group, topic, 1, GARBAGE)
    bad = TopicPartition(topic, 1)
    config = config_for(zk_kafka_cluster, group, auto_offset_reset="largest")
    delivered = Delivered()
    async with (
        ZookeeperConsumerConnector(config) as a,
        ZookeeperConsumerConnector(config) as b,
        anyio.create_task_group() as tg,
    ):
        for c in (a, b):
            streams = await c.create_message_streams({topic: 1})
            tg.start_soon(delivered.drain, streams[topic][0])
        await wait_settled([a, b])

        # The member whose plan has partition 1 left it unclaimed, loudly; the other one did
        # not take it (it is not its in the plan); the other partitions are consumed.
        stats = {c: c.statistics() for c in (a, b)}
        holder = next(c for c in (a, b) if bad in stats[c].unowned_partitions)
        other = b if holder is a else a
        reason = stats[holder].unowned_partitions[bad]
        assert path in reason and repr(GARBAGE) in reason
        assert stats[other].unowned_partitions == {}
        assert all(c.state is ConnectorState.RUNNING for c in (a, b))
        owned = {tp.partition for c in (a, b) for tp in stats[c].owned_partitions}
        assert owned == {0, 2}
        assert sorted(await owner_nodes(zk_client, group, topic)) == [0, 2]
        await delivered.wait_until(lambda: len(delivered.pairs) == 20)
        assert delivered.of(0) == delivered.of(2) == list(range(10))
        assert delivered.of(1) == []
        assert any(path in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
        for c in (a, b):
            await c.commit_offsets()
        assert await zk_client.get_data(path) == GARBAGE  # nobody wrote over it

        # Fixed by an operator: the next rebalance claims it from that offset.
        await zk_client.set_data(path, b"4")
        holder.request_rebalance("offset node fixed")
        await _wait_owns(holder, bad)
        assert holder.statistics().unowned_partitions == {}
        await delivered.wait_until(lambda: len(delivered.of(1)) == 6)
        assert delivered.of(1) == list(range(4, 10))
        tg.cancel_scope.cancel()
    assert layout.decode_offset(await zk_client.get_data(path)) == 10


@integration
async def test_malformed_offset_node_is_reset_when_the_user_opts_in(
    zk_kafka_cluster: LocalCluster,
    zk_client: Any,
    unique_topic: str,
    unique_group_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    group, topic = unique_group_id, unique_topic
    await _topic_with_records(zk_kafka_cluster, topic, 5)
    path = await _set_offset_node(zk_client, group, topic, 1, GARBAGE)
    config = config_for(
        zk_kafka_cluster, group, auto_offset_reset="smallest", offsets_malformed_reset=True
    )
    delivered = Delivered()
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({topic: 1})
        tg.start_soon(delivered.drain, streams[topic][0])
        await delivered.wait_until(lambda: len(delivered.pairs) == 15)
        assert delivered.of(1) == list(range(5))  # from auto.offset.reset=smallest
        assert c.statistics().unowned_partitions == {}
        assert len(c.statistics().owned_partitions) == 3
        tg.cancel_scope.cancel()
    assert any(
        path in r.getMessage() and "offsets.malformed.reset=true" in r.getMessage()
        for r in caplog.records
        if r.levelname == "ERROR"
    )
    assert layout.decode_offset(await zk_client.get_data(path)) == 5  # the commit replaced it


@integration
async def test_malformed_zookeeper_offset_node_with_dual_storage_is_left_unowned_too(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    group, topic = unique_group_id, unique_topic
    await _topic_with_records(zk_kafka_cluster, topic, 3)
    path = await _set_offset_node(zk_client, group, topic, 2, GARBAGE)
    config = config_for(zk_kafka_cluster, group, offsets_storage="kafka")  # dual commit
    assert config.effective_dual_commit_enabled
    async with ZookeeperConsumerConnector(config) as c:
        await c.create_message_streams({topic: 1})
        stats = c.statistics()
        assert [tp.partition for tp in stats.owned_partitions] == [0, 1]
        assert list(stats.unowned_partitions) == [TopicPartition(topic, 2)]
        assert path in stats.unowned_partitions[TopicPartition(topic, 2)]


# -- a record larger than fetch.message.max.bytes ----------------------------------------------


@integration
async def test_a_record_larger_than_the_fetch_size_is_delivered_whole(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    """KIP-74 (brokers 0.10.1+, Fetch v3+): the first batch of a response comes whole even when
    larger than the partition's ``maxBytes``; a later partition's big batch waits until it is
    the first data of a response (partition 0 has data too). Never skipped, never an error."""
    topic = unique_topic
    fetch_size = 1024
    big = b"B" * (20 * fetch_size)
    await zk_kafka_cluster.create_topic(topic, 2)
    for i in range(5):  # separate sends: separate batches
        await zk_kafka_cluster.produce_to_partitions(topic, {0: [(None, b"small-%d" % i)]})
    await zk_kafka_cluster.produce_to_partitions(topic, {1: [(None, b"before")]})
    await zk_kafka_cluster.produce_to_partitions(topic, {1: [(None, big)]})
    await zk_kafka_cluster.produce_to_partitions(topic, {1: [(None, b"after")]})
    config = config_for(zk_kafka_cluster, unique_group_id, fetch_message_max_bytes=fetch_size)
    got: dict[int, list[bytes]] = {0: [], 1: []}
    async with ZookeeperConsumerConnector(config) as c:
        streams = await c.create_message_streams({topic: 1})
        with anyio.fail_after(60):
            async for msg in streams[topic][0]:
                assert msg.value is not None
                got[msg.partition].append(msg.value)
                if len(got[0]) + len(got[1]) == 8:
                    break
    assert got[0] == [b"small-%d" % i for i in range(5)]
    assert got[1] == [b"before", big, b"after"]
    assert len(big) > fetch_size


# -- malformed connect strings on the command line ---------------------------------------------


def _commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> Iterator[Any]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


_CONNECT = {
    # option: (its parameter name, config key, validator, a valid value)
    "--zookeeper": ("zookeeper", "zookeeper.connect", validate_zookeeper_connect, "127.0.0.1:1"),
    "--bootstrap-server": (
        "bootstrap_server",
        "bootstrap.servers",
        validate_bootstrap_servers,
        "127.0.0.1:1",
    ),
}
_BAD_CONNECT = ["foo", "host:notaport", ""]
# demo.py declares its own --zookeeper/--bootstrap-server without the shared click types:
# these pass its checks and fail later (a traceback, or another usage error).
_DEMO_GAPS: set[tuple[str, str]] = set()


def _connect_cases() -> Iterator[Any]:
    for path, command in _commands():
        names = {p.name for p in command.params}
        for option, (name, *_rest) in _CONNECT.items():
            if name not in names:
                continue
            for value in _BAD_CONNECT:
                marks = []
                if path == ("demo",) and (option, value) in _DEMO_GAPS:
                    marks.append(pytest.mark.xfail(strict=True, reason="demo.py: own options"))
                case_id = f"{' '.join(path)} {option}={value!r}"
                yield pytest.param(path, option, value, id=case_id, marks=marks)


def _reason(validate: Callable[[str], str], key: str, value: str) -> str:
    with pytest.raises(InvalidConfigError) as info:
        validate(value)
    return str(info.value).removeprefix(f"{key}: ")


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


def test_every_command_with_a_connect_option_is_covered() -> None:
    covered = {case.values[0] for case in _connect_cases()}
    assert {("groups", "list"), ("offsets", "check"), ("consume",), ("demo",)} <= covered


@pytest.mark.parametrize(("path", "option", "value"), list(_connect_cases()))
def test_malformed_connect_strings_exit_2_with_one_line(
    path: tuple[str, ...], option: str, value: str
) -> None:
    _, key, validate, _ = _CONNECT[option]
    companion = next(o for o in _CONNECT if o != option)  # so demo gets past its own checks
    args = [*path, companion, _CONNECT[companion][3], option, value]
    if path == ("demo",):
        args += ["--records", "1", "--stall-timeout", "5", "--no-progress"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = _error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert option in lines[0] or key in lines[0], lines[0]
    assert _reason(validate, key, value) in lines[0]


@pytest.mark.parametrize("env", ["AIOZKCONSUMER_ZOOKEEPER", "AIOZKCONSUMER_BOOTSTRAP_SERVER"])
def test_malformed_connect_strings_from_the_environment_exit_2(env: str) -> None:
    result = CliRunner().invoke(cli, ["groups", "list"], env={env: "host:notaport"})
    assert result.exit_code == 2, result.output
    assert len(_error_lines(result.stderr)) == 1
    assert "port 'notaport' of 'host:notaport' must be a number" in result.stderr


def _group_cases() -> Iterator[Any]:
    for path, command in _commands():
        for param in command.params:
            if param.name in ("group", "group_ids") and path != ("demo",):
                yield pytest.param(path, param.opts[0], id=" ".join(path))


@pytest.mark.parametrize("value", ["a b", "a/b", ".", "grüppe"])
@pytest.mark.parametrize(("path", "option"), list(_group_cases()))
def test_group_ids_are_checked_by_the_configs_rule(
    path: tuple[str, ...], option: str, value: str
) -> None:
    extra = ["earliest", "-t", "t"] if path == ("offsets", "update") else []
    extra += ["--topic", "t"] if path == ("consume",) else []
    result = CliRunner().invoke(cli, [*path, *extra, option, value, "--zookeeper", "h:1"])
    assert result.exit_code == 2, result.output
    lines = _error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert _reason(validate_group_id, "group.id", value) in lines[0]


# -- the pytest plugin without pytest-asyncio (auto mode) --------------------------------------


_SUITE = """\
async def test_unmarked(zk_kafka_cluster):
    pass

def test_sync_with_the_async_client(zk_client):
    pass
"""


def _run_suite(tmp_path: Path, ini: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pyproject.toml").write_text(f"[tool.pytest.ini_options]\n{ini}")
    (tmp_path / "test_suite.py").write_text(_SUITE)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_fixtures_fail_with_the_hint_in_strict_mode(tmp_path: Path) -> None:
    done = _run_suite(
        tmp_path, 'asyncio_default_fixture_loop_scope = "function"\n', "-k", "unmarked"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "asyncio_mode is 'strict', and test_unmarked is not marked" in done.stdout
    assert 'asyncio_mode = "auto"' in done.stdout
    assert "1 error" in done.stdout  # at setup: no cluster was started for it


def test_fixtures_fail_with_the_hint_without_pytest_asyncio(tmp_path: Path) -> None:
    done = _run_suite(tmp_path, "", "-p", "no:asyncio")
    assert done.returncode == 1, done.stdout + done.stderr
    # Both tests fail at setup with the hint (the summary may repeat it: CI=true widens it).
    assert done.stdout.count("ERROR at setup of") == 2
    assert "pytest-asyncio is not installed" in done.stdout
    assert ASYNCIO_HINT.splitlines()[-1] in done.stdout
    assert "2 errors" in done.stdout
