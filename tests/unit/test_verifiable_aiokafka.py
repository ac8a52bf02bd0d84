"""The aiokafka reference member's pure parts: how the chaos runner's properties map onto
``AIOKafkaConsumer``, which fetched records may be handed out, the ``consumed`` events a batch
makes, what is committed; and which checker rules the chaos report leaves out for aiokafka
(no servers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka.structs import ConsumerRecord, TopicPartition

from aiozkconsumer.testing.chaos import CoordinatorMode
from aiozkconsumer.testing.chaos.clients import MemberClient, apply_client_rules, check_client
from aiozkconsumer.testing.history import Anomaly, AnomalyKind, CheckResult
from aiozkconsumer.testing.verifiable import EventWriter, VerifiableOptions
from aiozkconsumer.testing.verifiable_aiokafka import (
    AiokafkaVerifiableConsumer,
    aiokafka_consumer_command,
    commit_plan,
    consumed_events,
    consumer_kwargs,
    split_batch,
)

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def _record(tp: TopicPartition, offset: int) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic=tp.topic,
        partition=tp.partition,
        offset=offset,
        timestamp=0,
        timestamp_type=0,
        key=None,
        value=f"{tp.partition}:{offset}".encode(),
        checksum=None,
        serialized_key_size=0,
        serialized_value_size=3,
        headers=(),
    )


def test_runner_properties_map_to_aiokafka_arguments() -> None:
    kwargs = consumer_kwargs(
        {
            "group.coordinator": "kafka",
            "bootstrap.servers": "127.0.0.1:9092",
            "socket.timeout.ms": "10000",
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "1000",
            "isolation.level": "read_committed",
            "group.id": "g",
        }
    )
    assert kwargs == {
        "bootstrap_servers": "127.0.0.1:9092",
        "group_id": "g",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "request_timeout_ms": 10000,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 1000,
        "isolation_level": "read_committed",
    }
    assert (
        consumer_kwargs({"bootstrap.servers": "b:1", "auto.offset.reset": "largest"})[
            "auto_offset_reset"
        ]
        == "latest"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"group.protocol": "consumer"}, "classic protocol only"),
        ({"auto.commit.enable": "true"}, "auto-commit must stay off"),
        ({"group.coordinator": "zookeeper"}, "Kafka-coordinated"),
        ({"fetch.min.bytes": "1"}, "does not take"),
        ({"session.timeout.ms": "6s"}, "integer"),
    ],
)
def test_properties_that_would_change_what_is_measured_are_refused(
    extra: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        consumer_kwargs({"bootstrap.servers": "b:1", **extra})
    with pytest.raises(ValueError, match="bootstrap.servers"):
        consumer_kwargs({})


def test_records_of_partitions_not_recorded_as_assigned_are_declined() -> None:
    # A getmany begun before a rebalance returns partition 1 before its ``assigned`` event.
    batch = {TP0: [_record(TP0, 5), _record(TP0, 6)], TP1: [_record(TP1, 9), _record(TP1, 10)]}
    accepted, declined = split_batch(batch, {TP0})
    assert list(accepted) == [TP0]
    assert [r.offset for r in accepted[TP0]] == [5, 6]
    assert declined == {TP1: 9}  # seeked back there: fetched again, not skipped
    assert split_batch({TP0: []}, {TP0}) == ({}, {})


def test_a_batch_makes_one_consumed_event_per_partition_and_increasing_run() -> None:
    batch = {
        TP0: [_record(TP0, 3), _record(TP0, 4), _record(TP0, 2), _record(TP0, 3)],
        TP1: [_record(TP1, 0)],
    }
    events = consumed_events(batch)
    assert [(e["partition"], e["min_offset"], e["max_offset"], e["count"]) for e in events] == [
        (0, 3, 4, 2),
        (0, 2, 3, 2),
        (1, 0, 0, 1),
    ]
    assert events[0]["first"] == "0:3" and events[0]["last"] == "0:4"
    assert events[0]["topic"] == "t"


def test_commits_cover_owned_partitions_that_handed_something_out() -> None:
    consumed = {TP0: 7, TP1: 3, TopicPartition("t", 2): -1}
    assert commit_plan(consumed, {TP0, TP1}) == {TP0: 7, TP1: 3}
    assert commit_plan(consumed, {TP0}) == {TP0: 7}  # partition 1 was revoked already
    assert commit_plan(consumed, {TP0, TP1}, only={TP1}) == {TP1: 3}


def test_the_command_runs_the_aiokafka_member_with_the_runners_arguments() -> None:
    argv = aiokafka_consumer_command(
        zookeeper=None,
        group="g",
        topic="t",
        events=Path("/tmp/c0.jsonl"),
        streams=2,
        properties={"bootstrap.servers": "b:1", "session.timeout.ms": 6000},
        member_id="c0",
        commit_interval_ms=250,
    )
    assert argv[1:3] == ["-m", "aiozkconsumer.testing.verifiable_aiokafka"]
    assert "session.timeout.ms=6000" in argv
    assert argv[argv.index("--member-id") + 1] == "c0"
    with pytest.raises(ValueError, match="Kafka-coordinated"):
        aiokafka_consumer_command(zookeeper="z:2181", group="g", topic="t", events="e")


def test_aiokafka_runs_only_with_the_classic_protocol() -> None:
    assert check_client("aiokafka", CoordinatorMode.KAFKA_CLASSIC) is MemberClient.AIOKAFKA
    for mode in (CoordinatorMode.KAFKA_CONSUMER, CoordinatorMode.ZOOKEEPER):
        with pytest.raises(ValueError, match="kafka-classic"):
            check_client("aiokafka", mode)
    assert check_client("aiozkconsumer", CoordinatorMode.ZOOKEEPER) is MemberClient.AIOZKCONSUMER


def _result(*kinds: AnomalyKind) -> CheckResult:
    return CheckResult(
        anomalies=[Anomaly(kind, "x") for kind in kinds],
        produced=1,
        delivered=1,
        distinct_delivered=1,
        duplicates=0,
        allowed_duplicates=0,
        lost=0,
        commits=0,
        epochs=1,
        incarnations=1,
        crashes=0,
        session_losses=0,
        suspensions=0,
    )


def test_lease_bound_anomalies_are_left_out_for_aiokafka_only() -> None:
    result = _result(AnomalyKind.DUPLICATE_WINDOW_EXCEEDED, AnomalyKind.OWNERSHIP_OVERLAP)
    judged, left_out = apply_client_rules(result, MemberClient.AIOKAFKA)
    assert [a.kind for a in judged.anomalies] == [AnomalyKind.OWNERSHIP_OVERLAP]
    assert left_out == {"duplicate_window_exceeded": 1}
    assert apply_client_rules(result, MemberClient.AIOZKCONSUMER) == (result, {})
    assert apply_client_rules(_result(), MemberClient.AIOKAFKA)[1] == {
        "duplicate_window_exceeded": 0
    }


def test_a_revoked_partition_forgets_what_it_consumed(tmp_path: Path) -> None:
    # Another member moves the group's commit on meanwhile: were the partition to come back,
    # committing the old consumed offset would move that commit back.
    options = VerifiableOptions(
        zookeeper=None,
        group="g",
        topic="t",
        events=tmp_path / "m.jsonl",
        properties={"bootstrap.servers": "127.0.0.1:9092"},
    )
    member = AiokafkaVerifiableConsumer(options, EventWriter(options.events, "m"))
    member._owned = {TP0, TP1}
    member._consumed = {TP0: 7, TP1: 3}
    member._release({TP0})
    assert member._owned == {TP1}
    assert commit_plan(member._consumed, {TP0, TP1}) == {TP1: 3}
