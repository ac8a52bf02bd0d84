"""Topic ids from a MetadataRequest v10-v13, encoded and decoded here.

FetchRequest v13+ names topics by id (KIP-516), and only Metadata v10+ answers ids, a version
aiokafka 0.14's ``MetadataRequest`` (v0-v5) does not reach. These are the flexible layouts of
``MetadataRequest.json`` / ``MetadataResponse.json`` (Kafka 3.9: v0-v12, Kafka 4.3: v0-v13)
for the one question asked: the ids of named topics. Pure: ``kafka/client.py``'s
``FetchChannel`` sends the request over its fetch connection and caches the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .fetch_request import ZERO_UUID, FlexibleReader, compact_string, request_header_v2, uvarint

__all__ = [
    "MAX_VERSION",
    "METADATA_API_KEY",
    "MIN_VERSION",
    "TopicIdAnswer",
    "decode_metadata_response",
    "encode_metadata_request",
]

METADATA_API_KEY = 3
MIN_VERSION = 10
"""The first MetadataResponse with ``TopicId``."""
MAX_VERSION = 13
"""The newest Metadata version encoded here (Kafka 4.x; Kafka 3.9 offers up to 12)."""


@dataclass(frozen=True, slots=True)
class TopicIdAnswer:
    """One topic of a MetadataResponse.

    Attributes:
        name: the topic.
        error_code: the topic's error (0; 3 ``UNKNOWN_TOPIC_OR_PARTITION`` ...).
        topic_id: its id (:data:`~.fetch_request.ZERO_UUID` when the topic is unknown).
    """

    name: str
    error_code: int
    topic_id: bytes


def encode_metadata_request(
    version: int, correlation_id: int, client_id: str, topics: Sequence[str]
) -> bytes:
    """A MetadataRequest for ``topics`` (never auto-creating them), without size prefix.

    Layout (v10+): header v2; ``Topics`` a compact array of (``TopicId`` zero, ``Name``,
    tagged fields); ``AllowAutoTopicCreation`` false; ``IncludeClusterAuthorizedOperations``
    (v10 only) and ``IncludeTopicAuthorizedOperations`` false; tagged fields.

    Raises:
        ValueError: ``version`` outside :data:`MIN_VERSION` .. :data:`MAX_VERSION`.
    """
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"MetadataRequest v{version} is not encoded here")
    out = [request_header_v2(METADATA_API_KEY, version, correlation_id, client_id)]
    out.append(uvarint(len(topics) + 1))
    for topic in topics:
        # v10 and v11 "should not use the topicId field": a zero id and the name.
        out.extend((ZERO_UUID, compact_string(topic), b"\x00"))
    out.append(b"\x00")  # AllowAutoTopicCreation: no
    if version == 10:
        out.append(b"\x00")  # IncludeClusterAuthorizedOperations (v8-v10)
    out.append(b"\x00")  # IncludeTopicAuthorizedOperations
    out.append(b"\x00")  # tagged fields
    return b"".join(out)


def decode_metadata_response(
    version: int, correlation_id: int, frame: bytes | memoryview
) -> tuple[int, list[TopicIdAnswer]]:
    """The topics of a MetadataResponse v10-v13 (``frame``: the bytes after its size prefix).

    Args:
        version: the request's version.
        correlation_id: the request's correlation id.
        frame: the response, header (v1: correlation id, tagged fields) included.

    Returns:
        ``(top-level error code (v13+; 0 before), [each topic's name, error code and id])``,
        topics in response order.

    Raises:
        ValueError: a wrong correlation id, or bytes that do not form the response (ended
            early, left over).
    """
    r = FlexibleReader(frame)
    got = r.i32()
    if got != correlation_id:
        raise ValueError(f"correlation id {got}, expected {correlation_id}")
    r.skip_tagged_fields()
    r.i32()  # throttle time
    for _ in range(r.compact_length()):  # brokers
        r.i32()
        r.compact_string()
        r.i32()
        r.compact_string()
        r.skip_tagged_fields()
    r.compact_string()  # cluster id
    r.i32()  # controller id
    answers: list[TopicIdAnswer] = []
    for _ in range(r.compact_length()):
        error_code = r.i16()
        name = r.compact_string()
        topic_id = bytes(r.take(16))
        r.take(1)  # is internal
        for _ in range(r.compact_length()):  # partitions
            r.take(2 + 4 + 4 + 4)  # error, index, leader, leader epoch
            for _ in range(3):  # replicas, ISR, offline replicas
                r.take(4 * r.compact_length())
            r.skip_tagged_fields()
        r.i32()  # topic authorized operations
        r.skip_tagged_fields()
        if name is not None:
            answers.append(TopicIdAnswer(name, error_code, topic_id))
    if version == 10:
        r.i32()  # cluster authorized operations
    top_error = r.i16() if version >= 13 else 0
    r.skip_tagged_fields()
    if r.pos != len(r.data):
        raise ValueError(f"{len(r.data) - r.pos} bytes left over at the end of a MetadataResponse")
    return top_error, answers
