"""Unit tests of the Kafka adapter's error translation (``aiozkconsumer.kafka``).

No servers: error codes are classified by table, aiokafka's exceptions are raised by fakes
standing in for ``AIOKafkaClient``. The last test checks the boundary itself: no module outside
the adapter (and the test kit) imports ``aiokafka.errors``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from aiokafka import errors as aiokafka_errors
from aiokafka.client import ConnectionGroup

from aiozkconsumer.errors import (
    BrokerNotAvailableError,
    ConsumerError,
    KafkaConnectionError,
    NoBrokersError,
)
from aiozkconsumer.kafka.channel import ChannelError, OffsetsChannel
from aiozkconsumer.kafka.client import KafkaClient
from aiozkconsumer.kafka.errors import (
    AiokafkaError,
    IncompatibleBrokerVersion,
    PartitionError,
    classify_partition_error,
    error_name,
    is_retriable,
)
from aiozkconsumer.records import TopicPartition

T0 = TopicPartition("t", 0)

# -- error codes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (0, "NO_ERROR (0)"),
        (1, "OFFSET_OUT_OF_RANGE (1)"),
        (3, "UNKNOWN_TOPIC_OR_PARTITION (3)"),
        (16, "NOT_COORDINATOR (16)"),
        (-1, "UNKNOWN (-1)"),
        (9999, "UNKNOWN (9999)"),
    ],
)
def test_error_name_is_kafkas_name_with_the_code(code: int, name: str) -> None:
    assert error_name(code) == name


@pytest.mark.parametrize(
    ("code", "retriable"),
    [
        (0, False),  # NONE
        (1, False),  # OFFSET_OUT_OF_RANGE
        (3, True),  # UNKNOWN_TOPIC_OR_PARTITION
        (6, True),  # NOT_LEADER_FOR_PARTITION
        (12, False),  # OFFSET_METADATA_TOO_LARGE
        (14, True),  # COORDINATOR_LOAD_IN_PROGRESS
        (16, True),  # NOT_COORDINATOR
        (30, False),  # GROUP_AUTHORIZATION_FAILED
        (9999, False),  # unknown
    ],
)
def test_is_retriable(code: int, retriable: bool) -> None:
    assert is_retriable(code) is retriable


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (0, PartitionError.NONE),
        (1, PartitionError.OFFSET_OUT_OF_RANGE),
        (3, PartitionError.UNKNOWN_TOPIC),
        (5, PartitionError.REFRESH_METADATA),  # LEADER_NOT_AVAILABLE
        (6, PartitionError.REFRESH_METADATA),  # NOT_LEADER_FOR_PARTITION
        (7, PartitionError.REFRESH_METADATA),  # REQUEST_TIMED_OUT
        (2, PartitionError.FATAL),  # CORRUPT_MESSAGE
        (29, PartitionError.FATAL),  # TOPIC_AUTHORIZATION_FAILED
        (-1, PartitionError.FATAL),  # UNKNOWN_SERVER_ERROR
        (9999, PartitionError.FATAL),  # a code this client does not know
    ],
)
def test_classify_partition_error(code: int, kind: PartitionError) -> None:
    assert classify_partition_error(code) is kind


def test_which_partition_errors_are_retriable() -> None:
    retriable = {kind for kind in PartitionError if kind.retriable}
    assert retriable == {PartitionError.UNKNOWN_TOPIC, PartitionError.REFRESH_METADATA}


def test_every_retriable_code_is_retried_and_no_other() -> None:
    for code in range(-1, 120):
        kind = classify_partition_error(code)
        if code not in (0, 1):
            assert kind.retriable is is_retriable(code), code


def test_incompatible_broker_version_is_caught_before_the_base_class() -> None:
    # The channel's except clauses rely on it (fatal vs retried failures).
    assert issubclass(IncompatibleBrokerVersion, AiokafkaError)


# -- KafkaClient: aiokafka exceptions become aiozkconsumer.errors ----------------------


async def test_start_failure_is_kafka_connection_error() -> None:
    client = KafkaClient("127.0.0.1:1", client_id="test")

    async def bootstrap() -> None:
        raise aiokafka_errors.KafkaConnectionError("refused")

    client.raw.bootstrap = bootstrap
    with pytest.raises(KafkaConnectionError, match=r"127\.0\.0\.1:1.*refused") as info:
        await client.start()
    assert isinstance(info.value.__cause__, aiokafka_errors.KafkaError)


async def test_send_failure_is_broker_not_available() -> None:
    client = KafkaClient("127.0.0.1:1", client_id="test")

    async def send(node_id: int, request: Any) -> Any:
        raise aiokafka_errors.NodeNotReadyError("not ready")

    client.raw.send = send
    try:
        with pytest.raises(BrokerNotAvailableError, match="broker 7"):
            await client.send(7, object())
    finally:
        await client.close()


async def test_metadata_failure_is_no_brokers() -> None:
    client = KafkaClient("127.0.0.1:1", client_id="test")

    async def fetch_all_metadata() -> Any:
        raise aiokafka_errors.KafkaConnectionError("refused")

    client.raw.fetch_all_metadata = fetch_all_metadata
    try:
        with pytest.raises(NoBrokersError, match="metadata"):
            await client.all_topics()
    finally:
        await client.close()


# -- OffsetsChannel: every failure is a ChannelError -----------------------------------


class FakeConnection:
    def __init__(self) -> None:
        self.closed = False

    def close(self, reason: Any = None) -> None:
        self.closed = True


class FakeRaw:
    """The parts of ``AIOKafkaClient`` the channel uses; ``send`` raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.sent: list[tuple[int, Any]] = []
        self._conns = {(0, ConnectionGroup.COORDINATION): FakeConnection()}

    def get_random_node(self) -> int:
        return 0

    async def send(self, node: int, request: Any, *, group: Any = None) -> Any:
        assert group is ConnectionGroup.COORDINATION
        self.sent.append((node, request))
        raise self.error


class FakeKafka:
    def __init__(self, error: BaseException) -> None:
        self.raw = FakeRaw(error)

    def broker_address(self, node: int) -> str:
        return f"host{node}:9092"


def _channel(kafka: Any) -> OffsetsChannel:
    async def getter() -> Any:
        return kafka

    return OffsetsChannel(getter, "g", socket_timeout_ms=1000)


@pytest.mark.parametrize(
    ("error", "fatal", "words"),
    [
        (aiokafka_errors.KafkaConnectionError("reset"), False, "host0:9092 failed"),
        (aiokafka_errors.RequestTimedOutError(), False, "host0:9092 failed"),
        (aiokafka_errors.IncompatibleBrokerVersion("v0"), True, "broker too old"),
        (NotImplementedError("no version"), True, "no protocol version in common"),
    ],
)
async def test_channel_translates_aiokafka_failures(
    error: BaseException, fatal: bool, words: str
) -> None:
    kafka = FakeKafka(error)
    channel = _channel(kafka)
    with pytest.raises(ChannelError) as info:
        await channel.commit({T0: 5})
    assert info.value.fatal is fatal
    assert words in info.value.reason
    assert info.value.reason.startswith("FindCoordinator")
    assert channel.coordinator is None
    with pytest.raises(ChannelError):
        await channel.fetch([T0])
    assert len(kafka.raw.sent) == 2


async def test_channel_reports_a_missing_kafka_client() -> None:
    async def getter() -> Any:
        raise NoBrokersError("no brokers found")

    channel = OffsetsChannel(getter, "g", socket_timeout_ms=1000)
    with pytest.raises(ChannelError, match="no Kafka client: no brokers found") as info:
        await channel.fetch([T0])
    assert not info.value.fatal
    assert isinstance(info.value.__cause__, ConsumerError)


async def test_channel_forgets_a_coordinator_that_fails() -> None:
    kafka = FakeKafka(aiokafka_errors.KafkaConnectionError("reset"))

    class Found:
        error_code = 0
        coordinator_id = 0

    calls = 0

    async def send(node: int, request: Any, *, group: Any = None) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            return Found()
        raise kafka.raw.error

    kafka.raw.send = send  # type: ignore[method-assign]
    channel = _channel(kafka)
    with pytest.raises(ChannelError, match="OffsetCommit to host0:9092 failed"):
        await channel.commit({T0: 5})
    assert channel.coordinator is None
    assert kafka.raw._conns[(0, ConnectionGroup.COORDINATION)].closed
    assert "coordinator unknown" in repr(channel)


# -- the boundary ----------------------------------------------------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "aiozkconsumer"
OUTSIDE_THE_RULE = ("kafka", "testing")  # the adapter itself; the test kit is a user of aiokafka


def _imports_aiokafka_errors(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            if any(a.name == "aiokafka.errors" for a in node.names):
                return True
        elif isinstance(node, ast.ImportFrom):
            if node.module == "aiokafka.errors":
                return True
            if node.module == "aiokafka" and any(a.name == "errors" for a in node.names):
                return True
    return False


def test_only_the_adapter_imports_aiokafka_errors() -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in OUTSIDE_THE_RULE
        and path.relative_to(PACKAGE) != Path("cli/demo.py")
        and _imports_aiokafka_errors(path)
    ]
    assert offenders == []
