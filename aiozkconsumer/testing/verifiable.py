"""The verifiable consumer process and a checkable producer, for history-checked fault tests.

Modelled on Kafka's ``VerifiableConsumer`` / ``VerifiableProducer`` (``reference/
reliability-and-style.md`` §1b): the producer writes records whose values say which record
they are, and keeps what the brokers acknowledged; each consumer process consumes with the real
:class:`~aiozkconsumer.ZookeeperConsumerConnector` and writes what it did as JSON lines. The
files are checked afterwards by :func:`aiozkconsumer.testing.history.check_history`.

Run a consumer::

    python -m aiozkconsumer.testing.verifiable --zookeeper 127.0.0.1:2181 --group g \\
        --topic t --streams 2 --events /tmp/c1.jsonl [--consumer-property k=v ...] \\
        [--member-id c1] [--commit-interval-ms 500] [--max-records 100] \\
        [--processing-delay-ms 0]

SIGTERM (or SIGINT) shuts it down cleanly: consuming stops, the consumed offsets are committed
(a ``committed`` event with ``"reason": "shutdown"``), every partition is given up (``revoked``,
``"reason": "shutdown"``), the connector closes, and a ``shutdown`` event is the last line.
SIGKILL leaves the events written so far: every event is one ``write(2)`` of one whole line to
a file opened with ``O_APPEND``, so a killed process leaves a valid prefix.

Commits
-------

The process commits itself, so that the history holds every commit exactly when it happened:
``auto.commit.enable`` is forced to ``false`` and the process calls ``commit_offsets`` with the
consumed offsets of the partitions it owns (1) every ``--commit-interval-ms``, (2) in the
rebalance listener's ``before_releasing_partitions`` for the partitions being released (while
it still owns their owner nodes; the original's MirrorMaker committed there too), and (3) at
shutdown. A ``committed`` event is written after ``commit_offsets`` returned, with the offsets
it was asked to write (ZooKeeper storage skips unchanged ones, which already hold that value).
A lock serializes these commits, so an interval commit in flight finishes before a release
goes on to delete owner nodes: the process never commits a partition another member may own.

Kafka-coordinated members
-------------------------

With ``--consumer-property group.coordinator=kafka`` (and ``bootstrap.servers``; ``--zookeeper``
is then not needed) the process is a member of a Kafka-coordinated group
(``KafkaConsumerConnector``, classic protocol, or KIP-848's with ``group.protocol=consumer``),
and the events identify its membership the same way: ``session`` is the member id the group
coordinator knows it by (``null`` between a fencing and the next join), ``generation`` the
group generation (classic) or the member epoch (consumer protocol) — so a member fenced and
rejoined under a new member id shows a session change, as an expired ZooKeeper session does.

Event schema (one JSON object per line)
---------------------------------------

Every event has ``ts`` (``time.time()``, seconds), ``member`` (``--member-id``), ``pid``,
``type``, ``session`` (the ZooKeeper session id as ``"0x..."``, or, Kafka-coordinated, the
member id; or ``null``) and ``generation`` (successful rebalances so far; Kafka-coordinated,
the group generation or member epoch, ``null`` outside a membership). Partition entries are
objects with ``topic`` and ``partition`` (and ``offset`` where said).

- ``startup``: ``consumer_id``, ``group``, ``topic``, ``streams``, ``properties``.
- ``state``: ``state``, a :class:`~aiozkconsumer.ConnectorState` value (``"running"``,
  ``"rebalancing"``, ``"suspended"``, ...), written when the connector's state changes
  (followed with ``wait_for_state_change()``); ``session_password`` (hex, or ``null``): the
  password of the session in ``session``. With the id it lets a fault injector expire the
  session on the server for real
  (:meth:`~aiozkconsumer.testing.LocalCluster.expire_session`); test clusters only.
- ``assigned``: ``partitions`` (each with ``offset``: the committed offset read when claiming,
  the position fetching starts from; -1 when none was committed), ``reason``. Written in the
  listener's ``before_starting_fetchers``: after the owner nodes were created, before any record
  of them is fetched. ``generation`` is that of the rebalance doing it.
- ``revoked``: ``partitions``, ``reason``: ``"rebalance"`` (written in
  ``before_releasing_partitions``, after the partitions stopped being handed out and were
  committed, before their owner nodes are deleted), ``"session_lost"`` (the ZooKeeper session
  was replaced: the old session's owner nodes are gone; ``session`` is the *old* session),
  ``"shutdown"``, ``"lost"`` (a Kafka-coordinated member dropped partitions without the
  listener because the coordinator had given them to another member: a fenced commit or
  heartbeat; written the moment they are dropped, as the Java client's ``onPartitionsLost``),
  or ``"observed"`` (a difference seen in ``statistics().owned_partitions`` that no listener
  call reported; should not happen).
- ``consumed``: ``topic``, ``partition``, ``min_offset``, ``max_offset``, ``count``, ``first``,
  ``last`` (the values at ``min_offset`` / ``max_offset`` as text): one event per partition per
  batch of ``stream.batches()``, written as the batch is handed out; ``handed_out_by`` (when
  the connector keeps a session lease): the wall-clock time by which the records were handed
  out at the latest — the end of the lease they were handed out under — for a member frozen
  between the hand-out and the event. (A batch whose offsets of a
  partition do not increase is split into increasing runs, so the checker sees the step back.)
- ``committed``: ``offsets`` (entries with ``offset``: the next offset to read), ``reason``:
  ``"interval"``, ``"release"`` or ``"shutdown"``; ``sent_ts``: when the commit was sent (it
  took effect between then and the event: a member frozen with its request on the wire logs
  it late).
- ``commit_failed``: ``offsets``, ``reason``, ``error``: ``commit_offsets`` raised (e.g. the
  session is suspended); nothing is known to be committed.
- ``error``: ``error``: the process stops on an unexpected error (exit status 1).
- ``shutdown``: the connector is closed (exit status 0).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import random
import signal
import socket
import sys
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors

from aiozkconsumer.base_connector import ConnectorStatistics, ConsumerConnector
from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.connector import ConnectorState, ZookeeperConsumerConnector
from aiozkconsumer.consumer import create_connector
from aiozkconsumer.errors import (
    BrokerNotAvailableError,
    ConsumerError,
    ConsumerTimeoutError,
    KafkaConnectionError,
    ZookeeperConnectionError,
)
from aiozkconsumer.records import MessageAndMetadata, TopicPartition
from aiozkconsumer.stream import KafkaStream
from aiozkconsumer.subscription import ConsumerThreadId
from aiozkconsumer.testing._clients import bounded_close
from aiozkconsumer.testing.history import ProducedLog

if TYPE_CHECKING:
    from aiozkconsumer.testing.cluster import LocalCluster

__all__ = [
    "EventWriter",
    "VerifiableConsumer",
    "VerifiableOptions",
    "main",
    "produce_checkable",
    "verifiable_consumer_command",
]

log = logging.getLogger(__name__)

_CLIENT_ID = "aiozkconsumer-verifiable"
_REQUEST_TIMEOUT_MS = 30_000
_CLOSE_TIMEOUT_S = 10.0


# -- the checkable producer ------------------------------------------------------------------


async def produce_checkable(
    cluster_or_bootstrap: LocalCluster | str,
    topic: str,
    partitions: int | Sequence[int],
    count: int,
    *,
    seed: int,
    log_file: str | Path | None = None,
) -> ProducedLog:
    """Produce ``count`` records that say which record they are, and return what was acked.

    Record ``seq`` (0, 1, ... per partition) of partition ``p`` has value ``b"<p>:<seq>"`` and
    key ``b"<seq>"``; each record goes to a partition drawn with ``random.Random(seed)``. The
    producer uses ``acks=all`` and idempotence (retries cannot duplicate or reorder a record),
    and the offsets come from each record's acknowledgement.

    Args:
        cluster_or_bootstrap: a running :class:`~aiozkconsumer.testing.LocalCluster`, or a
            ``bootstrap.servers`` string.
        topic: an existing topic.
        partitions: the number of partitions (ids ``0..n-1``) or the partition ids to use.
        count: records to produce in all, >= 0.
        seed: seeds the choice of partition per record.
        log_file: if given, the produced log is also written there as JSON lines
            (:meth:`~aiozkconsumer.testing.history.ProducedLog.write`).

    Returns:
        The produced log: per ``(topic, partition)``, ``(offset, value)`` in offset order.

    Raises:
        ValueError: ``count`` < 0 or no partition given.
        BrokerNotAvailableError: no broker answered.
        ProduceError: some records were not acknowledged (``acknowledged`` says how many were).
    """
    from aiozkconsumer.testing.cluster import ProduceError

    if count < 0:
        raise ValueError(f"count must be >= 0, not {count}")
    parts = list(range(partitions)) if isinstance(partitions, int) else sorted(set(partitions))
    if not parts:
        raise ValueError("no partition to produce to")
    bootstrap = (
        cluster_or_bootstrap
        if isinstance(cluster_or_bootstrap, str)
        else cluster_or_bootstrap.bootstrap_servers
    )
    rng = random.Random(seed)
    next_seq = dict.fromkeys(parts, 0)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        client_id=_CLIENT_ID,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        request_timeout_ms=_REQUEST_TIMEOUT_MS,
    )
    try:
        await producer.start()
    except kafka_errors.KafkaConnectionError as e:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer.stop(), _CLOSE_TIMEOUT_S)
        raise BrokerNotAvailableError(f"cannot reach Kafka at {bootstrap}: {e}") from e
    sent: list[tuple[int, str, asyncio.Future[Any]]] = []
    try:
        try:
            for _ in range(count):
                p = rng.choice(parts)
                seq = next_seq[p]
                next_seq[p] = seq + 1
                value = f"{p}:{seq}"
                future = await producer.send(
                    topic, value.encode(), key=str(seq).encode(), partition=p
                )
                sent.append((p, value, future))
        finally:
            outcomes = await asyncio.gather(*(f for _, _, f in sent), return_exceptions=True)
    except kafka_errors.KafkaError as e:
        acked = sum(1 for r in outcomes if not isinstance(r, BaseException))
        raise ProduceError(f"producing to {topic!r} failed: {e!r}", acked) from e
    finally:
        # Even when cancelled (a task group's cancel scope cancels every await here): an
        # unfinished stop would leave the producer's connections open.
        await bounded_close(producer.stop(), time_limit=_CLOSE_TIMEOUT_S, what="producer")
    failures = [r for r in outcomes if isinstance(r, BaseException)]
    if failures:
        raise ProduceError(
            f"{len(failures)} of {len(sent)} records to {topic!r} were not acknowledged "
            f"(first error: {failures[0]!r})",
            len(sent) - len(failures),
        )
    produced = ProducedLog.from_records(
        (topic, p, int(meta.offset), value)
        for (p, value, _), meta in zip(sent, outcomes, strict=True)
        if not isinstance(meta, BaseException)
    )
    if log_file is not None:
        await anyio.to_thread.run_sync(produced.write, Path(log_file))
    return produced


# -- the event writer ------------------------------------------------------------------------


class EventWriter:
    """Appends events to a JSON-lines file: one ``write(2)`` of one whole line per event.

    The file is opened with ``O_APPEND`` and nothing is buffered in the process, so a process
    killed at any point leaves only whole lines (bar a write cut by the kernel, which the
    loader tolerates on the last line).

    Args:
        path: the events file (created if missing, appended to).
        member: the ``member`` field of every event.
    """

    def __init__(self, path: str | Path, member: str) -> None:
        self.path = Path(path)
        self.member = member
        self.pid = os.getpid()
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, event_type: str, **fields: Any) -> dict[str, Any]:
        """Write one event now; returns it.

        Args:
            event_type: the ``type`` field.
            fields: the other fields (JSON-serializable; anything else is written as text).

        Raises:
            ValueError: the writer is closed.
        """
        if self._fd is None:
            raise ValueError("the event writer is closed")
        event = {
            "ts": time.time(),
            "member": self.member,
            "pid": self.pid,
            "type": event_type,
            **fields,
        }
        data = (json_line(event) + "\n").encode()
        while data:
            written = os.write(self._fd, data)
            data = data[written:]
        return event

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def json_line(obj: Mapping[str, Any]) -> str:
    """Compact JSON of one event (non-JSON values as text)."""
    return json.dumps(obj, separators=(",", ":"), default=str)


def _session_text(session_id: int | None) -> str | None:
    return None if session_id is None else f"0x{session_id:x}"


def _entries(
    tps: Mapping[TopicPartition, int] | Sequence[TopicPartition],
) -> list[dict[str, Any]]:
    if isinstance(tps, Mapping):
        return [
            {"topic": tp.topic, "partition": tp.partition, "offset": offset}
            for tp, offset in sorted(tps.items())
        ]
    return [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(tps)]


START_ATTEMPTS = 6
"""How often the verifiable consumer tries to open its session at start."""
START_BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)
"""The waits between those attempts, s (a link cut that refuses connections fails an attempt
at once: without a wait, four attempts took 40 ms and the member exited)."""


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


# -- the verifiable consumer -----------------------------------------------------------------


@dataclass(frozen=True)
class VerifiableOptions:
    """What one verifiable consumer process does (the command line's options).

    Attributes:
        zookeeper: ``zookeeper.connect``; ``None`` for a Kafka-coordinated member.
        group: ``group.id``.
        topic: the topic to consume.
        events: the JSON-lines events file.
        streams: streams (consumer threads) for the topic, >= 1.
        properties: further consumer properties (dotted keys); ``auto.offset.reset``
            defaults to ``smallest``; ``auto.commit.enable`` is always ``false``.
        member_id: the ``member`` field of the events; default ``<hostname>-<pid>``.
        commit_interval_ms: how often consumed offsets are committed, ms, > 0.
        max_records: the largest batch taken from a stream, >= 1.
        processing_delay_ms: a pause after each batch, ms (makes kills land mid-stream).
    """

    zookeeper: str | None
    group: str
    topic: str
    events: Path
    streams: int = 1
    properties: Mapping[str, str] = field(default_factory=dict)
    member_id: str | None = None
    commit_interval_ms: int = 500
    max_records: int = 100
    processing_delay_ms: int = 0

    def consumer_properties(self) -> dict[str, str]:
        """The properties the connector is built from."""
        props = {"auto.offset.reset": "smallest", **self.properties}
        if props.get("auto.commit.enable", "false").strip().lower() != "false":
            log.warning("auto.commit.enable is forced to false: the process commits itself")
        props.update({"group.id": self.group, "auto.commit.enable": "false"})
        if self.zookeeper is not None:
            props["zookeeper.connect"] = self.zookeeper
        return props


class VerifiableConsumer:
    """One member of a group that records what it does (see the module docstring).

    It is its own ``ConsumerRebalanceListener``.

    Args:
        options: what to consume and how.
        writer: where the events go.
    """

    def __init__(self, options: VerifiableOptions, writer: EventWriter) -> None:
        if options.streams < 1 or options.max_records < 1 or options.commit_interval_ms < 1:
            raise ValueError("streams, max_records and commit_interval_ms must be >= 1")
        self.options = options
        self.writer = writer
        self.config = ConsumerConfig.from_properties(options.consumer_properties())
        self.connector: ConsumerConnector = create_connector(self.config)
        if not isinstance(self.connector, ZookeeperConsumerConnector):
            self.connector.ownership.on_change(self._owned_changed)
        self._owned: set[TopicPartition] = set()
        self._session: str | None = None
        self._last_state: ConnectorState | None = None
        self._commit_lock = anyio.Lock()
        self._stop = anyio.Event()

    def stop(self) -> None:
        """Ask for a clean shutdown (what SIGTERM does)."""
        self._stop.set()

    # -- events --------------------------------------------------------------------------

    def _emit(self, event_type: str, **fields: Any) -> None:
        stats = self.connector.statistics()
        fields.setdefault("session", self._session_of(stats))
        if self.config.kafka_coordinated:
            # The coordinator's generation (or member epoch), which fences commits.
            fields["generation"] = stats.group_generation
        else:
            fields.setdefault("generation", stats.completed_rebalances)
        if event_type == "state":
            fields.setdefault("session_password", self._session_password())
        self.writer.write(event_type, **fields)

    def _session_of(self, stats: ConnectorStatistics) -> str | None:
        """The membership the events are written under: the ZooKeeper session id, or the
        member id a Kafka group coordinator gave (``None`` while there is none)."""
        if self.config.kafka_coordinated:
            return stats.member_id or None
        return _session_text(stats.session_id)

    def _session_password(self) -> str | None:
        """The current ZooKeeper session's password as hex (``None`` before the first
        session, and for a Kafka-coordinated member)."""
        if not isinstance(self.connector, ZookeeperConsumerConnector):
            return None
        password = self.connector.zk.session_password
        return None if password is None else password.hex()

    def _sync_session(self) -> None:
        """After a session was replaced (expiry, or a new member id), record that its
        partitions are gone."""
        current = self._session_of(self.connector.statistics())
        if current is None:
            return
        if self._session is not None and current != self._session and self._owned:
            self._emit(
                "revoked",
                partitions=_entries(sorted(self._owned)),
                reason="session_lost",
                session=self._session,
            )
            self._owned.clear()
        self._session = current

    def _sync_owned(self, reason: str, generation: int | None = None) -> None:
        """Record the difference between the partitions owned now and those last recorded."""
        stats = self.connector.statistics()
        owned = set(stats.owned_partitions)
        gone = self._owned - owned
        if gone:
            self._emit("revoked", partitions=_entries(sorted(gone)), reason="observed")
        new = owned - self._owned
        if new:
            claimed = {tp: stats.committed_offsets.get(tp, -1) for tp in new}
            self._emit(
                "assigned",
                partitions=_entries(claimed),
                reason=reason,
                generation=stats.completed_rebalances + 1 if generation is None else generation,
            )
        self._owned = owned

    def _owned_changed(self) -> None:
        """(Kafka-coordinated members, on every change of the owned set.) Record partitions
        dropped without the listener, reason ``lost``, the moment they go: a fenced member
        drops them and may be given the same partitions again a moment later, and a history
        that missed the drop would join the two ownerships into one."""
        if self.connector.state in (ConnectorState.CLOSING, ConnectorState.CLOSED):
            return  # the shutdown records its own revocation
        gone = self._owned - set(self.connector.ownership.owned())
        if gone:
            self._emit("revoked", partitions=_entries(sorted(gone)), reason="lost")
            self._owned -= gone

    # -- the rebalance listener ----------------------------------------------------------

    async def before_releasing_partitions(self, partition_ownership: dict[str, set[int]]) -> None:
        """Commit the partitions being released, then record the release.

        Args:
            partition_ownership: ``{topic: {partition, ...}}`` being released.
        """
        self._sync_session()
        released = {
            TopicPartition(topic, p) for topic, ps in partition_ownership.items() for p in ps
        }
        await self._commit("release", only=released)
        self._emit(
            "revoked",
            partitions=_entries(sorted(released)),
            reason="rebalance",
            generation=self.connector.statistics().completed_rebalances + 1,
        )
        self._owned -= released

    async def before_starting_fetchers(
        self, consumer_id: str, global_partition_assignment: dict[str, dict[int, ConsumerThreadId]]
    ) -> None:
        """Record the partitions just claimed (their owner nodes exist; nothing fetched yet).

        Args:
            consumer_id: this consumer's id string.
            global_partition_assignment: the group's assignment (unused: the connector's
                ``statistics()`` says what this member owns now).
        """
        self._sync_session()
        self._sync_owned("rebalance", self.connector.statistics().completed_rebalances + 1)

    # -- tasks ---------------------------------------------------------------------------

    async def _commit(self, reason: str, only: set[TopicPartition] | None = None) -> None:
        """Commit consumed offsets of owned partitions (``only`` those) and record it."""
        async with self._commit_lock:
            # Shielded: a commit that reached ZooKeeper is recorded, even on shutdown.
            with anyio.CancelScope(shield=True):
                stats = self.connector.statistics()
                offsets = {
                    tp: o
                    for tp, o in stats.consumed_offsets.items()
                    if o >= 0 and tp in self._owned and (only is None or tp in only)
                }
                if not offsets:
                    return
                sent = time.time()
                try:
                    await self.connector.commit_offsets(offsets)
                except ConsumerError as e:
                    self._emit(
                        "commit_failed", offsets=_entries(offsets), reason=reason, error=str(e)
                    )
                    return
                self._emit("committed", offsets=_entries(offsets), reason=reason, sent_ts=sent)

    async def _commit_loop(self) -> None:
        interval = self.options.commit_interval_ms / 1000
        while True:
            await anyio.sleep(interval)
            await self._commit("interval")

    async def _follow_states(self) -> None:
        while True:
            state = await self.connector.wait_for_state_change()
            self._sync_session()
            if state is not self._last_state:
                self._last_state = state
                self._emit("state", state=state.value)
            if state in (ConnectorState.RUNNING, ConnectorState.REBALANCE_FAILED):
                self._sync_owned("observed")

    def _record_batch(self, batch: Sequence[MessageAndMetadata]) -> None:
        # When the batch was handed out, at the latest: the connector hands records out only
        # within its session lease, so a process frozen between the hand-out and this line
        # (SIGSTOP, a long pause) still logs when the hand-out could have happened at most.
        # Nothing awaits between the batch's return and here, so the lease is still the one
        # the hand-out was checked against.
        deadline = self.connector.gate.deadline
        now_wall, now_mono = time.time(), time.monotonic()
        handed_out_by = now_wall - max(0.0, now_mono - deadline) if deadline != math.inf else None
        runs: dict[tuple[str, int], list[MessageAndMetadata]] = {}
        order: list[list[MessageAndMetadata]] = []
        for msg in batch:
            key = (msg.topic, msg.partition)
            run = runs.get(key)
            if run is None or msg.offset <= run[-1].offset:
                run = runs[key] = []
                order.append(run)
            run.append(msg)
        for run in order:
            first, last = run[0], run[-1]
            self._emit(
                "consumed",
                topic=first.topic,
                partition=first.partition,
                min_offset=first.offset,
                max_offset=last.offset,
                count=len(run),
                first=_text(first.value),
                last=_text(last.value),
                **({"handed_out_by": handed_out_by} if handed_out_by is not None else {}),
            )

    async def _start_connector(self, c: ConsumerConnector) -> None:
        """Open the connector's session, trying again while ZooKeeper (or, Kafka-coordinated,
        every broker) is unreachable.

        What a process supervisor would do for a consumer started during a network cut:
        each try is bounded by ``zookeeper.connection.timeout.ms``, the next one comes after
        ``START_BACKOFF_S``; after ``START_ATTEMPTS`` the error is raised (and the process
        exits with status 1).
        """
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                await c.start()
                return
            except (ZookeeperConnectionError, KafkaConnectionError) as e:
                if attempt == START_ATTEMPTS or self._stop.is_set():
                    raise
                log.warning("start attempt %d failed: %s; trying again", attempt, e)
                self._emit("error", error=f"start attempt {attempt}: {e}")
                with anyio.move_on_after(START_BACKOFF_S[attempt - 1]):
                    await self._stop.wait()
                if self._stop.is_set():
                    raise

    async def _consume(self, stream: KafkaStream) -> None:
        delay = self.options.processing_delay_ms / 1000
        while True:
            try:
                batches = cast(
                    AsyncGenerator[list[MessageAndMetadata], None],
                    stream.batches(self.options.max_records),
                )
                async with contextlib.aclosing(batches) as it:
                    async for batch in it:
                        self._record_batch(batch)
                        if delay:
                            await anyio.sleep(delay)
                return  # the stream ended: the connector is shutting down
            except ConsumerTimeoutError:
                continue  # consumer.timeout.ms set: keep waiting

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("signal %s: shutting down", signum)
                self.stop()

    # -- the run -------------------------------------------------------------------------

    async def run(self, *, handle_signals: bool = True) -> None:
        """Consume until :meth:`stop` (or SIGTERM/SIGINT), recording everything.

        Args:
            handle_signals: install the SIGTERM/SIGINT handlers (main thread only).

        Raises:
            ConsumerError: the connector failed (e.g. the first rebalance failed).
        """
        c = self.connector
        o = self.options
        self.writer.write(
            "startup",
            session=None,
            generation=0,
            consumer_id=c.consumer_id_string,
            group=o.group,
            topic=o.topic,
            streams=o.streams,
            properties=o.consumer_properties(),
        )
        c.set_consumer_rebalance_listener(self)
        async with anyio.create_task_group() as outer:
            if handle_signals:
                outer.start_soon(self._watch_signals)
            await self._start_connector(c)
            async with _entered(c):
                self._session = self._session_of(c.statistics())
                self._last_state = c.state
                self._emit("state", state=c.state.value)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._follow_states)
                    streams = await c.create_message_streams({o.topic: o.streams})
                    self._sync_owned("observed")
                    for stream in streams[o.topic]:
                        tg.start_soon(self._consume, stream)
                    tg.start_soon(self._commit_loop)
                    await self._stop.wait()
                    tg.cancel_scope.cancel()
                await self._commit("shutdown")
                self._sync_session()
                if self._owned:
                    self._emit(
                        "revoked", partitions=_entries(sorted(self._owned)), reason="shutdown"
                    )
                    self._owned.clear()
            self._emit("shutdown")
            outer.cancel_scope.cancel()


def verifiable_consumer_command(
    *,
    zookeeper: str | None,
    group: str,
    topic: str,
    events: str | Path,
    streams: int = 1,
    properties: Mapping[str, object] | None = None,
    member_id: str | None = None,
    commit_interval_ms: int | None = None,
    max_records: int | None = None,
    processing_delay_ms: int | None = None,
) -> list[str]:
    """The argv that runs a verifiable consumer with this interpreter (for ``subprocess``).

    ``zookeeper`` is ``None`` for a Kafka-coordinated member (``group.coordinator=kafka`` in
    ``properties``).

    Returns:
        ``[sys.executable, "-m", "aiozkconsumer.testing.verifiable", ...]``.
    """
    argv = [
        sys.executable,
        "-m",
        "aiozkconsumer.testing.verifiable",
        "--group",
        group,
        "--topic",
        topic,
        "--streams",
        str(streams),
        "--events",
        str(events),
    ]
    if zookeeper is not None:
        argv += ["--zookeeper", zookeeper]
    for key, value in (properties or {}).items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        argv += ["--consumer-property", f"{key}={text}"]
    for flag, opt in (
        ("--member-id", member_id),
        ("--commit-interval-ms", commit_interval_ms),
        ("--max-records", max_records),
        ("--processing-delay-ms", processing_delay_ms),
    ):
        if opt is not None:
            argv += [flag, str(opt)]
    return argv


# -- command line ----------------------------------------------------------------------------


def _property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m aiozkconsumer.testing.verifiable",
        description="A consumer-group member that records what it does as JSON lines.",
    )
    parser.add_argument(
        "--zookeeper",
        default=None,
        help="zookeeper.connect (not for a member with group.coordinator=kafka)",
    )
    parser.add_argument("--group", required=True, help="group.id")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--events", required=True, type=Path, help="JSON-lines events file")
    parser.add_argument(
        "--consumer-property",
        type=_property,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a consumer property (dotted key); repeatable",
    )
    parser.add_argument("--member-id", default=None)
    parser.add_argument("--commit-interval-ms", type=int, default=500)
    parser.add_argument("--max-records", type=int, default=100)
    parser.add_argument("--processing-delay-ms", type=int, default=0)
    parser.add_argument("--log-level", default="WARNING")
    return parser


class _entered(contextlib.AbstractAsyncContextManager["ConsumerConnector"]):
    """``async with`` for a connector that was started already (``__aexit__`` only)."""

    def __init__(self, connector: ConsumerConnector) -> None:
        self.connector = connector

    async def __aenter__(self) -> ConsumerConnector:
        return self.connector

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self.connector.__aexit__(*exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one verifiable consumer until SIGTERM/SIGINT.

    Returns:
        0 after a clean shutdown; 1 after an error (an ``error`` event says which); 2 for bad
        arguments.
    """
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    options = VerifiableOptions(
        zookeeper=args.zookeeper,
        group=args.group,
        topic=args.topic,
        events=args.events,
        streams=args.streams,
        properties=dict(args.consumer_property),
        member_id=args.member_id,
        commit_interval_ms=args.commit_interval_ms,
        max_records=args.max_records,
        processing_delay_ms=args.processing_delay_ms,
    )
    member = options.member_id or f"{socket.gethostname()}-{os.getpid()}"
    writer = EventWriter(options.events, member)
    try:
        try:
            consumer = VerifiableConsumer(options, writer)
        except (ConsumerError, ValueError) as e:
            writer.write("error", error=repr(e))
            sys.stderr.write(f"verifiable consumer: {e}\n")
            return 2
        try:
            anyio.run(consumer.run)
        except Exception as e:  # record any failure, then report it
            writer.write("error", error=repr(e))
            log.exception("verifiable consumer failed")
            return 1
        return 0
    finally:
        writer.close()


if __name__ == "__main__":
    sys.exit(main())
