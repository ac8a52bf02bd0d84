"""The Java member's contract with its process, without a JVM: the settings, properties file
and command line it is given, and the output lines it writes back."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing._java_member_protocol import (
    ASSIGNORS,
    Closed,
    Committed,
    Failed,
    JavaAssignment,
    JavaRecord,
    ListenerCall,
    MemberSettings,
    OutputParser,
    Started,
    parse_partitions,
    properties_text,
    subscription_of,
)
from aiozkconsumer.testing._java_member_source import JAVA_CLASS, JAVA_SOURCE


def settings(**kwargs: object) -> MemberSettings:
    values: dict[str, object] = {
        "bootstrap": "127.0.0.1:9092",
        "group": "g",
        "client_id": "c",
        "subscription": ("topics", "t"),
    }
    values.update(kwargs)
    return MemberSettings(**values)  # type: ignore[arg-type]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- in: settings, properties, command line --------------------------------------------------


def test_the_subscription_is_topics_or_a_pattern() -> None:
    assert subscription_of("t") == ("topics", "t")
    assert subscription_of(["a", "b"]) == ("topics", "a,b")
    assert subscription_of(re.compile(r"t-\d+")) == ("pattern", r"t-\d+")
    for bad in ([], "", ["a", ""]):
        with pytest.raises(ValueError, match="at least one topic"):
            subscription_of(bad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"group_protocol": "eager"}, "group_protocol must be one of classic, consumer"),
        ({"assignor": "uniform"}, "with the classic protocol, got 'uniform'"),
        ({"group_protocol": "consumer", "assignor": "sticky"}, "range, uniform with the consumer"),
        ({"commit": "async"}, "commit must be one of auto, sync, none"),
    ],
)
def test_settings_refuse_values_the_program_does_not_know(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        settings(**kwargs)


def test_classic_properties_name_the_assignor_class_and_the_session() -> None:
    props = settings(assignor="cooperative-sticky", commit="sync", session_timeout_ms=6000)
    got = props.consumer_properties()
    assert got["partition.assignment.strategy"] == ASSIGNORS["cooperative-sticky"]
    assert got["enable.auto.commit"] == "false"
    assert (got["session.timeout.ms"], got["heartbeat.interval.ms"]) == ("6000", "1000")
    assert "group.remote.assignor" not in got and "metadata.max.age.ms" not in got
    short = settings(session_timeout_ms=2400).consumer_properties()
    assert short["heartbeat.interval.ms"] == "800"  # a third, below 1000
    assert settings().consumer_properties()["enable.auto.commit"] == "true"


def test_consumer_protocol_properties_leave_the_session_to_the_broker() -> None:
    got = settings(
        group_protocol="consumer",
        assignor="uniform",
        subscription=("pattern", "t-.*"),
        extra_properties={"max.poll.records": "7", "auto.offset.reset": "latest"},
    ).consumer_properties()
    assert got["group.remote.assignor"] == "uniform"
    assert "session.timeout.ms" not in got and "partition.assignment.strategy" not in got
    assert got["metadata.max.age.ms"] == "2000"  # a pattern needs fresh metadata
    assert got["max.poll.records"] == "7"
    assert got["auto.offset.reset"] == "latest"  # extra properties override everything


def test_the_properties_file_escapes_backslashes_and_line_breaks() -> None:
    text = properties_text({"a": "x", "sasl.jaas.config": "p\\q\nr\rs"})
    assert text == "a=x\nsasl.jaas.config=p\\\\q\\nr\\rs\n"
    files = settings(extra_properties={"k": "v\n"}).work_files()
    assert set(files) == {"consumer.properties", "log4j.properties", "log4j2.properties"}
    assert "k=v\\n\n" in files["consumer.properties"]


def test_the_command_line_gives_the_program_its_arguments_in_order() -> None:
    s = settings(
        subscription=("pattern", "t-.*"), commit="sync", close_timeout_s=2.5, poll_timeout_ms=300
    )
    work = Path("/w")
    cmd = s.command("/usr/bin/java", Path("/classes"), Path("/libs"), work)
    assert cmd[0] == "/usr/bin/java"
    assert "-Xmx256m" in cmd and f"-Dlog4j.configuration=file:{work / 'log4j.properties'}" in cmd
    assert cmd[cmd.index("-cp") + 1].startswith("/classes") and cmd[cmd.index("-cp") + 1].endswith(
        "/libs/*"
    )
    # args: <properties file> <"topics" | "pattern"> <topics | regex> <commit mode>
    #       <close timeout, ms> <poll timeout, ms>, as the program's main reads them
    assert cmd[cmd.index(JAVA_CLASS) + 1 :] == [
        str(work / "consumer.properties"),
        "pattern",
        "t-.*",
        "sync",
        "2500",
        "300",
    ]


# -- out: the lines the process writes -------------------------------------------------------


def test_every_line_kind_the_program_writes_is_parsed() -> None:
    written = set(re.findall(r'emit\("([A-Z]+)', JAVA_SOURCE))
    assert written == {"STARTED", "RECORD", "REVOKED", "ASSIGNED", "LOST", "ASSIGNMENT"} | {
        "COMMITTED",
        "ERROR",
        "CLOSED",
    }
    samples = {
        "STARTED": "STARTED\tc",
        "RECORD": "RECORD\tt\t0\t1\t2\t-\t-",
        "REVOKED": "REVOKED\t",
        "ASSIGNED": "ASSIGNED\tt:0",
        "LOST": "LOST\tt:0",
        "ASSIGNMENT": "ASSIGNMENT\t1\tm\tt:0",
        "COMMITTED": "COMMITTED\tt:0=1",
        "ERROR": "ERROR\tboom",
        "CLOSED": "CLOSED",
    }
    parser = OutputParser()
    for kind in written:
        assert parser.parse(samples[kind], 0.0) is not None, kind


def test_records_carry_base64_keys_and_values_and_null_as_a_dash() -> None:
    parser = OutputParser()
    key, value = b64(b"k"), b64(b"\x00v\t")
    line = f"RECORD\tmy-topic\t3\t42\t1700000000000\t{key}\t{value}"
    assert parser.parse(line, 5.0) == JavaRecord(
        "my-topic", 3, 42, 1700000000000, b"k", b"\0v\t", 5.0
    )
    tombstone = parser.parse("RECORD\tt\t0\t7\t1\t-\t-", 1.0)
    assert isinstance(tombstone, JavaRecord)
    assert (tombstone.key, tombstone.value, tombstone.tp) == (None, None, TopicPartition("t", 0))


def test_an_assignment_completes_the_listener_call_before_it() -> None:
    parser = OutputParser()
    t0, t1 = TopicPartition("a:b", 0), TopicPartition("t", 1)  # a topic name with a colon
    first = parser.parse("ASSIGNMENT\t-1\t\t", 1.0)
    assert first == JavaAssignment(-1, "", frozenset(), "assigned", frozenset(), 1.0)
    assert parser.parse("ASSIGNED\ta:b:0,t:1", 2.0) == ListenerCall("assigned", frozenset({t0, t1}))
    assigned = parser.parse("ASSIGNMENT\t3\tmember-1\ta:b:0,t:1", 2.5)
    assert assigned == JavaAssignment(
        3, "member-1", frozenset({t0, t1}), "assigned", frozenset({t0, t1}), 2.5
    )
    assert parser.parse("REVOKED\tt:1", 3.0) == ListenerCall("revoked", frozenset({t1}))
    revoked = parser.parse("ASSIGNMENT\t4\tmember-1\ta:b:0", 3.5)
    assert isinstance(revoked, JavaAssignment)
    assert (revoked.change, revoked.changed, revoked.partitions) == (
        "revoked",
        frozenset({t1}),
        frozenset({t0}),
    )


def test_commits_errors_and_the_lifecycle_lines() -> None:
    parser = OutputParser()
    assert parser.parse("COMMITTED\tt:0=5,t:1=9", 0.0) == Committed(
        {TopicPartition("t", 0): 5, TopicPartition("t", 1): 9}
    )
    assert parser.parse("STARTED\tjava-member-g-1", 0.0) == Started("java-member-g-1")
    assert parser.parse("ERROR\tx.Y: no; caused by z.W: why", 0.0) == Failed(
        "x.Y: no; caused by z.W: why"
    )
    assert parser.parse("CLOSED", 0.0) == Closed()
    assert parser.parse("SOMETHING\telse", 0.0) is None
    assert parser.parse("", 0.0) is None


@pytest.mark.parametrize(
    "line",
    [
        "RECORD\tt\t0\t1\t2\t-",  # a field short
        "RECORD\tt\tzero\t1\t2\t-\t-",
        "RECORD\tt\t0\t1\t2\ta\t-",  # not base64 (padding)
        "ASSIGNMENT\t1\tm",
        "ASSIGNMENT\tone\tm\tt:0",
        "ASSIGNED\tt:x",
        "COMMITTED\tt:0=five",
        "COMMITTED\t",  # no partition
    ],
)
def test_a_malformed_line_raises_and_changes_nothing(line: str) -> None:
    parser = OutputParser()
    parser.parse("ASSIGNED\tt:0", 0.0)
    with pytest.raises(ValueError):
        parser.parse(line, 1.0)
    assert parser.last_change == ("assigned", frozenset({TopicPartition("t", 0)}))


def test_parse_partitions_splits_at_the_last_colon() -> None:
    assert parse_partitions("") == frozenset()
    assert parse_partitions("a:b:2,,c:0") == {TopicPartition("a:b", 2), TopicPartition("c", 0)}
