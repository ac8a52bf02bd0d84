"""The Metadata v7 answer's own reader against aiokafka's generic decode of the same schema:
the same fields and values for any response (each partition without its replica arrays), a
clear error for a truncated one (no server)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiozkconsumer.kafka.leader_epoch import (
    MetadataAnswer_v7,
    MetadataRequest_v7,
    MetadataResponse_v7,
)

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
text = st.none() | st.text(max_size=12)
int32s = st.none() | st.lists(int32, max_size=4)
partition = st.tuples(int16, int32, int32, int32, int32s, int32s, int32s)
topic = st.tuples(int16, text, st.booleans(), st.none() | st.lists(partition, max_size=6))
response = st.tuples(
    int32,
    st.lists(st.tuples(int32, text, int32, text), max_size=3),
    text,
    int32,
    st.none() | st.lists(topic, max_size=4),
)


def both(fields: tuple[Any, ...]) -> tuple[Any, Any]:
    body = MetadataResponse_v7(*fields).encode()
    return MetadataResponse_v7.decode(io.BytesIO(body)), MetadataAnswer_v7.decode(io.BytesIO(body))


def as_tuple(response: Any, *, arrays: bool = True) -> tuple[Any, ...]:
    fields = [getattr(response, name) for name in MetadataResponse_v7.SCHEMA.names]
    if not arrays and fields[4] is not None:
        fields[4] = [
            (*topic[:3], None if topic[3] is None else [tuple(p[:4]) for p in topic[3]])
            for topic in fields[4]
        ]
    return tuple(fields)


@settings(max_examples=300, deadline=None)
@given(response)
def test_every_response_reads_as_aiokafka_reads_it(fields: tuple[Any, ...]) -> None:
    generic, fast = both(fields)
    assert as_tuple(fast) == as_tuple(generic, arrays=False)
    assert repr(fast).startswith("MetadataAnswer_v7(")


def test_a_large_topic_reads_the_same_and_the_request_expects_the_fast_reader() -> None:
    partitions = [(0, p, p % 3, 7, [0, 1, 2], [p % 3], []) for p in range(4096)]
    fields = (
        0,
        [(0, "b0", 9092, None), (1, "b1", 9093, "r1")],
        "c",
        0,
        [(0, "t", False, partitions)],
    )
    generic, fast = both(fields)
    assert as_tuple(fast) == as_tuple(generic, arrays=False)
    assert fast.topics[0][3][4095] == (0, 4095, 0, 7)
    # aiokafka's to_object (and a DEBUG log line's repr) follow the answer's own schema.
    assert fast.to_object()["topics"][0]["partitions"][1] == {
        "error_code": 0,
        "partition": 1,
        "leader": 1,
        "leader_epoch": 7,
    }
    assert MetadataRequest_v7.RESPONSE_TYPE is MetadataAnswer_v7


@pytest.mark.parametrize("cut", [1, 5, 20, 40, 57, 61, 65])
def test_a_truncated_response_is_refused_with_a_clear_error(cut: int) -> None:
    partitions = [(0, 0, 1, 2, [1], [1], [])]
    body = MetadataResponse_v7(0, [(1, "b", 9092, None)], "c", 1, [(0, "t", False, partitions)])
    raw = body.encode()
    assert cut < len(raw)
    with pytest.raises(ValueError, match="Buffer underrun"):
        MetadataAnswer_v7.decode(io.BytesIO(raw[:cut]))
