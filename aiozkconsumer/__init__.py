"""aiozkconsumer: Kafka's ZooKeeper-coordinated high-level consumer, on asyncio.

The public API, named after the original (``kafka.consumer``, 0.8–0.10.2)::

    from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector

    config = ConsumerConfig(group_id="billing", zookeeper_connect="127.0.0.1:2181")
    async with ZookeeperConsumerConnector(config) as connector:
        streams = await connector.create_message_streams({"payments": 2})
        async for msg in streams["payments"][0]:
            ...

The same API with the group coordinated by Kafka (the Java ``KafkaConsumer``'s protocol):
``create_connector(ConsumerConfig(group_id=..., group_coordinator="kafka",
bootstrap_servers=...))`` returns a ``KafkaConsumerConnector``.
"""

from .base_connector import ConsumerConnector
from .config import ConsumerConfig, UnknownConfigWarning
from .connector import (
    ConnectorState,
    ConnectorStatistics,
    ConsumerRebalanceListener,
    ZookeeperConsumerConnector,
)
from .consumer import Consumer, create_connector
from .errors import (
    AuthenticationError,
    BrokerNotAvailableError,
    CommitFencedError,
    ConsumerClosedError,
    ConsumerError,
    ConsumerRebalanceFailedError,
    ConsumerTimeoutError,
    CorruptRecordError,
    FencedInstanceIdError,
    GroupCoordinatorError,
    InvalidConfigError,
    KafkaConnectionError,
    MalformedZookeeperDataError,
    MessageSizeTooLargeError,
    MessageStreamsExistError,
    NoBrokersError,
    OffsetCommitError,
    OffsetFetchError,
    OffsetOutOfRangeError,
    OffsetStorageError,
    PartitionNotAssignedError,
    RecordDecodeError,
    SchemaRegistryError,
    SslAuthenticationError,
    UnknownSchemaError,
    UnknownTopicError,
    UnreleasedInstanceIdError,
    UnsupportedCodecError,
    ZookeeperAuthError,
    ZookeeperBadVersionError,
    ZookeeperConnectionError,
    ZookeeperError,
    ZookeeperNodeExistsError,
    ZookeeperNoNodeError,
    ZookeeperSessionExpiredError,
)
from .interceptors import ConsumerInterceptor, Interceptors
from .iterator import ConsumerIterator
from .kafka_connector import KafkaConsumerConnector
from .metrics import ConsumerMetrics
from .records import MessageAndMetadata, RebalanceRecord, TopicPartition
from .simple_consumer import FetchResult, SimpleConsumer
from .stream import KafkaStream
from .subscription import Blacklist, ConsumerThreadId, TopicFilter, Whitelist

__version__ = "0.1.0.dev0"

__all__ = [
    "AuthenticationError",
    "CommitFencedError",
    "Blacklist",
    "BrokerNotAvailableError",
    "ConnectorState",
    "ConnectorStatistics",
    "Consumer",
    "ConsumerClosedError",
    "ConsumerConfig",
    "ConsumerConnector",
    "ConsumerInterceptor",
    "ConsumerError",
    "ConsumerIterator",
    "ConsumerMetrics",
    "ConsumerRebalanceFailedError",
    "ConsumerRebalanceListener",
    "ConsumerThreadId",
    "ConsumerTimeoutError",
    "CorruptRecordError",
    "FetchResult",
    "GroupCoordinatorError",
    "FencedInstanceIdError",
    "UnreleasedInstanceIdError",
    "Interceptors",
    "InvalidConfigError",
    "KafkaConnectionError",
    "KafkaConsumerConnector",
    "KafkaStream",
    "MalformedZookeeperDataError",
    "MessageAndMetadata",
    "MessageSizeTooLargeError",
    "MessageStreamsExistError",
    "NoBrokersError",
    "OffsetCommitError",
    "OffsetFetchError",
    "OffsetOutOfRangeError",
    "OffsetStorageError",
    "PartitionNotAssignedError",
    "SchemaRegistryError",
    "RecordDecodeError",
    "UnknownSchemaError",
    "RebalanceRecord",
    "SimpleConsumer",
    "SslAuthenticationError",
    "TopicFilter",
    "TopicPartition",
    "UnknownConfigWarning",
    "UnknownTopicError",
    "UnsupportedCodecError",
    "Whitelist",
    "ZookeeperAuthError",
    "ZookeeperConnectionError",
    "ZookeeperConsumerConnector",
    "ZookeeperError",
    "ZookeeperBadVersionError",
    "ZookeeperNodeExistsError",
    "ZookeeperNoNodeError",
    "ZookeeperSessionExpiredError",
    "__version__",
    "create_connector",
]
