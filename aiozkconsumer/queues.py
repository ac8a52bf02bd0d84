"""A stream's queue of fetched chunks, and the room bookkeeping the fetchers need.

The original's ``LinkedBlockingQueue[FetchedDataChunk]`` of ``queued.max.message.chunks``
chunks between the fetcher threads and a stream's ``ConsumerIterator``. Here an
``asyncio.Queue`` that also says how much room is left for a fetch to fill, counting the
chunks fetches in flight will bring (``reserved``) and those already waiting for room
(``waiting``), and notifies listeners when a reader frees room, without any private asyncio
attribute. A queue also knows the reader that takes from it (:class:`PollingReader`), so a member
can tell how long that reader has held what it was handed (``max.poll.interval.ms``);
:func:`check_poll_interval` is that rule, shared by the Kafka members and the ZooKeeper
member's ``zookeeper.poll.liveness.enable``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from .records import FetchedDataChunk

__all__ = [
    "SHUTDOWN_COMMAND",
    "ChunkQueue",
    "PollCheck",
    "PollingReader",
    "RoomListener",
    "check_poll_interval",
    "notify_on_room",
]


class _ShutdownCommand:
    """The sentinel put into every queue on shutdown (the original's ``shutdownCommand``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SHUTDOWN_COMMAND"


SHUTDOWN_COMMAND: Final = _ShutdownCommand()


class RoomListener(Protocol):
    """What is told that a queue has room again (an ``anyio.Event``, an ``asyncio.Event``)."""

    def set(self) -> None: ...


class PollingReader(Protocol):
    """The reader of a queue, as poll liveness (``max.poll.interval.ms``) sees it: a stream.

    Attributes:
        name: the stream's label (``"payments-0"``), for log lines.
    """

    name: str

    def held_since(self) -> float | None:
        """Monotonic seconds of the reader's last ask for records, while it is not waiting
        for records; ``None`` while it waits (it is polling) or before its first ask."""
        ...

    def wake_on_poll(self, listener: RoomListener | None) -> None:
        """``listener.set()`` whenever the reader starts waiting for records (``None``: stop)."""
        ...


class ChunkQueue(asyncio.Queue[FetchedDataChunk | _ShutdownCommand]):
    """A queue of fetched chunks bounded in chunks (``queued.max.message.chunks``), in bytes
    (``queued.max.messages.kbytes``) or both, with room accounting.

    A slot is room for one fetched chunk of up to ``slot_bytes`` (``fetch.message.max.bytes``):
    a fetch reserves slots and its response is capped at them. Under a byte budget a queued
    chunk counts its actual bytes, so partitions with little data each do not use a whole
    slot, and ``put`` never waits (the fetch plan keeps the bytes within the budget).

    Args:
        maxsize: the capacity in chunks (0: no chunk bound).
        max_bytes: the budget in bytes of fetched data queued and in flight (``None``: no
            byte bound).
        slot_bytes: the most bytes one chunk may hold, > 0 (only read with ``max_bytes``).

    Attributes:
        reserved: slots held by fetches in flight (their chunks will come).
        waiting: chunks waiting in ``put`` for room.
        queued_bytes: bytes of record data in the queued chunks.
        reader: the stream that reads this queue (set by the stream), ``None`` before.
    """

    def __init__(
        self, maxsize: int = 0, *, max_bytes: int | None = None, slot_bytes: int = 1
    ) -> None:
        super().__init__(maxsize)
        self.max_bytes = max_bytes
        self.slot_bytes = max(1, slot_bytes)
        self.reserved = 0
        self.waiting = 0
        self.queued_bytes = 0
        self._room_listeners: set[RoomListener] = set()
        self.reader: PollingReader | None = None

    def free_slots(self) -> int:
        """Chunks a fetch may still bring (may be negative while over-committed).

        Under a chunk bound: the capacity plus one waiting for room, less the chunks queued,
        waiting and reserved. Under a byte budget: the budget less the bytes queued and a
        whole slot per chunk waiting or reserved, in whole slots; at least one while nothing
        is queued, waiting or reserved, so a budget below one slot still makes progress.
        Under both, the smaller.
        """
        free = self.maxsize + 1 - self.qsize() - self.waiting - self.reserved
        if self.max_bytes is not None:
            if not self.maxsize:
                free = 1 << 30  # no chunk bound: the bytes alone
            slot = self.slot_bytes
            used = self.queued_bytes + (self.waiting + self.reserved) * slot
            by_bytes = (self.max_bytes - used) // slot
            if used == 0 and self.empty():
                by_bytes = max(by_bytes, 1)
            free = min(free, by_bytes)
        return free

    def put_nowait(self, item: FetchedDataChunk | _ShutdownCommand) -> None:
        """As ``asyncio.Queue.put_nowait`` (``put`` calls it too), counting the chunk's bytes.

        Raises:
            asyncio.QueueFull: the queue holds ``maxsize`` chunks.
        """
        super().put_nowait(item)
        if isinstance(item, FetchedDataChunk):
            self.queued_bytes += item.size

    def release(self, slots: int) -> bool:
        """Give back ``slots`` a fetch reserved (its chunks came, or it failed or was
        cancelled), telling the room listeners: another fetch loop may be waiting for room a
        reservation held. Returns whether anyone was told."""
        self.reserved = max(0, self.reserved - slots)
        for listener in tuple(self._room_listeners):
            listener.set()
        return bool(self._room_listeners)

    def get_nowait(self) -> FetchedDataChunk | _ShutdownCommand:
        """As ``asyncio.Queue.get_nowait`` (``get`` calls it too), telling the room listeners.

        Raises:
            asyncio.QueueEmpty: the queue is empty.
        """
        item = super().get_nowait()
        if isinstance(item, FetchedDataChunk):
            self.queued_bytes = max(0, self.queued_bytes - item.size)
        for listener in tuple(self._room_listeners):
            listener.set()
        return item

    @contextlib.contextmanager
    def notify_on_room(self, listener: RoomListener) -> Iterator[None]:
        """``listener.set()`` each time a reader takes a chunk, while inside."""
        self._room_listeners.add(listener)
        try:
            yield
        finally:
            self._room_listeners.discard(listener)

    @property
    def room_listeners(self) -> int:
        """How many listeners wait for room (for tests and reprs)."""
        return len(self._room_listeners)

    def __repr__(self) -> str:
        budget = "" if self.max_bytes is None else f" bytes={self.queued_bytes}/{self.max_bytes}"
        return (
            f"<ChunkQueue {self.qsize()}/{self.maxsize or '-'}{budget} waiting={self.waiting} "
            f"reserved={self.reserved}>"
        )


@contextlib.contextmanager
def notify_on_room(queues: Iterable[ChunkQueue], listener: RoomListener) -> Iterator[None]:
    """``listener.set()`` when a reader takes a chunk from any of ``queues``, while inside."""
    with contextlib.ExitStack() as stack:
        for queue in queues:
            stack.enter_context(queue.notify_on_room(listener))
        yield


@dataclass(frozen=True)
class PollCheck:
    """What :func:`check_poll_interval` found.

    Attributes:
        expired: the readers (stream names, sorted) that hold what they were handed for
            ``max.poll.interval.ms`` or longer.
        longest_s: the longest hold now, seconds (0.0 when no reader holds anything).
        next_check_s: seconds until the earliest moment another reader can expire (the
            interval when none holds anything; 0.0 when one has expired).
    """

    expired: tuple[str, ...]
    longest_s: float
    next_check_s: float


def check_poll_interval(
    holds: Mapping[str, float | None], now: float, interval_s: float
) -> PollCheck:
    """Which readers exceeded ``max.poll.interval.ms`` (poll liveness), and when to look again.

    A reader holds what it was handed from its last ask for records until its next one; one
    waiting for records is polling (as a Java consumer blocked inside ``poll()``) and holds
    nothing. The rule is the Java client's poll timer (``Heartbeat.pollTimeoutExpired``,
    ``AbstractHeartbeatRequestManager.poll``: expired once the time since the last ``poll()``
    reaches ``max.poll.interval.ms``), per stream: each stream's reader is a poll loop.

    Args:
        holds: ``{stream name: monotonic seconds since which it holds, or None}``.
        now: monotonic seconds.
        interval_s: ``max.poll.interval.ms`` in seconds, > 0.

    Returns:
        A :class:`PollCheck`.
    """
    expired: list[str] = []
    longest = 0.0
    next_check = interval_s
    for name, since in holds.items():
        if since is None:
            continue
        held = now - since
        longest = max(longest, held)
        if held >= interval_s:
            expired.append(name)
        else:
            next_check = min(next_check, interval_s - held)
    if expired:
        next_check = 0.0
    return PollCheck(tuple(sorted(expired)), longest, max(next_check, 0.0))
