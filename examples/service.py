"""An aiohttp service that consumes a topic with a ``ZookeeperConsumerConnector``.

Run it (``pip install 'aiozkconsumer[examples]'``)::

    python examples/service.py --zookeeper 127.0.0.1:2181 --group billing --topic payments

or configure it with environment variables (``AIOZKCONSUMER_ZOOKEEPER``,
``AIOZKCONSUMER_GROUP``, ``AIOZKCONSUMER_TOPIC``, ``AIOZKCONSUMER_STREAMS``,
``AIOZKCONSUMER_BOOTSTRAP_SERVER``, ``SERVICE_HOST``, ``SERVICE_PORT``). Endpoints:

- ``GET /health``: the connector's state as JSON (status, state, owned partitions with
  consumed and committed offsets and lag, unowned partitions, session id, last error, records
  handled). HTTP 200 while the connector is ``running``, every consumer task is healthy and
  records can flow, 503 otherwise. ``status`` is ``"ok"``, ``"degraded"`` (still 200;
  ``reasons`` says why: the member owns no partition of the topic because it does not exist,
  or the group's plan gives it a partition it left unclaimed because its offset node in
  ZooKeeper does not hold a number, see ``offsets.malformed.reset``) or ``"failing"`` (503;
  ``reasons`` says why: a consumer task failed, the connector is not running, no broker has
  answered a fetch for ``socket.timeout.ms``, an owned partition has had no broker to
  fetch it from for that long, or the Kafka group coordinator has not answered for that long:
  :func:`fetch_stalls`). This is readiness; the process is
  alive while it answers at all.
- ``GET /metrics``: the Prometheus text exposition of ``connector.metrics.collector()``.

Lifecycle (an aiohttp ``cleanup_ctx``): startup enters the connector (``async with``),
creates the streams (the first rebalance) and starts one consumer task per stream; cleanup
stops the consumer tasks once their current batch is handled, then leaves the ``async
with``, which commits the consumed offsets, releases the partitions and closes the ZooKeeper
session, so the group's other members rebalance at once. Startup and cleanup must run in
the same task (``serve`` does both; so does ``web.run_app``), because the connector is an
async context manager. Cancelling the task that runs :func:`serve` (SIGINT/SIGTERM do that
here) goes through the same cleanup: the connector's shutdown is shielded and bounded.

Bad input ends the process at once with one error line and no traceback: exit status 2 for
a malformed argument or property (``--zookeeper foo``), 1 when the connector cannot start
(ZooKeeper unreachable within ``zookeeper.connection.timeout.ms``, the first rebalance
failed).

Replace :func:`handle` with your own processing. A record counts as consumed when it is
handed to a consumer task (the original consumer's rule); a batch handed out is always handled
before its task stops, so the shutdown commit covers handled records only. If ``handle``
raises, that consumer task ends and ``/health`` answers 503; the failed record's offset counts
as consumed and is committed with the others, so make ``handle`` retry (or dead-letter) what
it cannot process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from aiozkconsumer import (
    ConnectorState,
    ConnectorStatistics,
    ConsumerConfig,
    ConsumerError,
    InvalidConfigError,
    KafkaStream,
    MessageAndMetadata,
    ZookeeperConsumerConnector,
)
from aiozkconsumer.config import validate_bootstrap_servers, validate_zookeeper_connect

log = logging.getLogger("aiozkconsumer.examples.service")

Handler = Callable[[MessageAndMetadata], Awaitable[None]]


async def handle(msg: MessageAndMetadata) -> None:
    """Process one record: the service's business logic (here: nothing but a debug log)."""
    log.debug(
        "record %s-%d@%d: %d bytes", msg.topic, msg.partition, msg.offset, len(msg.value or b"")
    )


@dataclass(frozen=True)
class Settings:
    """What the service needs to know.

    Attributes:
        zookeeper: ``zookeeper.connect``.
        group: ``group.id``.
        topic: the topic to consume.
        streams: streams (consumer tasks) of the topic in this process.
        host: the HTTP listen address.
        port: the HTTP port (0: any free port; the log says which).
        properties: further consumer properties (dotted keys, string values).
        stop_grace_s: how long shutdown waits for consumer tasks to finish their batch.
    """

    zookeeper: str
    group: str
    topic: str
    streams: int = 1
    host: str = "127.0.0.1"
    port: int = 8080
    properties: dict[str, str] = field(default_factory=dict)
    stop_grace_s: float = 30.0

    def consumer_config(self) -> ConsumerConfig:
        """The connector's configuration: the properties plus group and ZooKeeper."""
        props: dict[str, object] = {"auto.offset.reset": "smallest", **self.properties}
        props["group.id"] = self.group
        props["zookeeper.connect"] = self.zookeeper
        return ConsumerConfig.from_properties(props)


def fetch_stalls(stats: ConnectorStatistics, bound_s: float) -> list[str]:
    """Why records cannot reach this member now, for ``/health`` (empty: they can).

    A fetch is answered within ``fetch.wait.max.ms`` even when no record waits, so no answer
    from any broker for ``bound_s`` (``socket.timeout.ms``) means no broker serves this
    member (``ConnectorStatistics.seconds_since_fetch``); a partition without a broker to
    fetch it from for that long (its leader unknown or down:
    ``ConnectorStatistics.partitions_without_leader``) is not read whatever the others do.
    With Kafka coordination, a group coordinator that has not answered for ``bound_s``
    (``ConnectorStatistics.seconds_since_coordinator``; heartbeats go every
    ``heartbeat.interval.ms``) counts too, partitions owned or not.

    Args:
        stats: the connector's statistics.
        bound_s: how long a stall may last before it counts, in seconds.
    """
    reasons: list[str] = []
    unanswered = stats.seconds_since_coordinator
    if unanswered is not None and unanswered > bound_s:
        reasons.append(
            f"the group coordinator has not answered for {unanswered:.0f} s "
            f"(socket.timeout.ms is {bound_s * 1000:.0f} ms): it is unknown or unreachable, "
            "so the member's assignment cannot be kept or changed"
        )
    if not stats.owned_partitions:
        return reasons
    idle = stats.seconds_since_fetch
    if idle is not None and idle > bound_s:
        reasons.append(
            f"no broker has answered a fetch for {idle:.0f} s (socket.timeout.ms is "
            f"{bound_s * 1000:.0f} ms): the brokers are down or unreachable"
        )
    stalled = sorted(tp for tp, s in stats.partitions_without_leader.items() if s > bound_s)
    if stalled:
        reasons.append(
            f"{len(stalled)} owned partition(s) had no broker to fetch from for more than "
            f"{bound_s:.0f} s (leader unknown or unreachable): "
            + ", ".join(f"{tp.topic}-{tp.partition}" for tp in stalled[:10])
            + (" ..." if len(stalled) > 10 else "")
        )
    return reasons


class ConsumerService:
    """The connector, its consumer tasks and what ``/health`` reports.

    Args:
        connector: an entered connector.
        handler: called for every record, in order per partition.
        topic: the subscribed topic.
    """

    def __init__(self, connector: ZookeeperConsumerConnector, handler: Handler, topic: str) -> None:
        self.connector = connector
        self.handler = handler
        self.topic = topic
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(connector.metrics.collector())
        self.records_handled = 0
        self.task_error: BaseException | None = None
        self.failed = asyncio.Event()
        """Set when a consumer task failed (``/health`` then answers 503)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._waiting: set[anyio.CancelScope] = set()
        self._stopping = False
        self._progress = anyio.Event()

    def start(self, streams: Sequence[KafkaStream]) -> None:
        """Start one consumer task per stream (owned here; :meth:`stop` ends them)."""
        for stream in streams:
            task = asyncio.create_task(self._consume(stream), name=f"consume {stream.name}")
            task.add_done_callback(self._task_done)
            self._tasks.append(task)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None and self.task_error is None:
            self.task_error = task.exception()
            self.failed.set()
            log.error("consumer task %s failed: %r", task.get_name(), self.task_error)

    async def _consume(self, stream: KafkaStream) -> None:
        iterator = stream.iterator
        while not self._stopping:
            # Only the wait for records is cancelled by stop(): a batch handed out (its
            # offsets count as consumed) is always handled before the task ends.
            with anyio.CancelScope() as waiting:
                self._waiting.add(waiting)
                try:
                    batch = await iterator.next_batch(500)
                except StopAsyncIteration:
                    return
                finally:
                    self._waiting.discard(waiting)
            if waiting.cancelled_caught:
                return
            for msg in batch:
                await self.handler(msg)
            self.records_handled += len(batch)
            self._progress.set()
            self._progress = anyio.Event()

    async def wait_handled(self, count: int) -> None:
        """Wait until at least ``count`` records were handled."""
        while self.records_handled < count:
            await self._progress.wait()

    async def stop(self, grace_s: float) -> None:
        """End the consumer tasks after their current batch (cancel them after ``grace_s``)."""
        self._stopping = True
        for scope in list(self._waiting):
            scope.cancel()
        if not self._tasks:
            return
        _, pending = await asyncio.wait(self._tasks, timeout=grace_s)
        for task in pending:
            log.warning("consumer task %s did not stop within %.0f s", task.get_name(), grace_s)
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def health(self) -> tuple[int, dict[str, Any]]:
        """``(HTTP status, JSON body)`` of ``/health``."""
        stats = self.connector.statistics()
        error = self.task_error or stats.last_error
        owned = [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "consumed_offset": stats.consumed_offsets.get(tp),
                "committed_offset": stats.committed_offsets.get(tp),
                "lag": stats.lag.get(tp),
            }
            for tp in stats.owned_partitions
        ]
        running = stats.state is ConnectorState.RUNNING and self.task_error is None
        stalls = fetch_stalls(stats, self.connector.config.socket_timeout_ms / 1000)
        healthy = running and not stalls
        reasons = stalls if running else []
        if healthy:
            reasons = await self._degraded_reasons(stats)
        body = {
            "status": "failing" if not healthy else "degraded" if reasons else "ok",
            "reasons": reasons,
            "state": stats.state.value,
            "consumer_id": stats.consumer_id,
            "session_id": None if stats.session_id is None else f"0x{stats.session_id:x}",
            "completed_rebalances": stats.completed_rebalances,
            "owned_partitions": owned,
            "unowned_partitions": [
                {"topic": tp.topic, "partition": tp.partition, "reason": why}
                for tp, why in sorted(stats.unowned_partitions.items())
            ],
            "records_handled": self.records_handled,
            "last_error": None if error is None else f"{type(error).__name__}: {error}",
        }
        return (200 if healthy else 503), body

    async def _degraded_reasons(self, stats: ConnectorStatistics) -> list[str]:
        """Why a running member consumes less than it should (empty when it does not)."""
        reasons = [
            f"partition {tp} is not consumed by any member: {why}"
            for tp, why in sorted(stats.unowned_partitions.items())
        ]
        if not any(tp.topic == self.topic for tp in stats.owned_partitions):
            # Owning none of a topic is normal with more members than partitions; it is
            # worth saying only when the topic is missing (a typo, not created yet).
            try:
                exists = self.topic in await self.connector.cluster.all_topics()
            except ConsumerError as e:
                reasons.append(f"could not check that topic {self.topic!r} exists: {e}")
            else:
                if not exists:
                    reasons.append(
                        f"topic {self.topic!r} does not exist: this member owns no partition"
                    )
        return reasons


SETTINGS = web.AppKey("settings", Settings)
HANDLER: web.AppKey[Handler] = web.AppKey("handler")
SERVICE = web.AppKey("service", ConsumerService)


async def consumer_lifespan(app: web.Application) -> AsyncIterator[None]:
    """The ``cleanup_ctx``: the connector lives from startup to cleanup (see the module doc)."""
    settings = app[SETTINGS]
    async with ZookeeperConsumerConnector(settings.consumer_config()) as connector:
        service = ConsumerService(connector, app[HANDLER], settings.topic)
        streams = await connector.create_message_streams({settings.topic: settings.streams})
        service.start(streams[settings.topic])
        app[SERVICE] = service
        try:
            yield
        finally:
            await service.stop(settings.stop_grace_s)
        # Leaving the block: commit consumed offsets, release partitions, close the session.
    log.info("consumer closed: %s", connector.statistics().state.value)


async def health_view(request: web.Request) -> web.Response:
    """``GET /health``."""
    status, body = await request.app[SERVICE].health()
    return web.json_response(body, status=status)


async def metrics_view(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text exposition."""
    body = generate_latest(request.app[SERVICE].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def create_app(settings: Settings, handler: Handler = handle) -> web.Application:
    """The aiohttp application (routes and the consumer's lifespan)."""
    app = web.Application()
    app[SETTINGS] = settings
    app[HANDLER] = handler
    app.cleanup_ctx.append(consumer_lifespan)
    app.router.add_get("/health", health_view)
    app.router.add_get("/metrics", metrics_view)
    return app


async def serve(
    app: web.Application,
    host: str,
    port: int,
    *,
    on_ready: Callable[[str], object] | None = None,
) -> None:
    """Run ``app`` until cancelled; startup and cleanup happen in this task.

    Args:
        app: the application from :func:`create_app`.
        host: listen address.
        port: listen port (0: a free one).
        on_ready: called with the base URL once the server listens.
    """
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()  # runs the startup half of consumer_lifespan
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        url = f"http://{bound_host}:{bound_port}"
        log.info("listening on %s", url)
        if on_ready is not None:
            on_ready(url)
        await asyncio.Event().wait()  # until cancelled
    finally:
        await runner.cleanup()  # the cleanup half: stop consumers, commit, release, close


class _ZookeeperClientNoise(logging.Filter):
    """Show the ZooKeeper client's (aiozk's) errors as one warning line, without traceback.

    aiozk logs each failed connection attempt as an error with a traceback, then retries; the
    connector reports what matters (``SUSPENDED``, ``ZookeeperConnectionError`` once its time
    limit passes), which this service logs as its one error line.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".", 1)[0] == "aiozk" and record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True


def _checked(validate: Callable[[str], str]) -> Callable[[str], str]:
    """An argparse ``type`` from a config validator: its message becomes argparse's error."""

    def check(value: str) -> str:
        try:
            return validate(value)
        except InvalidConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return check


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    """Settings from the command line, with defaults from the environment.

    Exits with status 2 (argparse's usage error) on a malformed argument.
    """
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--zookeeper",
        type=_checked(validate_zookeeper_connect),
        default=env("AIOZKCONSUMER_ZOOKEEPER", "127.0.0.1:2181"),
    )
    p.add_argument(
        "--group", default=env("AIOZKCONSUMER_GROUP"), required=not env("AIOZKCONSUMER_GROUP")
    )
    p.add_argument(
        "--topic", default=env("AIOZKCONSUMER_TOPIC"), required=not env("AIOZKCONSUMER_TOPIC")
    )
    p.add_argument("--streams", type=int, default=int(env("AIOZKCONSUMER_STREAMS", "1")))
    p.add_argument(
        "--bootstrap-server",
        type=_checked(validate_bootstrap_servers),
        default=env("AIOZKCONSUMER_BOOTSTRAP_SERVER"),
    )
    p.add_argument("--host", default=env("SERVICE_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env("SERVICE_PORT", "8080")))
    p.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a consumer property, e.g. auto.commit.interval.ms=5000 (repeatable)",
    )
    p.add_argument("--log-level", default=env("LOG_LEVEL", "INFO"))
    args = p.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(_ZookeeperClientNoise())
    props = {}
    for item in args.property:
        key, eq, value = item.partition("=")
        if not eq:
            p.error(f"--property expects KEY=VALUE, got {item!r}")
        props[key.strip()] = value
    if args.bootstrap_server:
        props.setdefault("bootstrap.servers", args.bootstrap_server)
    return Settings(
        zookeeper=args.zookeeper,
        group=args.group,
        topic=args.topic,
        streams=args.streams,
        host=args.host,
        port=args.port,
        properties=props,
    )


async def amain(settings: Settings) -> None:
    """Serve until SIGINT or SIGTERM, which cancel the serving task (a clean shutdown)."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await serve(create_app(settings), settings.host, settings.port)
    log.info("stopped")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: returns the exit status.

    0 after a clean shutdown; 2 for a malformed argument or consumer property; 1 when the
    connector fails (ZooKeeper unreachable, the first rebalance failed): one error line on
    stderr, no traceback.
    """
    settings = parse_args(argv)
    try:
        asyncio.run(amain(settings))
    except InvalidConfigError as e:
        log.error("invalid configuration: %s", e)
        return 2
    except ConsumerError as e:
        log.error("%s: %s", type(e).__name__, e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
