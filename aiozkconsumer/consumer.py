"""``create_connector(config)``: the connector ``group.coordinator`` asks for.

In the spirit of the original's ``kafka.consumer.Consumer.create(config)`` (0.10.2), which
returned a ``ConsumerConnector``: here a ``ZookeeperConsumerConnector`` for
``group.coordinator=zookeeper`` (the default) and a ``KafkaConsumerConnector`` for ``kafka``.
Both have the same API (``ConsumerConnector``).
"""

from __future__ import annotations

from collections.abc import Sequence

from .base_connector import ConsumerConnector
from .config import ConsumerConfig
from .connector import ZookeeperConsumerConnector
from .interceptors import ConsumerInterceptor
from .kafka_connector import KafkaConsumerConnector

__all__ = ["Consumer", "create_connector"]


def create_connector(
    config: ConsumerConfig,
    *,
    fetch: bool = True,
    interceptors: Sequence[ConsumerInterceptor] = (),
) -> ConsumerConnector:
    """A connector of the kind ``group.coordinator`` names (not yet started).

    Args:
        config: the consumer configuration.
        fetch: ``False``: a member that fetches nothing (see ``ZookeeperConsumerConnector``).
        interceptors: consumer interceptors besides those ``interceptor.classes`` names.

    Returns:
        A ``ZookeeperConsumerConnector`` (``group.coordinator=zookeeper``) or a
        ``KafkaConsumerConnector`` (``kafka``); use it as an async context manager.

    Raises:
        InvalidConfigError: ``interceptor.classes`` names a class that cannot be loaded.
    """
    if config.kafka_coordinated:
        return KafkaConsumerConnector(config, fetch=fetch, interceptors=interceptors)
    return ZookeeperConsumerConnector(config, fetch=fetch, interceptors=interceptors)


class Consumer:
    """The original's factory, ``kafka.consumer.Consumer`` (0.10.2)."""

    @staticmethod
    def create(
        config: ConsumerConfig,
        *,
        fetch: bool = True,
        interceptors: Sequence[ConsumerInterceptor] = (),
    ) -> ConsumerConnector:
        """``Consumer.create(config)``: as :func:`create_connector`."""
        return create_connector(config, fetch=fetch, interceptors=interceptors)
