"""One exception hierarchy for aiozkconsumer.

Errors raised by aiozk and aiokafka are translated into these classes at the boundary
(``zk/client.py``, ``fetcher.py``, ``cluster.py``); none of the libraries' own exception types
escape the public API. Names follow the original consumer (``kafka.common.*Exception``) in
Python spelling.
"""

from __future__ import annotations

__all__ = [
    "BrokerNotAvailableError",
    "ConsumerClosedError",
    "ConsumerError",
    "ConsumerRebalanceFailedError",
    "ConsumerTimeoutError",
    "InvalidConfigError",
    "KafkaConnectionError",
    "MalformedZookeeperDataError",
    "MessageSizeTooLargeError",
    "MessageStreamsExistError",
    "NoBrokersError",
    "UnknownTopicError",
    "ZookeeperConnectionError",
    "ZookeeperError",
    "ZookeeperNodeExistsError",
    "ZookeeperSessionExpiredError",
]


class ConsumerError(Exception):
    """Base class of every error aiozkconsumer raises."""


class InvalidConfigError(ConsumerError, ValueError):
    """A configuration value is missing, has the wrong type or is out of range.

    Attributes:
        key: the dotted property key at fault (``"group.id"``), as the original's
            ``InvalidConfigException`` / ``IllegalArgumentException`` messages name it.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class MessageStreamsExistError(ConsumerError):
    """``create_message_streams`` was called a second time on one connector.

    As ``MessageStreamsExistException`` ("can create message streams at most once").
    """


class ConsumerRebalanceFailedError(ConsumerError):
    """A rebalance did not succeed within ``rebalance.max.retries`` attempts."""


class ConsumerTimeoutError(ConsumerError, TimeoutError):
    """No record arrived within ``consumer.timeout.ms``; the iterator stays usable."""


class ConsumerClosedError(ConsumerError):
    """The connector is shut down (or not started) and cannot do what was asked."""


class MessageSizeTooLargeError(ConsumerError):
    """A record batch is larger than ``fetch.message.max.bytes``.

    As the original's ``MessageSizeTooLargeException``: increase the fetch size, or decrease
    the maximum message size the broker allows.
    """


class ZookeeperError(ConsumerError):
    """Base class of ZooKeeper failures."""


class ZookeeperConnectionError(ZookeeperError, ConnectionError):
    """ZooKeeper could not be reached (or the connection was lost) in the time allowed."""


class ZookeeperSessionExpiredError(ZookeeperError):
    """The ZooKeeper session expired; its ephemeral nodes are gone."""


class ZookeeperNodeExistsError(ZookeeperError):
    """An ephemeral node another session owns is in the way.

    Attributes:
        path: the node's path.
    """

    def __init__(self, path: str, message: str | None = None) -> None:
        super().__init__(message or f"ZooKeeper node {path} already exists")
        self.path = path


class MalformedZookeeperDataError(ZookeeperError, ValueError):
    """A ZooKeeper node holds data that does not parse as the original layout expects.

    Attributes:
        path: the node's path, or ``None`` when parsing data not read from a node.
        data: the raw bytes (or text) that failed to parse.
    """

    def __init__(self, path: str | None, data: bytes | str | None, reason: str) -> None:
        where = path if path is not None else "<data>"
        super().__init__(f"malformed data in ZooKeeper node {where}: {reason} (data: {data!r})")
        self.path = path
        self.data = data


class NoBrokersError(ConsumerError):
    """No broker is registered (``/brokers/ids`` is empty or missing)."""


class BrokerNotAvailableError(ConsumerError):
    """A broker (or every bootstrap broker) could not be reached."""


class KafkaConnectionError(BrokerNotAvailableError, ConnectionError):
    """A connection to a Kafka broker failed."""


class UnknownTopicError(ConsumerError, LookupError):
    """A topic does not exist in the cluster.

    Attributes:
        topic: the topic's name.
    """

    def __init__(self, topic: str, message: str | None = None) -> None:
        super().__init__(message or f"unknown topic {topic!r}")
        self.topic = topic
