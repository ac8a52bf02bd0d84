"""The verifiable member records partitions a Kafka-coordinated member drops without the
listener (fenced: the coordinator gave them to another member), the moment they go, so that a
history never joins two ownerships of one member into one (no servers: the connector is built,
not started)."""

from __future__ import annotations

import json
from pathlib import Path

from aiozkconsumer.ownership import partition_info
from aiozkconsumer.queues import ChunkQueue
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing.verifiable import EventWriter, VerifiableConsumer, VerifiableOptions


def _member(tmp_path: Path) -> tuple[VerifiableConsumer, Path]:
    events = tmp_path / "m.jsonl"
    options = VerifiableOptions(
        zookeeper=None,
        group="g",
        topic="t",
        events=events,
        properties={
            "group.coordinator": "kafka",
            "bootstrap.servers": "127.0.0.1:9092",
            "group.protocol": "consumer",
        },
    )
    return VerifiableConsumer(options, EventWriter(events, "m")), events


def _revocations(events: Path) -> list[tuple[list[int], str]]:
    out = []
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e["type"] == "revoked":
            out.append(([p["partition"] for p in e["partitions"]], e["reason"]))
    return out


def test_a_partition_dropped_without_the_listener_is_recorded_as_lost(tmp_path: Path) -> None:
    member, events = _member(tmp_path)
    c = member.connector
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    gate = c.ownership.gate
    c.ownership.acquire(
        partition_info(c.config, c.metrics, gate, tp, ChunkQueue(2), 5) for tp in tps
    )
    member._owned = set(tps)  # as the listener's before_starting_fetchers recorded them
    c.handover.drop([tps[0]])
    assert _revocations(events) == [([0], "lost")]
    assert member._owned == {tps[1]}
    # A partition the listener already recorded as released is not recorded twice.
    member._owned.discard(tps[1])
    c.ownership.release([tps[1]])
    assert _revocations(events) == [([0], "lost")]
