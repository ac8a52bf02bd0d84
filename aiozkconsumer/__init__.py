"""aiozkconsumer: Kafka's ZooKeeper-coordinated high-level consumer, on asyncio.

The public API, named after the original (``kafka.consumer``, 0.8–0.10.2)::

    from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector

    config = ConsumerConfig(group_id="billing", zookeeper_connect="127.0.0.1:2181")
    async with ZookeeperConsumerConnector(config) as connector:
        streams = await connector.create_message_streams({"payments": 2})
        async for msg in streams["payments"][0]:
            ...
"""

from .config import ConsumerConfig, UnknownConfigWarning
from .connector import (
    ConnectorState,
    ConnectorStatistics,
    ConsumerRebalanceListener,
    ZookeeperConsumerConnector,
)
from .errors import (
    BrokerNotAvailableError,
    ConsumerClosedError,
    ConsumerError,
    ConsumerRebalanceFailedError,
    ConsumerTimeoutError,
    InvalidConfigError,
    KafkaConnectionError,
    MalformedZookeeperDataError,
    MessageSizeTooLargeError,
    MessageStreamsExistError,
    NoBrokersError,
    UnknownTopicError,
    ZookeeperConnectionError,
    ZookeeperError,
    ZookeeperNodeExistsError,
    ZookeeperSessionExpiredError,
)
from .rebalance import RebalanceRecord
from .records import MessageAndMetadata, TopicPartition
from .stream import ConsumerIterator, KafkaStream
from .subscription import ConsumerThreadId

__version__ = "0.1.0.dev0"

__all__ = [
    "BrokerNotAvailableError",
    "ConnectorState",
    "ConnectorStatistics",
    "ConsumerClosedError",
    "ConsumerConfig",
    "ConsumerError",
    "ConsumerIterator",
    "ConsumerRebalanceFailedError",
    "ConsumerRebalanceListener",
    "ConsumerThreadId",
    "ConsumerTimeoutError",
    "InvalidConfigError",
    "KafkaConnectionError",
    "KafkaStream",
    "MalformedZookeeperDataError",
    "MessageAndMetadata",
    "MessageSizeTooLargeError",
    "MessageStreamsExistError",
    "NoBrokersError",
    "RebalanceRecord",
    "TopicPartition",
    "UnknownConfigWarning",
    "UnknownTopicError",
    "ZookeeperConnectionError",
    "ZookeeperConsumerConnector",
    "ZookeeperError",
    "ZookeeperNodeExistsError",
    "ZookeeperSessionExpiredError",
    "__version__",
]
