"""A group member in a process of its own, for tests that freeze or kill the test process.

Usage: python _member.py ZK GROUP TOPIC CONSUMER_ID [BOOTSTRAP_SERVERS]
Consumes TOPIC with one stream, commits every record at once (auto-commit every 100 ms), and
prints one line per record handed out: "<partition> <offset>". Stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import anyio

from aiozkconsumer import ConsumerConfig, ZookeeperConsumerConnector


async def main(
    zk: str, group: str, topic: str, consumer_id: str, bootstrap: str | None = None
) -> None:
    config = ConsumerConfig(
        group_id=group,
        zookeeper_connect=zk,
        consumer_id=consumer_id,
        auto_offset_reset="smallest",
        auto_commit_interval_ms=100,
        rebalance_backoff_ms=500,
        bootstrap_servers=bootstrap,
    )
    async with ZookeeperConsumerConnector(config) as c, anyio.create_task_group() as tg:
        streams = await c.create_message_streams({topic: 1})

        async def stop() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        async for msg in streams[topic][0]:
            sys.stdout.write(f"{msg.partition} {msg.offset}\n")
            sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
