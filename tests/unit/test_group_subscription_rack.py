"""``client.rack`` in the group protocols: the classic subscription v3 (KIP-881) and the
KIP-848 heartbeat's rack id."""

from __future__ import annotations

import struct

from aiozkconsumer.kafka.consumer_group import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequest_v1,
)
from aiozkconsumer.kafka.group import decode_subscription, encode_subscription


def _read_v3(data: bytes) -> tuple[int, list[str], int, int, int, str | None]:
    """An independent reader of ``ConsumerProtocolSubscription`` v3 (Kafka's schema:
    topics, userData, ownedPartitions, generationId, rackId)."""
    pos = 0

    def take(fmt: str) -> int:
        nonlocal pos
        (value,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return int(value)

    def string() -> str | None:
        nonlocal pos
        n = take(">h")
        if n < 0:
            return None
        value = data[pos : pos + n].decode()
        pos += n
        return value

    version = take(">h")
    topics = [string() or "" for _ in range(take(">i"))]
    user_data = take(">i")
    owned = take(">i")
    generation = take(">i")
    rack = string()
    assert pos == len(data), "trailing bytes"
    return version, topics, user_data, owned, generation, rack


def test_without_a_rack_the_subscription_stays_v0() -> None:
    data = encode_subscription(["b", "a", "a"])
    assert struct.unpack_from(">h", data)[0] == 0
    assert decode_subscription(data) == ["a", "b"]


def test_with_a_rack_it_is_v3_and_still_decodes() -> None:
    data = encode_subscription(["b", "a"], rack="eu-west-1a")
    assert _read_v3(data) == (3, ["a", "b"], -1, 0, -1, "eu-west-1a")
    assert decode_subscription(data) == ["a", "b"]


def test_the_heartbeat_carries_the_rack_id() -> None:
    request = ConsumerGroupHeartbeatRequest("g", "m", 0, rack_id="r1")
    struct_ = request.build(ConsumerGroupHeartbeatRequest_v1)
    assert struct_.rack_id == "r1"
    assert ConsumerGroupHeartbeatRequest("g", "m", 3).build(
        ConsumerGroupHeartbeatRequest_v1
    ).rack_id is None
