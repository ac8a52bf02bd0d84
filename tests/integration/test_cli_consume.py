"""``aiozkconsumer consume``: partition reads, output formats, pipes, the end, unreachable brokers.

The formatters, sinks and rules of ``tools/console.py`` are tested without servers; the command
runs against the session cluster as a subprocess (``.venv/bin/aiozkconsumer``), so that stdout
is a real file descriptor or pipe, as for an operator.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaProducer
from click.testing import CliRunner

from aiozkconsumer.cli import cli
from aiozkconsumer.errors import InvalidConfigError
from aiozkconsumer.records import MessageAndMetadata, TopicPartition
from aiozkconsumer.testing import LocalCluster
from aiozkconsumer.tools.console import (
    FdSink,
    JsonFormatter,
    KcatFormatter,
    MessageFormatter,
    StreamSink,
    at_log_end,
    parse_offset_spec,
    records_written,
    resolve_start_offset,
    rewind_offsets,
)
from aiozkconsumer.zk import layout

integration = pytest.mark.integration

CLI = str(Path(sys.executable).with_name("aiozkconsumer"))
RUN_LIMIT_S = 60

# Three records that exercise every corner of the output formats: a key that is not UTF-8,
# headers (one binary, one null), a null key, a null value (tombstone), an empty header value.
SPECIAL: list[tuple[bytes | None, bytes | None, list[tuple[str, Any]], int]] = [
    (b"\xff\x00k", "vé".encode(), [("trace", b"abc"), ("bin", b"\x00\xff"), ("nil", None)], 1),
    (None, b"no key", [], 2),
    (b"k2", None, [("h", b"")], 3),
]
TS = 1700000000000


def _msg(
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[str, Any], ...] = (),
    *,
    offset: int = 42,
    ts_type: int = 0,
) -> MessageAndMetadata:
    return MessageAndMetadata("t", 3, offset, key, value, TS, ts_type, headers)


SPECIAL_MSGS = [
    MessageAndMetadata("t", 0, i, key, value, TS + ts, 0, tuple(headers))
    for i, (key, value, headers, ts) in enumerate(SPECIAL)
]


def _expected_json(topic: str) -> str:
    return (
        f'{{"topic":"{topic}","partition":0,"offset":0,"timestamp":1700000000001,'
        '"timestamp_type":"CreateTime","key":"/wBr","key_encoding":"base64","value":"vé",'
        '"value_encoding":"utf-8","headers":[{"key":"trace","value":"abc","value_encoding":'
        '"utf-8"},{"key":"bin","value":"AP8=","value_encoding":"base64"},{"key":"nil",'
        '"value":null,"value_encoding":null}]}\n'
        f'{{"topic":"{topic}","partition":0,"offset":1,"timestamp":1700000000002,'
        '"timestamp_type":"CreateTime","key":null,"key_encoding":null,"value":"no key",'
        '"value_encoding":"utf-8","headers":[]}\n'
        f'{{"topic":"{topic}","partition":0,"offset":2,"timestamp":1700000000003,'
        '"timestamp_type":"CreateTime","key":"k2","key_encoding":"utf-8","value":null,'
        '"value_encoding":null,"headers":[{"key":"h","value":"","value_encoding":"utf-8"}]}\n'
    )


KCAT_FORMAT = r"%t|%p|%o|%k|%K|%s|%S|%h|%T\n"


def _expected_kcat(topic: str) -> bytes:
    t = topic.encode()
    return (
        t + b"|0|0|\xff\x00k|3|v\xc3\xa9|3|trace=abc,bin=\x00\xff,nil=NULL|1700000000001\n"
        + t + b"|0|1||-1|no key|6||1700000000002\n"
        + t + b"|0|2|k2|2||-1|h=|1700000000003\n"
    )  # fmt: skip


EXPECTED_HEADERS_TEXT = (
    b"trace:abc,bin:\x00\xff,nil:null\t\xff\x00k\tv\xc3\xa9\n"
    b"NO_HEADERS\tnull\tno key\n"
    b"h:\tk2\tnull\n"
)


# ---- formatters (no servers) -----------------------------------------------------------------


def test_json_formatter_writes_text_or_base64_and_says_which() -> None:
    out = b"".join(JsonFormatter().format(m) for m in SPECIAL_MSGS)
    assert out.decode() == _expected_json("t")


def test_json_formatter_without_timestamp_gives_nulls() -> None:
    line = JsonFormatter().format(_msg(b"k", b"v", ts_type=-1))
    assert b'"timestamp":null,"timestamp_type":null' in line


def test_kcat_format_tokens_and_escapes() -> None:
    out = b"".join(KcatFormatter(KCAT_FORMAT).format(m) for m in SPECIAL_MSGS)
    assert out == _expected_kcat("t")
    fmt = KcatFormatter(r"100%% %R\x41\x4a\tB\\n\q")
    assert fmt.format(_msg(None, b"abcd")) == b"100% \x00\x00\x00\x04AJ\tB\\nq"
    assert fmt.format(_msg(None, None)).startswith(b"100% \xff\xff\xff\xff")
    assert KcatFormatter("%s").format(_msg(b"k", b"v")) == b"v"  # nothing added


@pytest.mark.parametrize(("fmt", "match"), [("%s %x", "%x"), ("%s\n%", "at the end")])
def test_kcat_format_errors_name_the_token(fmt: str, match: str) -> None:
    with pytest.raises(InvalidConfigError, match=match):
        KcatFormatter(fmt)


def test_message_formatter_prints_headers_before_the_key() -> None:
    fmt = MessageFormatter.from_properties({"print.headers": "true", "print.key": "true"})
    assert b"".join(fmt.format(m) for m in SPECIAL_MSGS) == EXPECTED_HEADERS_TEXT
    custom = MessageFormatter.from_properties(
        {"print.headers": "true", "headers.separator": ";", "null.literal": "<nil>"}
    )
    assert custom.format(SPECIAL_MSGS[0]) == b"trace:abc;bin:\x00\xff;nil:<nil>\tv\xc3\xa9\n"


# ---- pure rules (no servers) -----------------------------------------------------------------


def test_records_written_counts_only_complete_records() -> None:
    assert records_written([3, 3, 3], 0) == 0
    assert records_written([3, 3, 3], 5) == 1
    assert records_written([3, 3, 3], 6) == 2
    assert records_written([3, 3, 3], 9) == 3
    assert records_written([], 0) == 0


def test_rewind_goes_back_to_the_first_record_not_delivered_per_partition() -> None:
    def m(p: int, o: int) -> MessageAndMetadata:
        return MessageAndMetadata("t", p, o, None, b"", 0, 0, ())

    assert rewind_offsets([m(0, 7), m(1, 3), m(0, 8), m(1, 2)]) == {
        TopicPartition("t", 0): 7,
        TopicPartition("t", 1): 2,
    }
    assert rewind_offsets([]) == {}


def test_at_log_end() -> None:
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    assert at_log_end({}, {})
    assert at_log_end({a: 5, b: 0}, {a: 5, b: 0})
    assert not at_log_end({a: 4}, {a: 5})
    assert not at_log_end({a: -1}, {a: 0})  # position not known yet
    assert not at_log_end({a: 5}, {})  # end not known yet


def test_offset_specs() -> None:
    assert parse_offset_spec("earliest") == parse_offset_spec("beginning") == "earliest"
    assert parse_offset_spec("LATEST") == parse_offset_spec("end") == "latest"
    assert parse_offset_spec("17") == 17
    assert parse_offset_spec("-3") == -3
    with pytest.raises(ValueError, match="'soon'"):
        parse_offset_spec("soon")
    assert resolve_start_offset("earliest", 4, 10) == 4
    assert resolve_start_offset("latest", 4, 10) == 10
    assert resolve_start_offset(-3, 4, 10) == 7
    assert resolve_start_offset(-30, 4, 10) == 4
    assert resolve_start_offset(2, 4, 10) == 2  # out of range: the fetch says so


# ---- sinks (no servers) ----------------------------------------------------------------------


def _reader(fd: int, records: int, got: list[bytes]) -> threading.Thread:
    """A reader that reads ``records`` times from the pipe, then closes it (as ``head``)."""

    def read() -> None:
        try:
            got.extend(os.read(fd, 65536) for _ in range(records))
        finally:
            os.close(fd)

    thread = threading.Thread(target=read)
    thread.start()
    return thread


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pipe handoff is Linux's")
async def test_fd_sink_handoff_counts_only_what_the_reader_took() -> None:
    r, w = os.pipe()
    try:
        sink = FdSink(w, handoff=True)
        assert sink.handoff
        got: list[bytes] = []
        thread = _reader(r, 3, got)
        with anyio.fail_after(10):
            written = await sink.write_records([b"%d\n" % i for i in range(10)])
        thread.join()
        assert written == 3
        assert got == [b"0\n", b"1\n", b"2\n"]
        assert sink.closed and sink.reader_gone()
    finally:
        os.close(w)


async def test_fd_sink_without_handoff_counts_what_the_pipe_buffered() -> None:
    r, w = os.pipe()
    try:
        sink = FdSink(w, handoff=False)
        assert not sink.reader_gone()
        with anyio.fail_after(10):
            assert await sink.write_records([b"%d\n" % i for i in range(10)]) == 10
        os.close(r)
        assert sink.reader_gone()
        assert await sink.write_records([b"x\n"]) == 0
    finally:
        os.close(w)


async def test_fd_sink_stops_at_a_broken_pipe(tmp_path: Path) -> None:
    r, w = os.pipe()
    os.close(r)
    try:
        sink = FdSink(w)
        assert await sink.write_records([b"a\n", b"b\n"]) == 0
        assert sink.closed
    finally:
        os.close(w)
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT)
    try:
        file_sink = FdSink(fd, handoff=True)
        assert not file_sink.handoff  # not a pipe
        assert await file_sink.write_records([b"a\n", b"b\n"]) == 2
    finally:
        os.close(fd)
    assert (tmp_path / "out").read_bytes() == b"a\nb\n"


async def test_stream_sink_counts_records_before_a_broken_pipe() -> None:
    out: list[bytes] = []

    def write(data: bytes) -> None:
        if len(out) == 2:
            raise BrokenPipeError
        out.append(data)

    sink = StreamSink(write)
    assert await sink.write_records([b"a", b"b", b"c"]) == 2
    assert sink.closed


# ---- option checks (no servers) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic", "t", "--offset", "3"], "--offset needs --partition"),
        (["--whitelist", "t", "--partition", "0"], "give it with --topic"),
        (["--topic", "t", "--partition", "0", "-g", "g"], "reads without a group"),
        (["--topic", "t", "--partition", "0", "--from-beginning", "--offset", "1"], "together"),
        (["--topic", "t", "--partition", "0", "--offset", "soon"], "'soon'"),
        (["--topic", "t", "--format", "%s", "-o", "json"], "exclude each other"),
        (["--topic", "t", "--format", "%s", "--property", "print.key=true"], "--property"),
        (["--topic", "t", "--format", "%q"], "unsupported token %q"),
        (["--topic", "t", "--property", "print.header=true"], "print.header"),
    ],
)
def test_bad_options_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["consume", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_help_lists_the_format_tokens() -> None:
    result = CliRunner().invoke(cli, ["consume", "--help"])
    for token in ("%t", "%p", "%o", "%k", "%K", "%s", "%S", "%R", "%h", "%T", "%%"):
        assert f"\n    {token}  " in result.stdout, token
    assert "\n    \\n \\r \\t \\xHH  " in result.stdout


# ---- against the cluster ---------------------------------------------------------------------


async def _run(*args: str, limit_s: float = RUN_LIMIT_S) -> subprocess.CompletedProcess[bytes]:
    """Run ``aiozkconsumer`` (stdout a pipe) within ``limit_s``."""
    with anyio.fail_after(limit_s):
        return await anyio.run_process([CLI, *args], check=False)


async def _pipe(command: str, limit_s: float = RUN_LIMIT_S) -> subprocess.CompletedProcess[bytes]:
    """Run a bash pipeline with pipefail (the status is the first failing command's).

    In a process group of its own, killed whole if the limit passes (a consumer that did not
    notice its reader leave would else outlive the test).
    """
    args = ["bash", "-c", f"set -o pipefail; {command}"]
    proc = await anyio.open_process(args, stderr=None, start_new_session=True)
    try:
        assert proc.stdout is not None
        out = b""
        with anyio.fail_after(limit_s):
            async for chunk in proc.stdout:
                out += chunk
            code = await proc.wait()
        return subprocess.CompletedProcess(args, code, out, b"")
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with anyio.CancelScope(shield=True):
                await proc.wait()


async def _offsets(zk_client: Any, group: str, topic: str, partitions: int) -> dict[int, int]:
    result = {}
    for p in range(partitions):
        path = layout.offset_path(group, topic, p)
        if await zk_client.exists(path):
            result[p] = int(await zk_client.get_data(path))
    return result


async def _groups(zk_client: Any) -> list[str]:
    """The groups under ``/consumers`` (none before the first ever registered)."""
    if not await zk_client.exists(layout.CONSUMERS_PATH):
        return []
    return sorted(await zk_client.get_children(layout.CONSUMERS_PATH))


async def _fill(cluster: LocalCluster, topic: str, counts: list[int]) -> None:
    """Create ``topic`` with a partition per count; ``p`` gets ``counts[p]`` records."""
    await cluster.create_topic(topic, len(counts))
    records = {
        p: [(b"k%d-%d" % (p, i), b"v%d-%d" % (p, i)) for i in range(n)]
        for p, n in enumerate(counts)
    }
    await cluster.produce_to_partitions(topic, records)


async def _produce_special(cluster: LocalCluster, topic: str) -> None:
    await cluster.create_topic(topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    await producer.start()
    try:
        for key, value, headers, ts in SPECIAL:
            await producer.send_and_wait(
                topic, value, key=key, partition=0, timestamp_ms=TS + ts, headers=headers
            )
    finally:
        await producer.stop()


def _zk_args(cluster: LocalCluster) -> list[str]:
    args = ["--zookeeper", cluster.zookeeper_connect]
    if cluster.kraft:  # no brokers in ZooKeeper to find
        args += ["--bootstrap-server", cluster.bootstrap_servers]
    return args


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def black_hole() -> Iterator[str]:
    """``host:port`` of a listener that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)  # the kernel completes the handshakes; nobody reads
        yield f"127.0.0.1:{s.getsockname()[1]}"


@integration
@pytest.mark.parametrize("any_cluster", ["zookeeper", "kraft"], indirect=True)
async def test_partition_and_offset_read_the_exact_range_and_register_nothing(
    any_cluster: LocalCluster, any_zk_client: Any, unique_topic: str
) -> None:
    topic = unique_topic
    await _fill(any_cluster, topic, [2, 10, 0])
    consumers_before = await _groups(any_zk_client)
    common = [
        "consume", *_zk_args(any_cluster), "--topic", topic, "--partition", "1",
        "--property", "print.partition=true", "--property", "print.offset=true",
    ]  # fmt: skip

    ranged = await _run(*common, "--offset", "3", "--max-messages", "4")
    assert ranged.returncode == 0, ranged.stderr.decode()
    assert ranged.stdout.decode().splitlines() == [
        f"Partition:1\tOffset:{o}\tv1-{o}" for o in range(3, 7)
    ]
    assert ranged.stderr.decode().splitlines() == ["Processed a total of 4 messages"]

    tail = await _run(*common, "--offset", "-2", "--exit-at-end")
    assert tail.returncode == 0, tail.stderr.decode()
    assert tail.stdout.decode().splitlines() == [
        "Partition:1\tOffset:8\tv1-8",
        "Partition:1\tOffset:9\tv1-9",
    ]

    empty = await _run(*common[:-5], "2", "--offset", "earliest", "--exit-at-end")
    assert (empty.returncode, empty.stdout) == (0, b""), empty.stderr.decode()

    # While it runs (waiting at the log end), nothing of it is in ZooKeeper.
    proc = await anyio.open_process([CLI, *common, "--offset", "earliest"])
    try:
        assert proc.stdout is not None
        with anyio.fail_after(RUN_LIMIT_S):
            out = b""
            while out.count(b"\n") < 10:
                out += await proc.stdout.receive()
        assert out.decode().splitlines() == [f"Partition:1\tOffset:{o}\tv1-{o}" for o in range(10)]
        assert await _groups(any_zk_client) == consumers_before
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(RUN_LIMIT_S):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert await _groups(any_zk_client) == consumers_before


@integration
async def test_pipe_to_head_exits_and_commits_exactly_what_head_read(
    zk_kafka_cluster: LocalCluster,
    zk_client: Any,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    topic, group = unique_topic, unique_group_id
    await _fill(zk_kafka_cluster, topic, [20, 20])
    command = [
        CLI, "consume", "--zookeeper", zk_kafka_cluster.zookeeper_connect, "--topic", topic,
        "--group", group, "--property", "print.partition=true",
    ]  # fmt: skip
    err = tmp_path / "stderr"
    head = f"{shlex.join(command)} --from-beginning 2>{err} | head -3"
    result = await _pipe(head)
    assert result.returncode == 0, err.read_text()  # pipefail: ours and head's
    assert err.read_text() == "Processed a total of 3 messages\n"  # no traceback
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 3, lines
    per_partition = {p: sum(line.startswith(f"Partition:{p}\t") for line in lines) for p in (0, 1)}
    committed = await _offsets(zk_client, group, topic, 2)
    assert {p: committed.get(p, 0) for p in (0, 1)} == per_partition
    assert sum(committed.values()) == 3

    # The group goes on after those 3.
    again = await _pipe(f"{shlex.join(command)} 2>{err} | head -2")
    assert again.returncode == 0, err.read_text()
    assert not set(again.stdout.decode().splitlines()) & set(lines)
    assert sum((await _offsets(zk_client, group, topic, 2)).values()) == 5


@integration
async def test_pipe_closed_while_waiting_for_records_ends_the_run(
    zk_kafka_cluster: LocalCluster,
    zk_client: Any,
    unique_topic: str,
    unique_group_id: str,
    tmp_path: Path,
) -> None:
    topic, group = unique_topic, unique_group_id
    await _fill(zk_kafka_cluster, topic, [3])
    command = [
        CLI, "consume", "--zookeeper", zk_kafka_cluster.zookeeper_connect, "--topic", topic,
        "--group", group, "--from-beginning",
    ]  # fmt: skip
    err = tmp_path / "stderr"
    # head has its 3 lines and leaves while the consumer waits for a 4th record.
    result = await _pipe(f"{shlex.join(command)} 2>{err} | head -3", limit_s=30)
    assert result.returncode == 0, err.read_text()
    assert result.stdout.decode().splitlines() == ["v0-0", "v0-1", "v0-2"]
    assert err.read_text() == "Processed a total of 3 messages\n"
    assert await _offsets(zk_client, group, topic, 1) == {0: 3}


@integration
async def test_json_format_and_headers_output_exactly(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    topic = unique_topic
    await _produce_special(zk_kafka_cluster, topic)
    zk = ["--zookeeper", zk_kafka_cluster.zookeeper_connect, "--topic", topic]
    by_partition = ["consume", *zk, "--partition", "0", "--offset", "earliest", "--exit-at-end"]

    as_json = await _run(*by_partition, "--output", "json")
    assert as_json.returncode == 0, as_json.stderr.decode()
    assert as_json.stdout.decode() == _expected_json(topic)

    headers = await _run(
        *by_partition, "--property", "print.headers=true", "--property", "print.key=true"
    )
    assert headers.stdout == EXPECTED_HEADERS_TEXT

    in_group = ["consume", *zk, "--group", unique_group_id, "--from-beginning", "--exit-at-end"]
    as_kcat = await _run(*in_group, "--format", KCAT_FORMAT)
    assert as_kcat.returncode == 0, as_kcat.stderr.decode()
    assert as_kcat.stdout == _expected_kcat(topic)


@integration
async def test_exit_at_end_stops_at_the_log_end_of_the_start(
    zk_kafka_cluster: LocalCluster, zk_client: Any, unique_topic: str, unique_group_id: str
) -> None:
    topic, group = unique_topic, unique_group_id
    counts = [2, 4, 6]
    await _fill(zk_kafka_cluster, topic, counts)
    command = [
        "consume", "--zookeeper", zk_kafka_cluster.zookeeper_connect, "--topic", topic,
        "--group", group, "--exit-at-end",
    ]  # fmt: skip
    first = await _run(*command, "--from-beginning")
    assert first.returncode == 0, first.stderr.decode()
    assert sorted(first.stdout.decode().splitlines()) == sorted(
        f"v{p}-{i}" for p, n in enumerate(counts) for i in range(n)
    )
    assert await _offsets(zk_client, group, topic, 3) == dict(enumerate(counts))

    # Already at the end: no record comes, and it still stops.
    started = time.monotonic()
    again = await _run(*command)
    assert (again.returncode, again.stdout) == (0, b""), again.stderr.decode()
    assert again.stderr.decode().splitlines() == ["Processed a total of 0 messages"]
    assert time.monotonic() - started < 30


@integration
async def test_unreachable_brokers_exit_3_with_one_line(
    zk_kafka_cluster: LocalCluster, black_hole: str
) -> None:
    zk = zk_kafka_cluster.zookeeper_connect
    dead = f"127.0.0.1:{_free_port()}"
    for mode in (["--group", "g-dead"], ["--partition", "0"]):
        refused = await _run(
            "consume", "--zookeeper", zk, "--bootstrap-server", dead, "--topic", "t", *mode,
            limit_s=30,
        )  # fmt: skip
        assert refused.returncode == 3, refused.stderr.decode()
        # Refused at once: said so, with the time actually waited (not the timeout).
        assert re.fullmatch(
            re.escape(
                f"Error: could not reach any Kafka broker at {dead} (--bootstrap-server): "
                "refused or closed the connection (after "
            )
            + r"\d+\.\d s, not a timeout\)\n",
            refused.stderr.decode(),
        ), refused.stderr.decode()
        # A broker that accepts connections but never answers: bounded by socket.timeout.ms.
        started = time.monotonic()
        silent = await _run(
            "consume", "--zookeeper", zk, "--bootstrap-server", black_hole, "--topic", "t",
            "--consumer-property", "socket.timeout.ms=1500", *mode, limit_s=30,
        )  # fmt: skip
        assert silent.returncode == 3, silent.stderr.decode()
        assert silent.stderr.decode() == (
            f"Error: could not reach any Kafka broker at {black_hole} (--bootstrap-server): "
            "no answer within socket.timeout.ms=1500\n"
        )
        assert time.monotonic() - started < 20


@integration
async def test_missing_topic_is_warned_about_once(
    zk_kafka_cluster: LocalCluster, unique_topic: str
) -> None:
    result = await _run(
        "consume", "--zookeeper", zk_kafka_cluster.zookeeper_connect, "--topic", unique_topic,
        "--timeout-ms", "2500",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr.decode().splitlines() == [
        f"Warning: topic '{unique_topic}' does not exist; waiting for it to be created",
        "Processed a total of 0 messages",
    ]
