"""Interceptor classes for ``tests/unit/test_interceptors.py``, loaded by name via
``from_config``."""

from __future__ import annotations

from collections.abc import Mapping

from aiozkconsumer.records import MessageAndMetadata, TopicPartition


class Recording:
    """Passes records through unchanged and remembers every call."""

    def __init__(self) -> None:
        self.consumed: list[MessageAndMetadata] = []
        self.calls = 0
        self.commits: list[dict[TopicPartition, int]] = []
        self.closed = 0

    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        self.calls += 1
        self.consumed.extend(records)
        return records

    def on_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.commits.append(dict(offsets))

    def close(self) -> None:
        self.closed += 1


class Outer:
    class Inner(Recording):
        """A nested class, for ``module:Outer.Inner``."""


class Failing:
    """Raises from every method (after emptying its input, to check nothing is lost)."""

    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        records.clear()
        raise RuntimeError("on_consume broke")

    def on_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        raise RuntimeError("on_commit broke")

    def close(self) -> None:
        raise RuntimeError("close broke")


class LacksClose:
    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        return records

    def on_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        pass


class AsyncConsume(Recording):
    async def on_consume(  # type: ignore[override]
        self, records: list[MessageAndMetadata]
    ) -> list[MessageAndMetadata]:
        return records


class NeedsArguments(Recording):
    def __init__(self, required: int) -> None:
        super().__init__()


NOT_A_CLASS = 42
