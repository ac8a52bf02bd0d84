"""Short-lived ZooKeeper and Kafka clients the local cluster uses for itself.

Each is created, used and closed within one call (with a bounded close, even under
cancellation), so the cluster keeps no loop-bound object between calls. aiozk errors raised
inside :func:`zk_session` are translated into ``aiozkconsumer.errors`` at the boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest
from aiozk import ZKClient
from aiozk import exc as zk_exc

from aiozkconsumer.errors import BrokerNotAvailableError, ZookeeperConnectionError, ZookeeperError
from aiozkconsumer.zk.client import close_raw

__all__ = [
    "CLIENT_ID",
    "CLOSE_TIMEOUT_S",
    "REQUEST_TIMEOUT_S",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "bounded_close",
    "kafka_client",
    "topic_metadata",
    "write_zookeeper_nodes",
    "zk_session",
]

log = logging.getLogger(__name__)

CLIENT_ID = "aiozkconsumer-testing"
REQUEST_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 10.0
UNKNOWN_TOPIC_OR_PARTITION = 3
"""Kafka's error code for a topic (or partition) the broker does not know."""


async def bounded_close(closing: Awaitable[object], *, time_limit: float, what: str) -> None:
    """Await a library's close coroutine with a time limit, even under cancellation."""
    task = asyncio.ensure_future(closing)
    try:
        await asyncio.wait_for(asyncio.shield(task), time_limit)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, time_limit)
        raise
    except Exception as exc:  # a failed close must not hide the caller's outcome
        log.debug("closing %s failed: %r", what, exc)
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


@contextlib.asynccontextmanager
async def zk_session(
    connect: str, *, time_limit: float, session_timeout: float = 10.0
) -> AsyncIterator[Any]:
    """Yield a started aiozk ``ZKClient``; close it (bounded) afterwards.

    Raises:
        ZookeeperConnectionError: if no session is established within ``time_limit``.
        ZookeeperError: if a request made in the block fails.
    """
    zk = ZKClient(connect, session_timeout=session_timeout)
    try:
        try:
            async with asyncio.timeout(time_limit):
                await zk.start()
        except TimeoutError as exc:
            raise ZookeeperConnectionError(
                f"no ZooKeeper session with {connect} within {time_limit:.1f} s"
            ) from exc
        try:
            yield zk
        except zk_exc.ZKError as exc:  # translated at the boundary: no aiozk error escapes
            raise ZookeeperError(f"ZooKeeper request failed: {exc!r}") from exc
    finally:
        await close_raw(zk, CLOSE_TIMEOUT_S)


async def write_zookeeper_nodes(
    connect: str, nodes: Mapping[str, bytes], *, time_limit: float
) -> None:
    """Create (or overwrite) persistent nodes, with their missing parents, in one session.

    Parents are plain persistent nodes: aiozk's ``ensure_path`` would make them containers,
    which ZooKeeper deletes once they are empty.

    Args:
        connect: the ZooKeeper connect string.
        nodes: path -> data.
        time_limit: seconds to get a session.

    Raises:
        ZookeeperConnectionError: if no session is established within ``time_limit``.
        ZookeeperError: if a request fails.
    """
    async with zk_session(connect, time_limit=time_limit) as zk:
        for path, data in nodes.items():
            parts = path.strip("/").split("/")
            for depth in range(1, len(parts)):
                with contextlib.suppress(zk_exc.NodeExists):
                    await zk.create("/" + "/".join(parts[:depth]))
            try:
                await zk.create(path, data)
            except zk_exc.NodeExists:
                await zk.set_data(path, data, force=True)


@contextlib.asynccontextmanager
async def kafka_client(bootstrap: str, *, time_limit: float) -> AsyncIterator[Any]:
    """Yield a bootstrapped ``AIOKafkaClient``; close it (bounded) afterwards.

    Raises:
        BrokerNotAvailableError: if no broker of ``bootstrap`` answers.
    """
    client = AIOKafkaClient(
        bootstrap_servers=bootstrap,
        client_id=CLIENT_ID,
        request_timeout_ms=max(1000, int(time_limit * 1000)),
    )
    try:
        try:
            await client.bootstrap()
        except kafka_errors.KafkaError as exc:
            raise BrokerNotAvailableError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
        yield client
    finally:
        await bounded_close(client.close(), time_limit=CLOSE_TIMEOUT_S, what="AIOKafkaClient")


async def topic_metadata(
    client: Any, node_id: int, topic: str, time_limit: float
) -> dict[str, Any]:
    """Ask one broker for a topic's metadata; return the topic's entry as a dict.

    Raises:
        KafkaError: if the request fails (aiokafka's, left to the caller to translate).
        TimeoutError: if there is no answer within ``time_limit`` seconds.
    """
    async with asyncio.timeout(time_limit):
        response = await client.send(node_id, MetadataRequest([topic], False))
    for entry in response.to_object()["topics"]:
        if entry["topic"] == topic:
            return dict(entry)
    return {"topic": topic, "error_code": UNKNOWN_TOPIC_OR_PARTITION, "partitions": []}
