"""Value types shared across the consumer: partitions, records and fetched chunks."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TopicPartition"]


@dataclass(frozen=True, order=True, slots=True)
class TopicPartition:
    """A partition of a topic (the original's ``TopicAndPartition``).

    Ordered by topic, then partition number. ``str()`` gives ``"[topic,partition]"``, the
    original's ``TopicAndPartition.toString``, which the roundrobin assignor hashes.
    """

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"[{self.topic},{self.partition}]"
