"""Fetch from the closest replica (KIP-392): which broker each partition is fetched from.

A consumer that sends its ``client.rack`` in FetchRequest v11+ may be told by a partition's
leader to fetch from another replica (the broker's ``replica.selector.class``, e.g. Kafka's
``RackAwareReplicaSelector``: a replica in the consumer's rack): the leader answers the
partition with no records and a ``PreferredReadReplica``. The Java client follows it, and
these are its rules (``SubscriptionState.preferredReadReplica`` /
``updatePreferredReadReplica`` / ``clearPreferredReadReplica``,
``AbstractFetch.selectReadReplica`` and ``handleFetchFailure``, ``FetchCollector.initialize``
and ``handleInitializeErrors``, ``FetchUtils.requestMetadataUpdate``; kafka-clients 3.9):

- A preferred read replica named in a response is kept until ``metadata.max.age.ms`` after it
  was first named (naming the same replica again does not extend it); then the partition is
  fetched from its leader again, which names a replica anew.
- It is used only while it is online in the metadata: a broker the metadata knows, among the
  partition's replicas (``Cluster.nodeIfOnline``); otherwise it is forgotten, the partition
  goes back to the leader and the metadata is refreshed (it may be stale).
- ``OFFSET_OUT_OF_RANGE`` from a preferred replica (a follower that is behind, or ahead of a
  leader that truncated) is not a reason to reset the position: the replica is forgotten and
  the same position is fetched from the leader, which decides.
- ``NOT_LEADER_OR_FOLLOWER``, ``REPLICA_NOT_AVAILABLE``, ``KAFKA_STORAGE_ERROR``,
  ``FENCED_LEADER_EPOCH``, ``OFFSET_NOT_AVAILABLE``, ``UNKNOWN_TOPIC_OR_PARTITION``,
  ``UNKNOWN_TOPIC_ID`` and ``INCONSISTENT_TOPIC_ID`` forget the replica and refresh the
  metadata (then the leader). Other errors keep it (``UNKNOWN_LEADER_EPOCH``: a follower not
  yet at the new epoch, asked again).
- A fetch request that failed as a whole (the broker unreachable, a timeout) forgets the
  replicas of every partition it was for.

Pure: :class:`ReadReplicas` holds the state and decides; the fetch loops (``fetcher.py``) move
partitions between the loops of their brokers as told. Times are the caller's monotonic
clock, in milliseconds.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "CLEARING_ERRORS",
    "DEFAULT_EXPIRY_MS",
    "NO_REPLICA",
    "OFFSET_OUT_OF_RANGE",
    "ErrorRoute",
    "PreferredReplica",
    "ReadReplicaStatistics",
    "ReadReplicas",
    "Selection",
]

K = TypeVar("K", bound=Hashable)

NO_REPLICA = -1
"""``PreferredReadReplica`` when the broker names none (``INVALID_PREFERRED_REPLICA_ID``)."""
DEFAULT_EXPIRY_MS = 300_000
"""How long a preferred read replica is followed: the Java client's ``metadata.max.age.ms``
default (5 minutes), also aiokafka's."""

OFFSET_OUT_OF_RANGE = 1
CLEARING_ERRORS = frozenset(
    (
        3,  # UNKNOWN_TOPIC_OR_PARTITION
        6,  # NOT_LEADER_OR_FOLLOWER
        9,  # REPLICA_NOT_AVAILABLE
        56,  # KAFKA_STORAGE_ERROR
        74,  # FENCED_LEADER_EPOCH
        78,  # OFFSET_NOT_AVAILABLE
        100,  # UNKNOWN_TOPIC_ID
        103,  # INCONSISTENT_TOPIC_ID
    )
)
"""The partition errors after which the Java client forgets the preferred read replica and
refreshes its metadata (``FetchUtils.requestMetadataUpdate`` from
``FetchCollector.handleInitializeErrors``)."""


@dataclass(frozen=True, slots=True)
class PreferredReplica:
    """A partition's preferred read replica.

    Attributes:
        node_id: the broker to fetch from.
        expires_at_ms: when it stops being followed (monotonic clock, ms).
    """

    node_id: int
    expires_at_ms: float


@dataclass(frozen=True, slots=True)
class Selection:
    """Where to fetch a partition from (:meth:`ReadReplicas.select`).

    Attributes:
        node_id: the broker: the preferred read replica, or the leader.
        refresh_metadata: the preferred replica was not online in the metadata and was
            forgotten: refresh the metadata (it may be stale).
    """

    node_id: int
    refresh_metadata: bool = False


class ErrorRoute(enum.Enum):
    """What a partition error in a fetch response asks for (:meth:`ReadReplicas.on_error`)."""

    RESET = "reset"
    """``OFFSET_OUT_OF_RANGE`` from the leader: reset the position (``auto.offset.reset``)."""
    LEADER = "leader"
    """``OFFSET_OUT_OF_RANGE`` from another replica: fetch the same position from the leader,
    without refreshing the metadata; the replica is forgotten."""
    REFRESH = "refresh"
    """Any other error: refresh the metadata, then fetch from the leader, or from the
    preferred replica if the error kept it."""


@dataclass(frozen=True, slots=True)
class ReadReplicaStatistics:
    """A snapshot of :class:`ReadReplicas`' counters.

    Attributes:
        preferred: partitions with a preferred read replica now (expired ones included
            until next asked).
        named: times a response named a preferred replica new for its partition.
        expired: preferred replicas dropped at ``metadata.max.age.ms``.
        offline: preferred replicas dropped because they were not online in the metadata.
        out_of_range: ``OFFSET_OUT_OF_RANGE`` answers from a preferred replica (fetched from
            the leader again, the position kept).
        errors: preferred replicas dropped after another error, or a failed request.
    """

    preferred: int
    named: int
    expired: int
    offline: int
    out_of_range: int
    errors: int


class ReadReplicas(Generic[K]):
    """The preferred read replica of each partition (``SubscriptionState``'s part of it).

    Args:
        expiry_ms: how long a newly named replica is followed, ms: ``metadata.max.age.ms``
            (default :data:`DEFAULT_EXPIRY_MS`), > 0.

    Raises:
        ValueError: ``expiry_ms`` is not positive.
    """

    def __init__(self, expiry_ms: float = DEFAULT_EXPIRY_MS) -> None:
        if expiry_ms <= 0:
            raise ValueError(f"expiry_ms must be positive, got {expiry_ms}")
        self.expiry_ms = expiry_ms
        self._replicas: dict[K, PreferredReplica] = {}
        self._named = self._expired = self._offline = self._out_of_range = self._errors = 0

    def __len__(self) -> int:
        return len(self._replicas)

    def __contains__(self, key: object) -> bool:
        return key in self._replicas

    def preferred(self, key: K, now_ms: float) -> int | None:
        """The partition's preferred read replica, or ``None`` (none, or expired: then
        dropped), as ``TopicPartitionState.preferredReadReplica``: expired once ``now_ms``
        is past its expiry."""
        replica = self._replicas.get(key)
        if replica is None:
            return None
        if now_ms > replica.expires_at_ms:
            del self._replicas[key]
            self._expired += 1
            return None
        return replica.node_id

    def update(self, key: K, node_id: int, now_ms: float) -> bool:
        """Take the ``PreferredReadReplica`` a response named for the partition.

        As ``updatePreferredReadReplica``: a replica other than the one kept (or none kept)
        is followed for ``expiry_ms`` from now; the same one named again keeps its expiry,
        so the partition still goes back to its leader in time. ``NO_REPLICA`` (-1) is not
        a replica: nothing changes.

        Returns:
            Whether the partition's preferred replica changed.
        """
        if node_id < 0:
            return False
        kept = self._replicas.get(key)
        if kept is not None and kept.node_id == node_id and now_ms <= kept.expires_at_ms:
            return False
        if kept is not None and now_ms > kept.expires_at_ms:
            self._expired += 1
        self._replicas[key] = PreferredReplica(node_id, now_ms + self.expiry_ms)
        self._named += 1
        return True

    def expires_at_ms(self, key: K) -> float | None:
        """When the partition's preferred replica stops being followed (``None``: none)."""
        replica = self._replicas.get(key)
        return None if replica is None else replica.expires_at_ms

    def retain(self, keys: Iterable[K]) -> None:
        """Forget the preferred replicas of every partition but ``keys`` (those owned)."""
        keep = set(keys)
        for key in [k for k in self._replicas if k not in keep]:
            del self._replicas[key]

    def clear(self, key: K) -> int | None:
        """Forget the partition's preferred replica (``clearPreferredReadReplica``).

        Returns:
            The replica forgotten, or ``None`` if none was kept.
        """
        replica = self._replicas.pop(key, None)
        return None if replica is None else replica.node_id

    def select(
        self, key: K, leader: int, now_ms: float, online: Callable[[int], bool]
    ) -> Selection:
        """Where to fetch the partition from now (``AbstractFetch.selectReadReplica``).

        Args:
            key: the partition.
            leader: its leader's broker id.
            now_ms: the monotonic clock, ms.
            online: whether a broker is online for this partition in the metadata (known,
                and one of the partition's replicas: ``Cluster.nodeIfOnline``).

        Returns:
            The preferred read replica while it is kept, unexpired and online; else the
            leader, with ``refresh_metadata`` set if a kept replica was dropped for not
            being online.
        """
        node = self.preferred(key, now_ms)
        if node is None or node == leader:
            return Selection(leader)
        if online(node):
            return Selection(node)
        del self._replicas[key]
        self._offline += 1
        return Selection(leader, refresh_metadata=True)

    def on_error(self, key: K, error_code: int, *, from_leader: bool) -> ErrorRoute:
        """Apply a partition error of a fetch response (``handleInitializeErrors``).

        Args:
            key: the partition.
            error_code: its error code (not 0).
            from_leader: whether the response came from the partition's leader (else from
                its preferred read replica).

        Returns:
            What to do with the partition (:class:`ErrorRoute`); the replica is forgotten
            for ``LEADER`` and for the errors of :data:`CLEARING_ERRORS`.
        """
        if error_code == OFFSET_OUT_OF_RANGE:
            # The Java client resets only when there was no preferred replica to clear: here,
            # whether the answer came from a replica other than the leader (one followed until
            # it expired just now answers the same).
            cleared = self.clear(key)
            if from_leader:
                return ErrorRoute.RESET
            if cleared is not None:
                self._out_of_range += 1
            return ErrorRoute.LEADER
        if error_code in CLEARING_ERRORS and self.clear(key) is not None:
            self._errors += 1
        return ErrorRoute.REFRESH

    def on_failure(self, keys: Iterable[K]) -> list[K]:
        """A fetch request failed as a whole: forget the preferred replicas of its
        partitions (``AbstractFetch.handleFetchFailure``).

        Returns:
            The partitions whose replica was forgotten.
        """
        dropped = [k for k in keys if self._replicas.pop(k, None) is not None]
        self._errors += len(dropped)
        return dropped

    def statistics(self) -> ReadReplicaStatistics:
        """A snapshot of the counters."""
        return ReadReplicaStatistics(
            preferred=len(self._replicas),
            named=self._named,
            expired=self._expired,
            offline=self._offline,
            out_of_range=self._out_of_range,
            errors=self._errors,
        )

    def __repr__(self) -> str:
        return f"<ReadReplicas [{len(self._replicas)} preferred, expiry {self.expiry_ms} ms]>"
