"""The ``ConsumerLag`` gauges of the partitions a fetcher fetches.

One gauge per fetched partition (the original's ``ConsumerLag`` metric of
``FetcherLagMetrics``): the end of the partition's log as the last fetch response gave it (its
high watermark; the last stable offset under ``isolation.level=read_committed``) minus the
partition's fetch offset, ``-1`` before the first response. The fetcher owns the ``lag_end``
mapping and registers and removes the gauges as partitions come and go.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .records import PartitionTopicInfo, TopicPartition

__all__ = ["LagGauges"]


class LagGauges:
    """Registers and removes a partition's ``ConsumerLag`` gauge.

    Args:
        metrics: the connector's ``ConsumerMetrics``; ``None``: no gauges at all.
        lag_end: ``{partition: log end of the last fetch response}``, kept by the fetcher
            (read by the gauges when they are read).
    """

    def __init__(self, metrics: Any, lag_end: Mapping[TopicPartition, int]) -> None:
        self._metrics = metrics
        self._lag_end = lag_end
        self._gauges: dict[TopicPartition, Any] = {}

    def register(self, ptis: Iterable[PartitionTopicInfo]) -> None:
        """A gauge per partition (replacing one it had)."""
        if self._metrics is None:
            return
        for pti in ptis:

            def lag(pti: PartitionTopicInfo = pti) -> float:
                end = self._lag_end.get(pti.tp)
                return -1.0 if end is None else float(max(0, end - pti.fetched_offset))

            self._gauges[pti.tp] = self._metrics.consumer_lag(pti.topic, pti.partition, lag)

    def unregister(self, tps: Iterable[TopicPartition]) -> None:
        """Remove the partitions' gauges (those they have)."""
        if self._metrics is None:
            return
        for tp in tps:
            gauge = self._gauges.pop(tp, None)
            if gauge is not None:
                self._metrics.remove(gauge)
