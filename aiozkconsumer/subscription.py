"""What a consumer subscribes to: thread ids, topic filters and topic counts.

Pure rules of the old consumer's ``TopicCount.scala`` and ``TopicFilter.scala`` (Kafka 0.10.2):
a member subscribes either to a fixed ``topic -> stream count`` map (:class:`StaticTopicCount`)
or to every topic a :class:`Whitelist` / :class:`Blacklist` regex allows, with one stream
count shared by all of them (:class:`WildcardTopicCount`). Each stream is one consumer thread,
named by a :class:`ConsumerThreadId`. Reading another member's registration
(:func:`construct_topic_count`) evaluates its wildcard against the *reader's* topic list, as
the original does. Nothing here performs I/O.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from aiozkconsumer.errors import InvalidConfigError
from aiozkconsumer.zk.layout import (
    BLACK_LIST_PATTERN,
    STATIC_PATTERN,
    WHITE_LIST_PATTERN,
    Registration,
    encode_registration,
    json_escape_string,
)

__all__ = [
    "INTERNAL_TOPICS",
    "Blacklist",
    "ConsumerThreadId",
    "InvalidTopicFilterError",
    "StaticTopicCount",
    "TopicCount",
    "TopicFilter",
    "WildcardTopicCount",
    "Whitelist",
    "construct_topic_count",
    "make_consumer_thread_ids_per_topic",
    "normalise_regex",
    "broker_side_regex",
]

INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})
"""Topics ``exclude.internal.topics`` hides from wildcard subscriptions.

Kafka 0.10.2's ``Topic.InternalTopics`` held only ``__consumer_offsets``; the transaction log
``__transaction_state`` (Kafka 0.11+) is internal too on the clusters we run against, so it
is excluded as well.
"""

_THREAD_ID_RE: Final = re.compile(r"(.+)-([0-9]+)", re.DOTALL)


# --------------------------------------------------------------------------------------------
# Thread ids
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=True, slots=True)
class ConsumerThreadId:
    """One consumer thread (stream) of a member: ``<consumer id>-<thread index>``.

    Ordered by :func:`str` lexicographically, as ``ConsumerThreadId.compare`` in
    ``TopicCount.scala`` (0.10.2): ``"c-10" < "c-2"``, and members sort by plain string order.
    The assignors depend on this order, so every member must use it.

    Attributes:
        consumer: the member's ``consumerIdString`` (``<group>_<suffix>``).
        thread_id: the stream index within the topic, ``0 .. nStreams - 1``.
    """

    consumer: str
    thread_id: int

    def __post_init__(self) -> None:
        if isinstance(self.thread_id, bool) or not isinstance(self.thread_id, int):
            raise TypeError(f"thread_id must be an int, not {type(self.thread_id).__name__}")
        if self.thread_id < 0:
            # A negative index would make str() ambiguous ("a--1"), and with it the order.
            raise ValueError(f"thread_id must be >= 0, got {self.thread_id}")
        if not self.consumer:
            raise ValueError("consumer must not be empty")

    def __str__(self) -> str:
        return f"{self.consumer}-{self.thread_id}"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, ConsumerThreadId):
            return NotImplemented
        return str(self) < str(other)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, ConsumerThreadId):
            return NotImplemented
        return str(self) <= str(other)

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, ConsumerThreadId):
            return NotImplemented
        return str(self) > str(other)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, ConsumerThreadId):
            return NotImplemented
        return str(self) >= str(other)

    @classmethod
    def parse(cls, s: str) -> ConsumerThreadId:
        """Parse ``str(thread_id)`` back, splitting on the last ``-``.

        Owner nodes hold this form (``g1_host-1490000000000-1a2b3c4d-0``).

        Args:
            s: the thread id string.

        Returns:
            The thread id.

        Raises:
            ValueError: ``s`` is not ``<non-empty consumer>-<decimal index>``.
        """
        match = _THREAD_ID_RE.fullmatch(s)
        if match is None:
            raise ValueError(f"{s!r} is not a consumer thread id (<consumer>-<index>)")
        return cls(match.group(1), int(match.group(2)))


def make_consumer_thread_ids_per_topic(
    consumer_id: str, topic_count_map: Mapping[str, int]
) -> dict[str, frozenset[ConsumerThreadId]]:
    """Return each topic's thread ids ``consumer_id-0 .. consumer_id-(n-1)``.

    As ``TopicCount.makeConsumerThreadIdsPerTopic`` (0.10.2).

    Args:
        consumer_id: the member's ``consumerIdString``.
        topic_count_map: topic -> number of streams (>= 1).

    Returns:
        Topic -> the member's thread ids for it.

    Raises:
        ValueError: a stream count is not an int >= 1 (the original asserts it).
    """
    result: dict[str, frozenset[ConsumerThreadId]] = {}
    for topic, count in topic_count_map.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"stream count of topic {topic!r} must be an int >= 1, got {count!r}")
        result[topic] = frozenset(ConsumerThreadId(consumer_id, i) for i in range(count))
    return result


# --------------------------------------------------------------------------------------------
# Topic filters
# --------------------------------------------------------------------------------------------


class InvalidTopicFilterError(InvalidConfigError):
    """A whitelist or blacklist is not a valid regular expression.

    As the original's ``RuntimeException("<regex> is an invalid regex.")``; reported under the
    key ``topic.filter``.

    Attributes:
        regex: the normalised regex that failed to compile.
    """

    def __init__(self, regex: str, detail: str | None = None) -> None:
        message = f"{regex} is an invalid regex."
        if detail:
            message = f"{message} ({detail})"
        super().__init__("topic.filter", message)
        self.regex = regex


def _java_trim(s: str) -> str:
    # String.trim strips every char <= U+0020, not Unicode whitespace.
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


def normalise_regex(raw_regex: str) -> str:
    """Normalise a topic filter as ``TopicFilter`` does (0.10.2).

    Trims (Java ``String.trim``), turns ``,`` into ``|``, removes spaces, and strips leading
    and trailing ``"`` / ``'`` (property files may bring quotes).

    Args:
        raw_regex: the filter as the user wrote it, e.g. ``" 'a, b' "``.

    Returns:
        The regex, e.g. ``"a|b"``.
    """
    regex = _java_trim(raw_regex).replace(",", "|").replace(" ", "")
    regex = re.sub(r"\A[\"']+", "", regex)
    return re.sub(r"[\"']+\Z", "", regex)


@dataclass(frozen=True)
class TopicFilter(ABC):
    """A wildcard subscription: a regex over topic names (``TopicFilter.scala``, 0.10.2).

    The regex is normalised (:func:`normalise_regex`) and must match a topic name in full
    (Java's ``String.matches``). It is compiled with Python's :mod:`re`, which reads the
    common Java syntax the same way. Differences: Java-only constructs (``\\p{...}`` classes,
    ``\\Q...\\E``, ``\\z``) are rejected as invalid here, and a ``{`` that does not start a
    valid repetition is a literal for Python but an error for Java.

    Attributes:
        raw_regex: the filter as given.
        regex: the normalised regex; ``str()`` of the filter.

    Raises:
        InvalidTopicFilterError: the normalised regex does not compile.
    """

    raw_regex: str
    regex: str = field(init=False)
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        regex = normalise_regex(self.raw_regex)
        try:
            pattern = re.compile(regex)
        except re.error as exc:
            raise InvalidTopicFilterError(regex, str(exc)) from exc
        object.__setattr__(self, "regex", regex)
        object.__setattr__(self, "_pattern", pattern)

    def __str__(self) -> str:
        return self.regex

    def matches(self, topic: str) -> bool:
        """Whether the regex matches the whole topic name.

        Args:
            topic: the topic's name.

        Returns:
            ``True`` on a full match.
        """
        return self._pattern.fullmatch(topic) is not None

    @property
    @abstractmethod
    def pattern(self) -> str:
        """The registration pattern, ``"white_list"`` or ``"black_list"``."""

    @abstractmethod
    def is_topic_allowed(self, topic: str, exclude_internal_topics: bool) -> bool:
        """Whether the filter lets ``topic`` through.

        Args:
            topic: the topic's name.
            exclude_internal_topics: ``exclude.internal.topics``: if true, topics in
                :data:`INTERNAL_TOPICS` are never allowed.

        Returns:
            ``True`` if the topic is subscribed.
        """


@dataclass(frozen=True)
class Whitelist(TopicFilter):
    """Subscribe to the topics the regex matches in full (``Whitelist``, 0.10.2)."""

    @property
    def pattern(self) -> str:
        """``"white_list"``."""
        return WHITE_LIST_PATTERN

    def is_topic_allowed(self, topic: str, exclude_internal_topics: bool) -> bool:
        """Allowed when the regex matches and the topic is not an excluded internal topic.

        Args:
            topic: the topic's name.
            exclude_internal_topics: drop :data:`INTERNAL_TOPICS` if true.

        Returns:
            ``True`` if the topic is subscribed.
        """
        if exclude_internal_topics and topic in INTERNAL_TOPICS:
            return False
        return self.matches(topic)


@dataclass(frozen=True)
class Blacklist(TopicFilter):
    """Subscribe to the topics the regex does *not* match (``Blacklist``, 0.10.2)."""

    @property
    def pattern(self) -> str:
        """``"black_list"``."""
        return BLACK_LIST_PATTERN

    def is_topic_allowed(self, topic: str, exclude_internal_topics: bool) -> bool:
        """Allowed when the regex does not match and the topic is not an excluded internal one.

        Args:
            topic: the topic's name.
            exclude_internal_topics: drop :data:`INTERNAL_TOPICS` if true.

        Returns:
            ``True`` if the topic is subscribed.
        """
        if exclude_internal_topics and topic in INTERNAL_TOPICS:
            return False
        return not self.matches(topic)


_NOT_RE2J: Final = re.compile(
    r"""
    \\[1-9]             # a backreference
    | \\k<              # a named backreference
    | \(\?[=!]          # lookahead
    | \(\?<[=!]         # lookbehind
    | \(\?>             # an atomic group
    | [*+?}]\+          # a possessive quantifier
    | \\[ZGpPQE]        # \Z, \G, Unicode classes by \p, quoting: not in RE2/J's syntax
    """,
    re.VERBOSE,
)
"""Java ``Pattern`` constructs RE2/J (the broker's regex engine, KIP-848) does not read."""


def broker_side_regex(topic_filter: TopicFilter, exclude_internal_topics: bool) -> str | None:
    """The regex a ``group.protocol=consumer`` member sends the broker for ``topic_filter``
    (``SubscribedTopicRegex``), or ``None`` when the member resolves it itself and sends the
    matching topic names (pure).

    KIP-848: the group coordinator matches the regex (RE2/J, in full, as Java's
    ``String.matches``) against the cluster's topics and assigns the matches, new topics
    included, without the member refreshing its metadata. Resolved here instead:

    - a :class:`Blacklist` (the broker takes only a regex of topics to include);
    - a regex with constructs RE2/J lacks (backreferences, lookaround, atomic groups,
      possessive quantifiers, ``\\Z``, ``\\G``, ``\\p{..}``, ``\\Q..\\E``): the Java
      client, too, sends only an RE2/J ``SubscriptionPattern`` to the broker;
    - with ``exclude.internal.topics`` (the default), a regex that matches an internal
      topic's name (:data:`INTERNAL_TOPICS`): the broker would assign it.

    Args:
        topic_filter: the wildcard subscription.
        exclude_internal_topics: ``exclude.internal.topics``.

    Returns:
        The normalised regex, or ``None``.
    """
    if not isinstance(topic_filter, Whitelist):
        return None
    regex = topic_filter.regex
    if _NOT_RE2J.search(regex):
        return None
    if exclude_internal_topics and any(topic_filter.matches(t) for t in INTERNAL_TOPICS):
        return None
    return regex


# --------------------------------------------------------------------------------------------
# Topic counts
# --------------------------------------------------------------------------------------------


class TopicCount(ABC):
    """A member's subscription, as ``TopicCount`` (0.10.2).

    Attributes:
        consumer_id: the member's ``consumerIdString``.
    """

    consumer_id: str

    @property
    @abstractmethod
    def pattern(self) -> str:
        """The registration pattern: ``"static"``, ``"white_list"`` or ``"black_list"``."""

    @abstractmethod
    def get_topic_count_map(self) -> dict[str, int]:
        """Return the ``subscription`` map written into the member's registration.

        Returns:
            Topic -> stream count (static), or ``{json-escaped regex: num_streams}``
            (wildcard).
        """

    @abstractmethod
    def get_consumer_thread_ids_per_topic(self) -> dict[str, frozenset[ConsumerThreadId]]:
        """Return the member's threads for each topic it consumes.

        Returns:
            Topic -> thread ids; for a wildcard, every allowed topic of the known topic list.
        """

    def encode_registration(self, timestamp_ms: int) -> bytes:
        """Encode this subscription as the member's registration node data.

        Args:
            timestamp_ms: registration time, epoch milliseconds.

        Returns:
            The JSON bytes (see :func:`aiozkconsumer.zk.layout.encode_registration`).

        Raises:
            ValueError: the subscription cannot be encoded.
        """
        return encode_registration(self.get_topic_count_map(), self.pattern, timestamp_ms)


class StaticTopicCount(TopicCount):
    """A fixed ``topic -> stream count`` subscription (``StaticTopicCount``, 0.10.2).

    Args:
        consumer_id: the member's ``consumerIdString``.
        topic_count_map: topic -> number of streams; may be empty (the member then consumes
            nothing, but still counts as a group member).

    Raises:
        InvalidConfigError: a topic name is empty or a stream count is not an int >= 1.
    """

    def __init__(self, consumer_id: str, topic_count_map: Mapping[str, int]) -> None:
        for topic, count in topic_count_map.items():
            if not isinstance(topic, str) or not topic:
                raise InvalidConfigError("topic_count_map", f"invalid topic name {topic!r}")
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise InvalidConfigError(
                    "topic_count_map",
                    f"the number of streams for topic {topic!r} must be an int >= 1, got {count!r}",
                )
        self.consumer_id = consumer_id
        self._topic_count_map = dict(topic_count_map)

    def __repr__(self) -> str:
        return f"StaticTopicCount({self.consumer_id!r}, {self._topic_count_map!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StaticTopicCount):
            return NotImplemented
        return (self.consumer_id, self._topic_count_map) == (
            other.consumer_id,
            other._topic_count_map,
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def pattern(self) -> str:
        """``"static"``."""
        return STATIC_PATTERN

    def get_topic_count_map(self) -> dict[str, int]:
        """Return a copy of the ``topic -> stream count`` map.

        Returns:
            Topic -> stream count.
        """
        return dict(self._topic_count_map)

    def get_consumer_thread_ids_per_topic(self) -> dict[str, frozenset[ConsumerThreadId]]:
        """Return ``consumer_id-0 .. consumer_id-(n-1)`` for each topic.

        Returns:
            Topic -> thread ids.
        """
        return make_consumer_thread_ids_per_topic(self.consumer_id, self._topic_count_map)


class WildcardTopicCount(TopicCount):
    """A filter subscription evaluated against a topic list (``WildcardTopicCount``, 0.10.2).

    The original reads ``/brokers/topics`` whenever it is asked for thread ids; here the caller
    passes the topic list it read, so the object is a pure snapshot (see :meth:`with_topics`).

    Args:
        consumer_id: the member's ``consumerIdString``.
        topic_filter: the :class:`Whitelist` or :class:`Blacklist`.
        num_streams: the number of streams shared by all allowed topics (>= 1).
        all_topics: the topics known to exist (children of ``/brokers/topics``).
        exclude_internal_topics: ``exclude.internal.topics``.

    Raises:
        InvalidConfigError: ``num_streams`` is not an int >= 1.
    """

    def __init__(
        self,
        consumer_id: str,
        topic_filter: TopicFilter,
        num_streams: int,
        all_topics: Iterable[str],
        exclude_internal_topics: bool,
    ) -> None:
        if isinstance(num_streams, bool) or not isinstance(num_streams, int) or num_streams < 1:
            raise InvalidConfigError(
                "num_streams", f"the number of streams must be an int >= 1, got {num_streams!r}"
            )
        self.consumer_id = consumer_id
        self.topic_filter = topic_filter
        self.num_streams = num_streams
        self.all_topics: tuple[str, ...] = tuple(sorted(set(all_topics)))
        self.exclude_internal_topics = exclude_internal_topics

    def __repr__(self) -> str:
        return (
            f"WildcardTopicCount({self.consumer_id!r}, {self.topic_filter!r}, "
            f"{self.num_streams}, topics={len(self.all_topics)}, "
            f"exclude_internal_topics={self.exclude_internal_topics})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WildcardTopicCount):
            return NotImplemented
        return (
            self.consumer_id,
            self.topic_filter,
            self.num_streams,
            self.all_topics,
            self.exclude_internal_topics,
        ) == (
            other.consumer_id,
            other.topic_filter,
            other.num_streams,
            other.all_topics,
            other.exclude_internal_topics,
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def pattern(self) -> str:
        """``"white_list"`` or ``"black_list"``, after the filter."""
        return self.topic_filter.pattern

    def allowed_topics(self) -> tuple[str, ...]:
        """Return the known topics the filter allows, sorted.

        Returns:
            The subscribed topics.
        """
        return tuple(
            t
            for t in self.all_topics
            if self.topic_filter.is_topic_allowed(t, self.exclude_internal_topics)
        )

    def get_topic_count_map(self) -> dict[str, int]:
        """Return ``{json_escape_string(regex): num_streams}``, the registration's subscription.

        Returns:
            A one-entry map.
        """
        return {json_escape_string(self.topic_filter.regex): self.num_streams}

    def get_consumer_thread_ids_per_topic(self) -> dict[str, frozenset[ConsumerThreadId]]:
        """Return ``consumer_id-0 .. consumer_id-(num_streams-1)`` for each allowed topic.

        Returns:
            Topic -> thread ids.
        """
        return make_consumer_thread_ids_per_topic(
            self.consumer_id, dict.fromkeys(self.allowed_topics(), self.num_streams)
        )

    def with_topics(self, all_topics: Iterable[str]) -> WildcardTopicCount:
        """Return the same subscription evaluated against another topic list.

        Args:
            all_topics: the topics now known to exist.

        Returns:
            A new :class:`WildcardTopicCount`.
        """
        return WildcardTopicCount(
            self.consumer_id,
            self.topic_filter,
            self.num_streams,
            all_topics,
            self.exclude_internal_topics,
        )


def construct_topic_count(
    consumer_id: str,
    registration: Registration,
    all_topics: Iterable[str],
    exclude_internal_topics: bool,
) -> TopicCount:
    """Build a member's :class:`TopicCount` from its registration, as the group sees it.

    As ``TopicCount.constructTopicCount`` (0.10.2): a ``white_list``/``black_list``
    registration with a non-empty subscription becomes a :class:`WildcardTopicCount` built
    from its first entry (regex -> stream count), evaluated against ``all_topics`` -- the
    *reader's* view of ``/brokers/topics``, not the writer's. Anything else, including an
    unknown pattern and an empty wildcard subscription, is static.

    Args:
        consumer_id: the member whose registration this is.
        registration: its decoded registration.
        all_topics: the topics the reading member knows to exist.
        exclude_internal_topics: the *reading* member's ``exclude.internal.topics``.

    Returns:
        The member's topic count.

    Raises:
        InvalidTopicFilterError: a wildcard registration's regex does not compile.
        InvalidConfigError: a stream count is not an int >= 1 (only possible for a
            registration not produced by :func:`~aiozkconsumer.zk.layout.decode_registration`).
    """
    if registration.is_wildcard:
        regex, num_streams = next(iter(registration.subscription.items()))
        topic_filter: TopicFilter = (
            Whitelist(regex) if registration.pattern == WHITE_LIST_PATTERN else Blacklist(regex)
        )
        return WildcardTopicCount(
            consumer_id, topic_filter, num_streams, all_topics, exclude_internal_topics
        )
    return StaticTopicCount(consumer_id, registration.subscription)
