"""A verifiable consumer on plain aiokafka: the reference member of a chaos soak.

The chaos runner (:func:`aiozkconsumer.testing.chaos.run_chaos` with ``client="aiokafka"``)
starts these processes instead of :mod:`aiozkconsumer.testing.verifiable`'s, under the same
fault schedule, so that the same history checker and the same soak report measure aiokafka's
``AIOKafkaConsumer`` (classic group protocol) next to our members. The process writes the
event schema :mod:`aiozkconsumer.testing.verifiable` documents; what differs is said here.

Run a member::

    python -m aiozkconsumer.testing.verifiable_aiokafka --group g --topic t \\
        --events /tmp/c1.jsonl --consumer-property bootstrap.servers=127.0.0.1:9092 \\
        [--consumer-property session.timeout.ms=6000 ...] [--member-id c1] \\
        [--commit-interval-ms 250] [--max-records 200] [--processing-delay-ms 0]

How it consumes
---------------

One ``AIOKafkaConsumer`` subscribed to the topic with a ``ConsumerRebalanceListener``,
``enable_auto_commit=False`` (the process commits itself, as our verifiable members do, so
every commit is in the history when it happened), ``auto_offset_reset="earliest"``; the
chaos runner's properties map onto its arguments (:func:`consumer_kwargs`: session timeout,
heartbeat interval, ``isolation.level``, ``socket.timeout.ms`` as ``request_timeout_ms``).
Records come from ``getmany(*owned, max_records=--max-records)``; ``--streams`` is accepted
and ignored (one fetch loop per process). Commits, each recorded as ``committed`` or
``commit_failed``: the consumed offsets of the owned partitions every
``--commit-interval-ms``, those of the partitions being revoked in ``on_partitions_revoked``
(aiokafka's documented place), and everything at shutdown; one lock serializes them. A
partition's consumed offset is forgotten when it is revoked, so a partition that comes back
is committed only once it handed something out again.

Events, and where they differ from our members'
------------------------------------------------

- ``state``: ``"connected"`` once the consumer started (bootstrap answered), ``"rebalancing"``
  in ``on_partitions_revoked`` (aiokafka stops handing records out before it calls it),
  ``"running"`` after ``on_partitions_assigned`` was recorded. No ``"suspended"``: aiokafka
  does not say when it loses its coordinator.
- ``assigned``: written in ``on_partitions_assigned`` once each new partition's position is
  known (``consumer.position``, what fetching starts from; ``-1`` when it is not known within
  the session timeout, and the checker then takes the group commit). Records of a partition
  are handed out only after its ``assigned`` event: ``getmany`` is asked for the recorded
  partitions only, and records of a partition not (or no longer) recorded that a call begun
  before a rebalance still returns are declined: the partition is ``seek``-ed back to the
  first of them, so they are fetched again, not skipped (:func:`split_batch`).
- ``revoked``: reason ``"rebalance"`` (from ``on_partitions_revoked``: aiokafka's eager
  protocol revokes everything at every rebalance, a fenced member included, so there is no
  ``"lost"``) or ``"shutdown"``.
- ``session`` and ``generation`` are ``null`` in every event: aiokafka's public API shows
  neither its member id nor the group generation. The checker's session-change rules (epochs
  ended by a session loss) therefore never fire for these members; a fenced member's epochs
  end at its ``revoked`` event, or, when another member claimed the partition first, at its
  last delivery (the checker's *superseded* rule).
- ``consumed`` has no ``handed_out_by`` (that is our session lease's deadline; aiokafka has
  none): the event's own time is the hand-out time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer
from aiokafka import errors as kafka_errors
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.structs import TopicPartition

from aiozkconsumer.testing.verifiable import (
    START_ATTEMPTS,
    START_BACKOFF_S,
    EventWriter,
    VerifiableOptions,
)

__all__ = [
    "AiokafkaVerifiableConsumer",
    "aiokafka_consumer_command",
    "commit_plan",
    "consumed_events",
    "consumer_kwargs",
    "main",
    "split_batch",
]

log = logging.getLogger(__name__)

_MODULE = "aiozkconsumer.testing.verifiable_aiokafka"
_GETMANY_TIMEOUT_MS = 200
_IDLE_S = 0.1
"""How long the fetch loop waits when no partition is recorded as owned."""
_ERROR_BACKOFF_S = 0.5
_STOP_TIMEOUT_S = 20.0
_DEFAULT_SESSION_TIMEOUT_MS = 10_000
_OFFSET_RESET = {
    "smallest": "earliest",
    "earliest": "earliest",
    "largest": "latest",
    "latest": "latest",
}
_INT_PROPERTIES = {
    "session.timeout.ms": "session_timeout_ms",
    "heartbeat.interval.ms": "heartbeat_interval_ms",
    "socket.timeout.ms": "request_timeout_ms",
}


# -- pure decisions --------------------------------------------------------------------------


class Record(Protocol):
    """What the event writer reads of a fetched record (aiokafka's ``ConsumerRecord``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def value(self) -> Any: ...


def consumer_kwargs(properties: Mapping[str, str]) -> dict[str, Any]:
    """``AIOKafkaConsumer`` keyword arguments for a Kafka-coordinated member's properties.

    The chaos runner gives our members and these the same properties; those that mean
    something to aiokafka are mapped, those that would change what is measured are refused.

    Args:
        properties: dotted consumer properties (``bootstrap.servers`` required).

    Returns:
        ``bootstrap_servers``, ``group_id`` (from ``group.id``, if given),
        ``enable_auto_commit=False``, ``auto_offset_reset`` (``earliest`` unless
        ``auto.offset.reset`` says ``largest``/``latest``), and where given
        ``session_timeout_ms``, ``heartbeat_interval_ms``, ``request_timeout_ms`` (from
        ``socket.timeout.ms``) and ``isolation_level``.

    Raises:
        ValueError: ``bootstrap.servers`` is missing; ``group.protocol`` is not ``classic``
            (aiokafka has no KIP-848 member); ``group.coordinator`` is not ``kafka``;
            auto-commit is asked for (the process commits itself); a value is malformed; or
            a property is not one of these.
    """
    props = dict(properties)
    kwargs: dict[str, Any] = {"enable_auto_commit": False, "auto_offset_reset": "earliest"}
    bootstrap = props.pop("bootstrap.servers", "").strip()
    if not bootstrap:
        raise ValueError("bootstrap.servers is required")
    kwargs["bootstrap_servers"] = bootstrap
    if "group.id" in props:
        kwargs["group_id"] = props.pop("group.id")
    protocol = props.pop("group.protocol", "classic").strip().lower()
    if protocol != "classic":
        raise ValueError(
            f"group.protocol={protocol}: aiokafka's AIOKafkaConsumer has the classic protocol only"
        )
    coordinator = props.pop("group.coordinator", "kafka").strip().lower()
    if coordinator != "kafka":
        raise ValueError(f"group.coordinator={coordinator}: aiokafka groups are Kafka-coordinated")
    for key in ("auto.commit.enable", "enable.auto.commit"):
        if props.pop(key, "false").strip().lower() != "false":
            raise ValueError(f"{key}: the member commits itself; auto-commit must stay off")
    reset = props.pop("auto.offset.reset", "earliest").strip().lower()
    if reset not in _OFFSET_RESET:
        raise ValueError(f"auto.offset.reset={reset}: expected smallest/earliest or largest/latest")
    kwargs["auto_offset_reset"] = _OFFSET_RESET[reset]
    for key, name in _INT_PROPERTIES.items():
        if key in props:
            try:
                kwargs[name] = int(props.pop(key))
            except ValueError:
                raise ValueError(f"{key} must be an integer (ms)") from None
    if "isolation.level" in props:
        level = props.pop("isolation.level").strip().lower()
        if level not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"isolation.level={level}: read_committed or read_uncommitted")
        kwargs["isolation_level"] = level
    if props:
        raise ValueError(f"properties the aiokafka member does not take: {sorted(props)}")
    return kwargs


def split_batch(
    batch: Mapping[TopicPartition, Sequence[Record]], recorded: Collection[TopicPartition]
) -> tuple[dict[TopicPartition, list[Record]], dict[TopicPartition, int]]:
    """Split a ``getmany`` result into what may be handed out and what must be declined.

    Records of a partition whose ``assigned`` event is not written (a ``getmany`` begun before
    a rebalance, asked for the partitions recorded then) may not be handed out: the caller
    seeks each such partition back to the first declined offset, so they are fetched again.

    Args:
        batch: ``{partition: records}`` as ``getmany`` returns it.
        recorded: the partitions recorded as owned now.

    Returns:
        ``(accepted, declined)``: accepted ``{partition: records}`` (partitions without
        records left out), and ``{partition: lowest offset}`` of the declined ones.
    """
    accepted: dict[TopicPartition, list[Record]] = {}
    declined: dict[TopicPartition, int] = {}
    for tp, records in batch.items():
        if not records:
            continue
        if tp in recorded:
            accepted[tp] = list(records)
        else:
            declined[tp] = min(r.offset for r in records)
    return accepted, declined


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def consumed_events(batch: Mapping[TopicPartition, Sequence[Record]]) -> list[dict[str, Any]]:
    """The ``consumed`` events' fields for records handed out together.

    One event per partition, or per run of increasing offsets when a partition's offsets step
    back (so the checker sees the step), in the order the records came.

    Returns:
        Dicts with ``topic``, ``partition``, ``min_offset``, ``max_offset``, ``count``,
        ``first`` and ``last`` (the values at the first and last offset, as text).
    """
    events: list[dict[str, Any]] = []
    for records in batch.values():
        runs: list[list[Record]] = []
        for record in records:
            if not runs or record.offset <= runs[-1][-1].offset:
                runs.append([])
            runs[-1].append(record)
        for run in runs:
            first, last = run[0], run[-1]
            events.append(
                {
                    "topic": first.topic,
                    "partition": first.partition,
                    "min_offset": first.offset,
                    "max_offset": last.offset,
                    "count": len(run),
                    "first": _text(first.value),
                    "last": _text(last.value),
                }
            )
    return events


def commit_plan(
    consumed: Mapping[TopicPartition, int],
    owned: Collection[TopicPartition],
    only: Collection[TopicPartition] | None = None,
) -> dict[TopicPartition, int]:
    """The offsets to commit: the consumed offset (next to read) of each owned partition that
    handed something out, restricted to ``only`` when given."""
    return {
        tp: offset
        for tp, offset in consumed.items()
        if offset >= 0 and tp in owned and (only is None or tp in only)
    }


def _entries(
    tps: Mapping[TopicPartition, int] | Collection[TopicPartition],
) -> list[dict[str, Any]]:
    if isinstance(tps, Mapping):
        return [
            {"topic": tp.topic, "partition": tp.partition, "offset": offset}
            for tp, offset in sorted(tps.items())
        ]
    return [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(tps)]


# -- the member ------------------------------------------------------------------------------


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    """aiokafka wants an instance of its class; this one forwards to the member."""

    def __init__(self, member: AiokafkaVerifiableConsumer) -> None:
        self.member = member

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.member.on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.member.on_partitions_assigned(assigned)


class AiokafkaVerifiableConsumer:
    """One aiokafka group member that records what it does (see the module docstring).

    Args:
        options: what to consume and how (``zookeeper`` must be ``None``; ``streams`` is
            ignored).
        writer: where the events go.

    Raises:
        ValueError: an option is out of range or a property is refused
            (:func:`consumer_kwargs`).
    """

    def __init__(self, options: VerifiableOptions, writer: EventWriter) -> None:
        if options.zookeeper is not None:
            raise ValueError("the aiokafka member is Kafka-coordinated: no --zookeeper")
        if options.max_records < 1 or options.commit_interval_ms < 1:
            raise ValueError("max_records and commit_interval_ms must be >= 1")
        self.options = options
        self.writer = writer
        self.kwargs = consumer_kwargs({**options.properties, "group.id": options.group})
        self.kwargs.setdefault("client_id", f"aiokafka-verifiable-{writer.member}")
        self.consumer: AIOKafkaConsumer | None = None
        self._owned: set[TopicPartition] = set()
        self._consumed: dict[TopicPartition, int] = {}
        self._state: str | None = None
        self._closing = False
        self._commit_lock = asyncio.Lock()
        self._stop = asyncio.Event()

    def stop(self) -> None:
        """Ask for a clean shutdown (what SIGTERM does)."""
        self._stop.set()

    def _emit(self, event_type: str, **fields: Any) -> None:
        # aiokafka's public API shows neither the member id nor the generation.
        fields.setdefault("session", None)
        fields.setdefault("generation", None)
        self.writer.write(event_type, **fields)

    def _set_state(self, state: str) -> None:
        if state != self._state:
            self._state = state
            self._emit("state", state=state, session_password=None)

    # -- the rebalance listener ----------------------------------------------------------

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Commit the partitions being revoked, then record the revocation."""
        if self._closing:
            return
        self._set_state("rebalancing")
        async with self._commit_lock:
            released = self._owned & set(revoked)
            if not released:
                return
            await self._commit_locked("release", only=released)
            self._emit("revoked", partitions=_entries(released), reason="rebalance")
            self._release(released)

    def _release(self, tps: set[TopicPartition]) -> None:
        # Forget what was consumed too: once another member owned the partition, that offset
        # is stale, and committing it when the partition comes back would move the group's
        # commit back.
        self._owned -= tps
        for tp in tps:
            self._consumed.pop(tp, None)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Record the new partitions with the positions fetching starts from; from then on
        their records may be handed out."""
        if self._closing:
            return
        new = set(assigned) - self._owned
        positions = await self._positions(new)
        if self._closing:
            return
        if new:
            self._emit("assigned", partitions=_entries(positions), reason="rebalance")
            self._owned |= new
        self._set_state("running")

    async def _positions(self, tps: set[TopicPartition]) -> dict[TopicPartition, int]:
        assert self.consumer is not None
        consumer = self.consumer
        limit = self.kwargs.get("session_timeout_ms", _DEFAULT_SESSION_TIMEOUT_MS) / 1000

        async def one(tp: TopicPartition) -> int:
            try:
                return int(await asyncio.wait_for(consumer.position(tp), limit))
            except (TimeoutError, kafka_errors.KafkaError) as e:
                log.warning("position of %s not known (%s): recorded as -1", tp, e)
                return -1

        values = await asyncio.gather(*(one(tp) for tp in sorted(tps)))
        return dict(zip(sorted(tps), values, strict=True))

    # -- commits -------------------------------------------------------------------------

    async def _commit(self, reason: str) -> None:
        async with self._commit_lock:
            await self._commit_locked(reason)

    async def _commit_locked(self, reason: str, only: set[TopicPartition] | None = None) -> None:
        assert self.consumer is not None
        offsets = commit_plan(self._consumed, self._owned, only)
        if not offsets:
            return
        sent = time.time()
        try:
            await self.consumer.commit(offsets)
        except kafka_errors.KafkaError as e:
            self._emit("commit_failed", offsets=_entries(offsets), reason=reason, error=repr(e))
            return
        self._emit("committed", offsets=_entries(offsets), reason=reason, sent_ts=sent)

    async def _commit_loop(self) -> None:
        interval = self.options.commit_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            await self._commit("interval")

    # -- consuming -----------------------------------------------------------------------

    async def _consume(self) -> None:
        assert self.consumer is not None
        delay = self.options.processing_delay_ms / 1000
        while True:
            asked = sorted(self._owned)
            if not asked:
                await asyncio.sleep(_IDLE_S)
                continue
            try:
                batch = await self.consumer.getmany(
                    *asked, timeout_ms=_GETMANY_TIMEOUT_MS, max_records=self.options.max_records
                )
            except kafka_errors.KafkaError as e:
                log.warning("getmany failed: %r", e)
                self._emit("error", error=f"getmany: {e!r}")
                await asyncio.sleep(_ERROR_BACKOFF_S)
                continue
            # Nothing awaits from getmany's return to the events: the hand-out is recorded
            # before a listener can run.
            accepted, declined = split_batch(batch, self._owned)
            for tp, offset in declined.items():
                with contextlib.suppress(kafka_errors.KafkaError):
                    self.consumer.seek(tp, offset)
            for fields in consumed_events(accepted):
                self._emit("consumed", **fields)
            for tp, records in accepted.items():
                self._consumed[tp] = max(self._consumed.get(tp, -1), records[-1].offset + 1)
            if delay and accepted:
                await asyncio.sleep(delay)

    async def _start(self) -> AIOKafkaConsumer:
        """Start a consumer, trying again (as our members do) while no broker answers."""
        for attempt in range(1, START_ATTEMPTS + 1):
            consumer = AIOKafkaConsumer(**self.kwargs)
            try:
                await consumer.start()
                return consumer
            except kafka_errors.KafkaConnectionError as e:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(consumer.stop(), _STOP_TIMEOUT_S)
                if attempt == START_ATTEMPTS or self._stop.is_set():
                    raise
                log.warning("start attempt %d failed: %s; trying again", attempt, e)
                self._emit("error", error=f"start attempt {attempt}: {e}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), START_BACKOFF_S[attempt - 1])
                if self._stop.is_set():
                    raise
        raise AssertionError("unreachable")

    async def run(self, *, handle_signals: bool = True) -> None:
        """Consume until :meth:`stop` (or SIGTERM/SIGINT), recording everything.

        Raises:
            KafkaConnectionError: (aiokafka's) no broker answered in ``START_ATTEMPTS``.
        """
        o = self.options
        self._emit(
            "startup",
            generation=0,
            consumer_id=self.kwargs["client_id"],
            group=o.group,
            topic=o.topic,
            streams=1,
            properties=dict(o.properties),
            client="aiokafka",
        )
        if handle_signals:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.stop)
        self.consumer = await self._start()
        try:
            self._set_state("connected")
            self.consumer.subscribe([o.topic], listener=_Listener(self))
            tasks = [
                asyncio.create_task(self._consume(), name="fetch loop"),
                asyncio.create_task(self._commit_loop(), name="commit loop"),
            ]
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait([stop, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in (stop, *tasks):
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for result in results:
                if isinstance(result, Exception):
                    raise result
            await self._commit("shutdown")
            if self._owned:
                self._emit("revoked", partitions=_entries(self._owned), reason="shutdown")
                self._release(set(self._owned))
        finally:
            self._closing = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.consumer.stop(), _STOP_TIMEOUT_S)
        self._emit("shutdown")


def aiokafka_consumer_command(
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
    """The argv that runs an aiokafka member with this interpreter.

    Takes the arguments of :func:`~aiozkconsumer.testing.verifiable.
    verifiable_consumer_command`, so that the chaos runner starts either with one call.

    Raises:
        ValueError: ``zookeeper`` is given (an aiokafka member is Kafka-coordinated).
    """
    if zookeeper is not None:
        raise ValueError("the aiokafka member is Kafka-coordinated: no zookeeper")
    argv = [
        sys.executable,
        "-m",
        _MODULE,
        "--group",
        group,
        "--topic",
        topic,
        "--streams",
        str(streams),
        "--events",
        str(events),
    ]
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
        prog=f"python -m {_MODULE}",
        description="An aiokafka group member that records what it does as JSON lines.",
    )
    parser.add_argument("--group", required=True, help="group.id")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--streams", type=int, default=1, help="ignored: one fetch loop")
    parser.add_argument("--events", required=True, type=Path, help="JSON-lines events file")
    parser.add_argument(
        "--consumer-property",
        type=_property,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a consumer property (dotted key, see consumer_kwargs); repeatable",
    )
    parser.add_argument("--member-id", default=None)
    parser.add_argument("--commit-interval-ms", type=int, default=500)
    parser.add_argument("--max-records", type=int, default=100)
    parser.add_argument("--processing-delay-ms", type=int, default=0)
    parser.add_argument("--log-level", default="WARNING")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one aiokafka member until SIGTERM/SIGINT.

    Returns:
        0 after a clean shutdown; 1 after an error (an ``error`` event says which); 2 for bad
        arguments or refused properties.
    """
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    options = VerifiableOptions(
        zookeeper=None,
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
            consumer = AiokafkaVerifiableConsumer(options, writer)
        except ValueError as e:
            writer.write("error", error=repr(e), session=None, generation=None)
            sys.stderr.write(f"aiokafka member: {e}\n")
            return 2
        try:
            asyncio.run(consumer.run())
        except Exception as e:  # record any failure, then report it
            writer.write("error", error=repr(e), session=None, generation=None)
            log.exception("aiokafka member failed")
            return 1
        return 0
    finally:
        writer.close()


if __name__ == "__main__":
    sys.exit(main())
