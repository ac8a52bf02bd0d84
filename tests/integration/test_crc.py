"""CRC checks against a real Kafka 3.9 (LocalCluster): a byte flipped in a broker's log segment.

The broker checks CRCs when it appends, never when it serves a fetch (it sends the segment's
bytes as they are on disk), so a bit flipped in the segment file after the produce reaches the
consumer as a record batch whose CRC does not match, exactly as disk or memory corruption
would. Each test writes three batches to partition 0 — offsets 0..2, 3..5 (one value marked)
and 6..7 — and flips one bit of the marked value in the middle batch.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from _support import config_for

from aiozkconsumer import CorruptRecordError, ZookeeperConsumerConnector
from aiozkconsumer.records import MessageAndMetadata, TopicPartition
from aiozkconsumer.simple_consumer import SimpleConsumer
from aiozkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration

MARK = b"flip-me"
VALUES = [b"v0", b"v1", b"v2", b"v3", MARK + b"-4", b"v5", b"v6", b"v7"]
FLIPPED = bytes([MARK[0] ^ 0x01]) + MARK[1:] + b"-4"
CORRUPT = (3, 5)
"""First and last offset of the batch holding the flipped byte."""
WAIT_S = 60.0


async def _corrupt_topic(cluster: LocalCluster, topic: str) -> TopicPartition:
    """Create ``topic``, write its three batches and flip a bit of the marked value on disk."""
    await cluster.create_topic(topic, 1)
    for first, last in ((0, 2), CORRUPT, (6, 7)):  # one produce request, one batch each
        batch = [(b"k%d" % i, VALUES[i]) for i in range(first, last + 1)]
        await cluster.produce_to_partitions(topic, {0: batch})
    assert (await cluster.log_end_offsets(topic))[0] == len(VALUES)
    segments = list(cluster.work_dir.glob(f"broker-*/data/{topic}-0/*.log"))
    assert len(segments) == 1, segments
    _flip_once(segments[0], MARK)
    return TopicPartition(topic, 0)


def _flip_once(segment: Path, marker: bytes) -> None:
    """Flip the low bit of the first byte of ``marker``, which must occur once in the file.

    Written in place (not a new file): the broker keeps the segment open and serves fetches
    from it through the page cache, which this write goes through as well.
    """
    data = segment.read_bytes()
    assert data.count(marker) == 1, f"{marker!r} occurs {data.count(marker)} times in {segment}"
    at = data.index(marker)
    with segment.open("r+b") as f:
        f.seek(at)
        f.write(bytes([data[at] ^ 0x01]))


def _assert_names_the_batch(error: CorruptRecordError, tp: TopicPartition) -> None:
    assert (error.topic, error.partition) == (tp.topic, tp.partition)
    assert (error.offset, error.last_offset) == CORRUPT
    assert error.expected_crc is not None and error.actual_crc is not None
    assert error.expected_crc != error.actual_crc
    assert f"partition [{tp.topic},0] at offsets 3..5: CRC mismatch" in str(error)


# ---- the connector's stream ---------------------------------------------------------------


async def test_stream_raises_for_the_corrupt_batch_and_commits_before_it(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    tp = await _corrupt_topic(zk_kafka_cluster, unique_topic)
    config = config_for(zk_kafka_cluster, unique_group_id)
    assert config.check_crcs and config.crc_error_action == "raise"
    seen: list[MessageAndMetadata] = []
    with anyio.fail_after(WAIT_S):
        async with ZookeeperConsumerConnector(config) as connector:
            streams = await connector.create_message_streams({unique_topic: 1})
            with pytest.raises(CorruptRecordError) as raised:
                async for msg in streams[unique_topic][0]:
                    seen.append(msg)  # noqa: PERF401 - kept up to the error
            _assert_names_the_batch(raised.value, tp)
            assert [(m.offset, m.value) for m in seen] == [(0, b"v0"), (1, b"v1"), (2, b"v2")]
            assert connector.statistics().consumed_offsets[tp] == CORRUPT[0]
            await connector.commit_offsets()
            assert connector.metrics.corrupt_batches_per_sec(unique_topic).count == 1

        # The committed offset stayed before the corrupt batch: a consumer without the check
        # starts there and gets the flipped value (check.crcs=false delivers it).
        unchecked = config.replace(check_crcs=False)
        async with ZookeeperConsumerConnector(unchecked) as connector:
            streams = await connector.create_message_streams({unique_topic: 1})
            it = streams[unique_topic][0].__aiter__()
            rest = [await it.__anext__() for _ in range(len(VALUES) - CORRUPT[0])]
    assert [m.offset for m in rest] == [3, 4, 5, 6, 7]
    assert rest[1].value == FLIPPED


async def test_stream_with_skip_steps_over_the_corrupt_batch_and_marks_the_meter(
    zk_kafka_cluster: LocalCluster, unique_topic: str, unique_group_id: str
) -> None:
    tp = await _corrupt_topic(zk_kafka_cluster, unique_topic)
    config = config_for(zk_kafka_cluster, unique_group_id, crc_error_action="skip")
    with anyio.fail_after(WAIT_S):
        async with ZookeeperConsumerConnector(config) as connector:
            streams = await connector.create_message_streams({unique_topic: 1})
            it = streams[unique_topic][0].__aiter__()
            got = [await it.__anext__() for _ in range(5)]
            assert [(m.offset, m.value) for m in got] == [
                (0, b"v0"),
                (1, b"v1"),
                (2, b"v2"),
                (6, b"v6"),
                (7, b"v7"),
            ]
            assert connector.statistics().consumed_offsets[tp] == len(VALUES)
            metrics = connector.metrics
            assert metrics.corrupt_batches_per_sec(unique_topic).count == 1
            assert metrics.corrupt_batches_per_sec().count == 1


# ---- SimpleConsumer --------------------------------------------------------------------------


async def test_simple_consumer_raises_at_the_corrupt_batch_unless_check_crcs_is_off(
    zk_kafka_cluster: LocalCluster, unique_topic: str
) -> None:
    tp = await _corrupt_topic(zk_kafka_cluster, unique_topic)
    bootstrap = zk_kafka_cluster.bootstrap_servers
    with anyio.fail_after(WAIT_S):
        async with SimpleConsumer(bootstrap) as consumer:
            assert consumer.check_crcs
            # The batch before it comes out of the fetch that also returned the corrupt one.
            first = await consumer.fetch(tp, 0)
            assert [m.offset for m in first.records] == [0, 1, 2]
            assert first.next_offset == CORRUPT[0]
            with pytest.raises(CorruptRecordError) as raised:
                await consumer.fetch(tp, first.next_offset)
            _assert_names_the_batch(raised.value, tp)

            seen: list[int] = []
            with pytest.raises(CorruptRecordError):
                async for msg in consumer.fetch_range(tp, 0, len(VALUES)):
                    seen.append(msg.offset)  # noqa: PERF401 - kept up to the error
            assert seen == [0, 1, 2]

        async with SimpleConsumer(bootstrap, check_crcs=False) as consumer:
            result = await consumer.fetch(tp, CORRUPT[0])
    assert [(m.offset, m.value) for m in result.records] == [
        (3, b"v3"),
        (4, FLIPPED),
        (5, b"v5"),
        (6, b"v6"),
        (7, b"v7"),
    ]
