"""A stream's queue of fetched chunks, and the room bookkeeping the fetchers need.

The original's ``LinkedBlockingQueue[FetchedDataChunk]`` of ``queued.max.message.chunks``
chunks between the fetcher threads and a stream's ``ConsumerIterator``. Here an
``asyncio.Queue`` that also says how much room is left for a fetch to fill, counting the
chunks fetches in flight will bring (``reserved``) and those already waiting for room
(``waiting``), and notifies listeners when a reader frees room, without any private asyncio
attribute. A queue also knows the reader that takes from it (:class:`PollingReader`), so a
Kafka-coordinated member can tell how long that reader has held what it was handed
(``max.poll.interval.ms``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator
from typing import Final, Protocol

from .records import FetchedDataChunk

__all__ = ["SHUTDOWN_COMMAND", "ChunkQueue", "PollingReader", "RoomListener", "notify_on_room"]


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
    """A bounded queue of fetched chunks (``queued.max.message.chunks``) with room accounting.

    Args:
        maxsize: the capacity in chunks (0: unbounded).

    Attributes:
        reserved: slots held by fetches in flight (their chunks will come).
        waiting: chunks waiting in ``put`` for room.
        reader: the stream that reads this queue (set by the stream), ``None`` before.
    """

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__(maxsize)
        self.reserved = 0
        self.waiting = 0
        self._room_listeners: set[RoomListener] = set()
        self.reader: PollingReader | None = None

    def free_slots(self) -> int:
        """Chunks a fetch may still bring: the capacity plus one waiting for room, less the
        chunks queued, waiting and reserved (may be negative while over-committed)."""
        return self.maxsize + 1 - self.qsize() - self.waiting - self.reserved

    def get_nowait(self) -> FetchedDataChunk | _ShutdownCommand:
        """As ``asyncio.Queue.get_nowait`` (``get`` calls it too), telling the room listeners.

        Raises:
            asyncio.QueueEmpty: the queue is empty.
        """
        item = super().get_nowait()
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
        return (
            f"<ChunkQueue {self.qsize()}/{self.maxsize} waiting={self.waiting} "
            f"reserved={self.reserved}>"
        )


@contextlib.contextmanager
def notify_on_room(queues: Iterable[ChunkQueue], listener: RoomListener) -> Iterator[None]:
    """``listener.set()`` when a reader takes a chunk from any of ``queues``, while inside."""
    with contextlib.ExitStack() as stack:
        for queue in queues:
            stack.enter_context(queue.notify_on_room(listener))
        yield
