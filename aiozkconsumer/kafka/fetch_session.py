"""Fetch sessions (KIP-227): which partitions each FetchRequest to one broker carries.

A port of the Java client's ``org.apache.kafka.clients.FetchSessionHandler`` (with
``org.apache.kafka.common.requests.FetchMetadata``), Kafka 3.9. Pure: it takes the partitions a
fetch loop wants and returns what to put in the request; it takes what the response said and
decides the next request's session id and epoch. ``kafka/client.py``'s ``FetchChannel`` does the
I/O. The rules:

- The first request is *full*: every partition, session id 0, epoch 0 (``INITIAL``). A broker
  with room in its session cache answers with a new session id; later requests are
  *incremental* (that id, epoch 1, 2, ... wrapping to 1 after 2**31 - 1): they carry only the
  partitions added since or whose request data changed (fetch offset, leader epoch, max
  bytes...), and ``ForgottenTopicsData`` for the partitions dropped; the broker keeps the rest
  ("implied" partitions) at their last request data, and answers only the partitions with
  something new (records, high watermark, log start offset, an error).
- A response with a top-level error: ``FETCH_SESSION_ID_NOT_FOUND`` (the broker lost the
  session: restarted, or evicted it) starts over with a full request and a new session;
  any other (``INVALID_FETCH_SESSION_EPOCH``, ``FETCH_SESSION_TOPIC_ID_ERROR`` ...) sends a
  full request that closes the old session and opens a new one.
- A failed request (connection lost, timeout) does the same: its fate on the broker is
  unknown, so the next request is full.
- A full response must name every partition of the request, an incremental one only
  partitions of the session (and, v13+, only topic ids of the session); otherwise the
  response is not used and the next request is full.
- A session id of 0 in a full response: the broker made no session (its cache is full):
  every request stays full. In an incremental response: the broker closed the session (it
  became empty).

One rule of our own: a request that would forget every partition of the session and add
others (a reassignment: the fetch loop's partitions all replaced) is sent as a full request
opening a new session — the broker ends up with the same partitions, and the full request is
the smaller one (no forgotten list). Partitions leaving and coming back a few at a time (a
stream queue full, then drained) stay incremental, as in the Java client.

A handler belongs to one fetch loop's channel to one broker, one request in flight at a time
(``AbstractFetch`` keeps at most one pending fetch per node for the same reason).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .fetch_request import ZERO_UUID, FetchPartition

__all__ = [
    "FETCH_SESSION_ID_NOT_FOUND",
    "FETCH_SESSION_TOPIC_ID_ERROR",
    "FINAL_EPOCH",
    "INITIAL",
    "INITIAL_EPOCH",
    "INVALID_FETCH_SESSION_EPOCH",
    "INVALID_SESSION_ID",
    "LEGACY",
    "SESSION_ERRORS",
    "FetchMetadata",
    "FetchRequestData",
    "FetchSessionHandler",
    "FetchSessionStatistics",
    "next_epoch",
]

log = logging.getLogger(__name__)

INVALID_SESSION_ID = 0
"""The session id of a client without a session (``FetchMetadata.INVALID_SESSION_ID``)."""
INITIAL_EPOCH = 0
"""The epoch of a request that creates (or re-creates) a session."""
FINAL_EPOCH = -1
"""The epoch of a request that closes any session and opens none (also a sessionless one)."""

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106
SESSION_ERRORS = frozenset(
    (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR)
)
"""The top-level FetchResponse errors about the session itself (Kafka's ``Errors``)."""

_INT32_MAX = 0x7FFFFFFF

Key = tuple[str, int]
"""``(topic, partition)``."""
Forgotten = tuple[str, int, bytes]
"""``(topic, partition, topic id)`` of a partition to forget."""


def next_epoch(prev: int) -> int:
    """The epoch after ``prev`` (``FetchMetadata.nextEpoch``): FINAL stays FINAL; after
    2**31 - 1 comes 1 (0 would mean "create a session")."""
    if prev < 0:
        return FINAL_EPOCH
    if prev == _INT32_MAX:
        return 1
    return prev + 1


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    """A request's session id and epoch (``org.apache.kafka.common.requests.FetchMetadata``).

    Attributes:
        session_id: the session (:data:`INVALID_SESSION_ID` none).
        epoch: :data:`INITIAL_EPOCH` (full, create a session), :data:`FINAL_EPOCH` (full,
            no session), or the incremental request's number in the session.
    """

    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        """Whether a request with this metadata is full (carries every partition)."""
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def next_close_existing(self) -> FetchMetadata:
        """Close the session and open none (``nextCloseExisting``)."""
        return FetchMetadata(self.session_id, FINAL_EPOCH)

    def next_close_existing_attempt_new(self) -> FetchMetadata:
        """Close the session and try to open a new one (``nextCloseExistingAttemptNew``)."""
        return FetchMetadata(self.session_id, INITIAL_EPOCH)

    def next_incremental(self) -> FetchMetadata:
        """The next incremental request of the session (``nextIncremental``)."""
        return FetchMetadata(self.session_id, next_epoch(self.epoch))

    @staticmethod
    def new_incremental(session_id: int) -> FetchMetadata:
        """The first incremental request of a new session (``newIncremental``)."""
        return FetchMetadata(session_id, next_epoch(INITIAL_EPOCH))

    def __str__(self) -> str:
        sid = "INVALID" if self.session_id == INVALID_SESSION_ID else str(self.session_id)
        epoch = {INITIAL_EPOCH: "INITIAL", FINAL_EPOCH: "FINAL"}.get(self.epoch, str(self.epoch))
        return f"(sessionId={sid}, epoch={epoch})"


INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
"""A new handler's first request: full, asking for a session."""
LEGACY = FetchMetadata(INVALID_SESSION_ID, FINAL_EPOCH)
"""A sessionless full request (what FetchRequest v7-v11 from aiokafka carry)."""


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    """What one FetchRequest carries (``FetchSessionHandler.FetchRequestData``).

    Attributes:
        to_send: the partitions of the request's topics, in order: every partition when
            full; when incremental, the added and the altered or replaced ones, in the order
            wanted.
        topic_ids: topic -> id (:data:`~.fetch_request.ZERO_UUID` unknown) of every topic
            wanted.
        to_forget: partitions dropped from the session (``ForgottenTopicsData``).
        to_replace: partitions whose topic was re-created with a new id: sent again, and
            forgotten under the old id from v13 on (``toReplace``).
        metadata: the request's session id and epoch.
        can_use_topic_ids: every partition's topic id is known: the request may be v13+;
            else it must be v12 (``AbstractFetch.createFetchRequest``).
        session_size: partitions in the session once the broker applies the request.
    """

    to_send: list[FetchPartition]
    topic_ids: Mapping[str, bytes]
    to_forget: list[Forgotten]
    to_replace: list[Forgotten]
    metadata: FetchMetadata
    can_use_topic_ids: bool
    session_size: int

    @property
    def is_full(self) -> bool:
        """Whether the request is full."""
        return self.metadata.is_full

    def forgotten(self, version: int) -> list[Forgotten]:
        """``ForgottenTopicsData`` at ``version``: replaced partitions only from v13 on (by
        name, forgetting them would drop the newly added one: ``FetchRequest.Builder``)."""
        return self.to_forget + self.to_replace if version >= 13 else list(self.to_forget)


@dataclass(frozen=True, slots=True)
class FetchSessionStatistics:
    """A snapshot of a handler's counters.

    Attributes:
        session_id: the session the next request uses (0 none).
        epoch: the next request's epoch.
        partitions: partitions in the session.
        full_requests: full requests built.
        incremental_requests: incremental requests built.
        sessions_opened: full responses that opened a session.
        session_errors: responses with a top-level error, or not usable.
        send_failures: requests that got no answer (:meth:`~FetchSessionHandler.handle_error`).
    """

    session_id: int
    epoch: int
    partitions: int
    full_requests: int
    incremental_requests: int
    sessions_opened: int
    session_errors: int
    send_failures: int


class FetchSessionHandler:
    """The fetch session state of one fetch loop with one broker (``FetchSessionHandler``).

    Call :meth:`build` with the partitions to fetch, send the request it describes, then
    :meth:`handle_response` with what came back (or :meth:`handle_error` if nothing did).

    The Java handler keeps a topic id per partition; here a topic's partitions share its id
    (as they do on the broker), and the comparison of a request with the session is done on
    whole dictionaries first, so a fetch of 2,000 unchanged partitions costs two dictionary
    builds and one comparison.

    Args:
        node_id: the broker (for log messages).
    """

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self._next = INITIAL
        self._session: dict[Key, FetchPartition] = {}
        self._ids: dict[str, bytes] = {}  # topic -> the id its partitions were sent with
        self._names: dict[bytes, str] = {}
        self._built_from: tuple[FetchPartition, ...] | None = None
        """The tuple of partitions the session was last built from (a tuple cannot change)."""
        self._full = self._incremental = self._opened = self._errors = self._failures = 0

    @property
    def next_metadata(self) -> FetchMetadata:
        """The session id and epoch of the next request."""
        return self._next

    @property
    def session_id(self) -> int:
        """The session id of the next request (0 none)."""
        return self._next.session_id

    @property
    def session_partitions(self) -> Mapping[Key, FetchPartition]:
        """The partitions of the session, a read-only view (``sessionPartitions``)."""
        return MappingProxyType(self._session)

    @property
    def session_topic_names(self) -> Mapping[bytes, str]:
        """Topic id -> name of the session's topics when it uses ids, else empty
        (``sessionTopicNames``): what names the topics of a v13+ response."""
        return MappingProxyType(self._names)

    def statistics(self) -> FetchSessionStatistics:
        """A snapshot of the counters."""
        return FetchSessionStatistics(
            session_id=self._next.session_id,
            epoch=self._next.epoch,
            partitions=len(self._session),
            full_requests=self._full,
            incremental_requests=self._incremental,
            sessions_opened=self._opened,
            session_errors=self._errors,
            send_failures=self._failures,
        )

    def build(
        self, partitions: Iterable[FetchPartition], topic_ids: Mapping[str, bytes] | None = None
    ) -> FetchRequestData:
        """Decide what the next request carries (``Builder.add`` for each, then ``build``).

        Args:
            partitions: every partition to fetch, in the order wanted (a full request keeps
                it: the broker fills the response in that order); one per ``(topic,
                partition)`` (a later one replaces an earlier).
            topic_ids: topic -> id; a topic missing (or :data:`~.fetch_request.ZERO_UUID`)
                has none known, and the request must name topics (v12).

        Returns:
            The request's partitions, forgotten partitions and session metadata. The
            handler's session is updated as if the broker applied the request; the request
            must be sent, and its outcome given to :meth:`handle_response` or
            :meth:`handle_error`, before the next ``build``.
        """
        known = topic_ids or {}
        if (
            partitions is self._built_from
            and not self._next.is_full
            and all(known.get(t, ZERO_UUID) == i for t, i in self._ids.items())
        ):
            # The very tuple the session was last built from (an idle fetch loop asks again):
            # the session holds exactly these partitions, so nothing is sent or forgotten.
            self._incremental += 1
            ids = dict(self._ids)
            can_use = ZERO_UUID not in ids.values()
            return FetchRequestData([], ids, [], [], self._next, can_use, len(self._session))
        self._built_from = partitions if isinstance(partitions, tuple) else None
        nxt = {p[:2]: p for p in partitions}
        ids = {key[0]: known.get(key[0], ZERO_UUID) for key in nxt}
        can_use_ids = ZERO_UUID not in ids.values()
        if not self._next.is_full:
            incremental = self._incremental_request(nxt, ids, can_use_ids)
            if incremental is not None:
                self._incremental += 1
                return incremental
        before = len(self._session)
        self._session = nxt
        self._ids = ids
        self._names = {i: t for t, i in ids.items()} if can_use_ids else {}
        self._full += 1
        log.debug(
            "built a full fetch %s for broker %s with %d partition(s) (%d before)",
            self._next,
            self.node_id,
            len(nxt),
            before,
        )
        return FetchRequestData(list(nxt.values()), ids, [], [], self._next, can_use_ids, len(nxt))

    def _incremental_request(
        self, nxt: dict[Key, FetchPartition], ids: dict[str, bytes], can_use_ids: bool
    ) -> FetchRequestData | None:
        """``Builder.build``'s incremental branch, or ``None`` for a reassignment (every
        partition of the session forgotten, others wanted: sent as a full request instead)."""
        session, old_ids = self._session, self._ids
        if nxt == session and ids == old_ids:
            return FetchRequestData([], ids, [], [], self._next, can_use_ids, len(session))
        # Partitions added or whose request data changed, in the order wanted.
        get = session.get
        send = [key for key, p in nxt.items() if get(key) != p]
        added = sum(1 for key in send if key not in session)
        n_removed = len(session) - (len(nxt) - added)
        removed = [key for key in session if key not in nxt] if n_removed else []
        replaced: list[Forgotten] = []
        if ids != old_ids:
            # A topic whose id changed: its partitions are sent again; when both ids are
            # known the topic was re-created, and the old partitions are forgotten by id.
            again = set(send)
            for topic, new_id in ids.items():
                old_id = old_ids.get(topic)
                if old_id is None or old_id == new_id:
                    continue
                for key in nxt:
                    if key[0] == topic and key in session:
                        again.add(key)
                        if old_id != ZERO_UUID and new_id != ZERO_UUID:
                            replaced.append((topic, key[1], old_id))
            send = [key for key in nxt if key in again]
        if can_use_ids and any(old_ids.get(key[0]) == ZERO_UUID for key in removed):
            can_use_ids = False
        altered = sum(1 for key in send if key in session)
        if nxt and len(removed) == len(session):
            log.debug(
                "fetch session %s with broker %s: all %d partition(s) replaced by %d others: "
                "a full request opens a new session",
                self._next,
                self.node_id,
                len(removed),
                len(nxt),
            )
            self._next = self._next.next_close_existing_attempt_new()
            return None
        to_forget = [(key[0], key[1], old_ids.get(key[0], ZERO_UUID)) for key in removed]
        for key in removed:
            del session[key]
        to_send = [nxt[key] for key in send]
        for p in to_send:
            session[p[:2]] = p  # an altered one keeps its place, an added one goes last
        self._ids = ids
        self._names = {i: t for t, i in ids.items()} if can_use_ids else {}
        log.debug(
            "built an incremental fetch %s for broker %s: added %d, altered %d, removed %d, "
            "replaced %d out of %d",
            self._next,
            self.node_id,
            len(send) - altered,
            altered - len(replaced),
            len(removed),
            len(replaced),
            len(session),
        )
        return FetchRequestData(
            to_send, ids, to_forget, replaced, self._next, can_use_ids, len(session)
        )

    def handle_response(
        self,
        *,
        error_code: int,
        session_id: int,
        partitions: Collection[Key],
        topic_ids: Collection[bytes] = (),
        throttle_time_ms: int = 0,
        version: int,
    ) -> bool:
        """Take the response to the last built request (``handleResponse``).

        Args:
            error_code: the response's top-level error code.
            session_id: the response's session id.
            partitions: ``(topic, partition)`` of every partition in the response (topics
                named from :attr:`session_topic_names` at v13+).
            topic_ids: v13+: every (non-zero) topic id in the response, named or not.
            throttle_time_ms: the response's throttle time (KIP-219: a throttled full
                request may be answered with no partitions).
            version: the request's API version.

        Returns:
            Whether the response is usable. When not, its partitions must be ignored (their
            fetch offsets are not those the broker answered for, or the session is gone) and
            the next request is full.
        """
        if error_code != 0:
            self._errors += 1
            log.info(
                "broker %s could not process the fetch request with %s: error %d",
                self.node_id,
                self._next,
                error_code,
            )
            if error_code == FETCH_SESSION_ID_NOT_FOUND:
                self._next = INITIAL
            else:
                self._next = self._next.next_close_existing_attempt_new()
            return False
        session = self._session
        if self._next.is_full:
            if not partitions and throttle_time_ms > 0:
                # KIP-219: an empty full response telling the client to back off.
                log.debug(
                    "broker %s sent an empty full fetch response: throttled for %d ms",
                    self.node_id,
                    throttle_time_ms,
                )
                self._next = INITIAL
                return False
            problem = self._verify(partitions, topic_ids, version, full=True)
            if problem is not None:
                self._errors += 1
                log.info(
                    "broker %s sent an invalid full fetch response with %s", self.node_id, problem
                )
                self._next = INITIAL
                return False
            if session_id == INVALID_SESSION_ID:
                log.debug("broker %s sent a full fetch response (no session)", self.node_id)
                self._next = INITIAL
            else:
                log.debug(
                    "broker %s sent a full fetch response that created fetch session %d with "
                    "%d partition(s)",
                    self.node_id,
                    session_id,
                    len(session),
                )
                self._opened += 1
                self._next = FetchMetadata.new_incremental(session_id)
            return True
        problem = self._verify(partitions, topic_ids, version, full=False)
        if problem is not None:
            self._errors += 1
            log.info(
                "broker %s sent an invalid incremental fetch response with %s",
                self.node_id,
                problem,
            )
            self._next = self._next.next_close_existing_attempt_new()
            return False
        if session_id == INVALID_SESSION_ID:
            log.debug(
                "broker %s sent an incremental fetch response closing session %d",
                self.node_id,
                self._next.session_id,
            )
            self._next = INITIAL
        else:
            self._next = self._next.next_incremental()
        return True

    def _verify(
        self, partitions: Collection[Key], topic_ids: Collection[bytes], version: int, *, full: bool
    ) -> str | None:
        """``verifyFullFetchResponsePartitions`` / ``verifyIncrementalFetchResponsePartitions``."""
        session = self._session
        extra = [k for k in partitions if k not in session]
        omitted: list[Key] = []
        if full and len(partitions) - len(extra) != len(session):
            got = set(partitions)
            omitted = [k for k in session if k not in got]
        extra_ids = [i for i in topic_ids if i not in self._names] if version >= 13 else []
        if not (extra or omitted or extra_ids):
            return None
        parts = []
        if omitted:
            parts.append(f"omittedPartitions=({_keys(omitted)})")
        if extra:
            parts.append(f"extraPartitions=({_keys(extra)})")
        if extra_ids:
            parts.append(f"extraIds=({', '.join(i.hex() for i in extra_ids)})")
        return ", ".join(parts)

    def handle_error(self) -> None:
        """The request failed before an answer came (``handleError``): the next request
        closes the session and asks for a new one."""
        self._failures += 1
        self._next = self._next.next_close_existing_attempt_new()

    def notify_close(self) -> None:
        """The next request closes the session and opens none (``notifyClose``): build it
        with no partitions to close the session on the broker."""
        self._next = self._next.next_close_existing()

    def __repr__(self) -> str:
        return (
            f"<FetchSessionHandler broker {self.node_id} [{self._next}, "
            f"{len(self._session)} partitions]>"
        )


def _keys(keys: Iterable[Key]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in keys)
