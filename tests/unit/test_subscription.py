"""Thread ids, topic filters and topic counts (TopicCount.scala / TopicFilter.scala, 0.10.2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiozkconsumer.errors import ConsumerError, InvalidConfigError
from aiozkconsumer.subscription import (
    INTERNAL_TOPICS,
    Blacklist,
    ConsumerThreadId,
    InvalidTopicFilterError,
    StaticTopicCount,
    Whitelist,
    WildcardTopicCount,
    broker_side_regex,
    construct_topic_count,
    make_consumer_thread_ids_per_topic,
    normalise_regex,
)
from aiozkconsumer.zk.layout import Registration, decode_registration

# --------------------------------------------------------------------------------------------
# ConsumerThreadId
# --------------------------------------------------------------------------------------------


def test_thread_id_string_form() -> None:
    tid = ConsumerThreadId("g1_host-1490000000000-1a2b3c4d", 0)
    assert str(tid) == "g1_host-1490000000000-1a2b3c4d-0"


def test_thread_ids_order_by_string_not_by_index() -> None:
    c2, c10 = ConsumerThreadId("c", 2), ConsumerThreadId("c", 10)
    assert c10 < c2
    assert c2 > c10
    assert c10 <= c2 and c2 >= c10
    ids = [ConsumerThreadId("c", i) for i in range(12)]
    assert [t.thread_id for t in sorted(ids)] == [0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9]


def test_thread_ids_order_members_by_plain_string_order() -> None:
    a = ConsumerThreadId("g_hostA", 5)
    b = ConsumerThreadId("g_hostB", 0)
    upper = ConsumerThreadId("g_Z", 0)
    assert sorted([b, a, upper]) == [upper, a, b]
    # "-" (0x2d) sorts before "0" (0x30): consumer "c" thread 1 precedes consumer "c0".
    assert ConsumerThreadId("c", 1) < ConsumerThreadId("c0", 0)


def test_thread_id_equality_and_hash() -> None:
    assert ConsumerThreadId("c", 1) == ConsumerThreadId("c", 1)
    assert len({ConsumerThreadId("c", 1), ConsumerThreadId("c", 1)}) == 1
    assert ConsumerThreadId("c", 1) != ConsumerThreadId("c", 2)


def test_thread_id_rejects_negative_or_empty() -> None:
    with pytest.raises(ValueError):
        ConsumerThreadId("c", -1)
    with pytest.raises(ValueError):
        ConsumerThreadId("", 0)
    with pytest.raises(TypeError):
        ConsumerThreadId("c", True)


def test_parse_splits_on_the_last_dash() -> None:
    tid = ConsumerThreadId.parse("g1_host-1490000000000-1a2b3c4d-12")
    assert tid == ConsumerThreadId("g1_host-1490000000000-1a2b3c4d", 12)
    assert ConsumerThreadId.parse("c--1") == ConsumerThreadId("c-", 1)


@pytest.mark.parametrize("bad", ["", "c", "c-", "-1", "c-x", "c-1a", "c-+1", "c- 1"])
def test_parse_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        ConsumerThreadId.parse(bad)


_consumer_ids = st.text(alphabet=st.sampled_from("abgAB_.-0123456789"), min_size=1, max_size=12)
_thread_ids = st.builds(ConsumerThreadId, _consumer_ids, st.integers(0, 200))


@given(_thread_ids)
def test_parse_round_trip(tid: ConsumerThreadId) -> None:
    assert ConsumerThreadId.parse(str(tid)) == tid


@given(st.lists(_thread_ids, max_size=20))
def test_order_is_string_order(ids: list[ConsumerThreadId]) -> None:
    assert [str(t) for t in sorted(ids)] == sorted(str(t) for t in ids)


def test_make_consumer_thread_ids_per_topic() -> None:
    assert make_consumer_thread_ids_per_topic("c", {"a": 2, "b": 1}) == {
        "a": frozenset({ConsumerThreadId("c", 0), ConsumerThreadId("c", 1)}),
        "b": frozenset({ConsumerThreadId("c", 0)}),
    }
    with pytest.raises(ValueError):
        make_consumer_thread_ids_per_topic("c", {"a": 0})


# --------------------------------------------------------------------------------------------
# TopicFilter
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "regex"),
    [
        ("payments", "payments"),
        ("  a, b ,c  ", "a|b|c"),
        ('"foo.*"', "foo.*"),
        ("'foo.*'", "foo.*"),
        ("\"'x'\"", "x"),
        ("\tlogs-.*\n", "logs-.*"),
        ("a b", "ab"),
        ("\u00a0a", "\u00a0a"),  # String.trim leaves non-ASCII whitespace alone
    ],
)
def test_regex_normalisation(raw: str, regex: str) -> None:
    assert normalise_regex(raw) == regex
    assert Whitelist(raw).regex == regex
    assert str(Blacklist(raw)) == regex


@pytest.mark.parametrize("raw", ["a[", "(x", "*", "a**", "x)"])
def test_invalid_regex(raw: str) -> None:
    with pytest.raises(InvalidTopicFilterError) as info:
        Whitelist(raw)
    err = info.value
    assert isinstance(err, InvalidConfigError)
    assert isinstance(err, ConsumerError)
    assert isinstance(err, ValueError)
    assert err.key == "topic.filter"
    assert err.regex == raw
    assert f"{raw} is an invalid regex." in str(err)


def test_whitelist_is_a_full_match() -> None:
    wl = Whitelist("foo")
    assert wl.is_topic_allowed("foo", exclude_internal_topics=True)
    assert not wl.is_topic_allowed("foobar", exclude_internal_topics=True)
    assert not wl.is_topic_allowed("xfoo", exclude_internal_topics=True)
    assert Whitelist("foo.*").is_topic_allowed("foobar", exclude_internal_topics=True)
    assert Whitelist("a,b").is_topic_allowed("b", exclude_internal_topics=True)


def test_blacklist_is_the_complement() -> None:
    bl = Blacklist("foo.*")
    assert not bl.is_topic_allowed("foobar", exclude_internal_topics=True)
    assert bl.is_topic_allowed("barfoo", exclude_internal_topics=True)


@pytest.mark.parametrize("topic", sorted(INTERNAL_TOPICS))
def test_internal_topics(topic: str) -> None:
    assert not Whitelist(".*").is_topic_allowed(topic, exclude_internal_topics=True)
    assert Whitelist(".*").is_topic_allowed(topic, exclude_internal_topics=False)
    assert not Blacklist("nothing").is_topic_allowed(topic, exclude_internal_topics=True)
    assert Blacklist("nothing").is_topic_allowed(topic, exclude_internal_topics=False)


def test_internal_topics_include_the_original_one() -> None:
    assert "__consumer_offsets" in INTERNAL_TOPICS
    assert "__transaction_state" in INTERNAL_TOPICS


def test_filters_equality_follows_class_and_raw_regex() -> None:
    assert Whitelist("a") == Whitelist("a")
    assert Whitelist("a") != Blacklist("a")  # type: ignore[comparison-overlap]
    assert hash(Whitelist("a")) == hash(Whitelist("a"))
    assert Whitelist("a").pattern == "white_list"
    assert Blacklist("a").pattern == "black_list"


# --------------------------------------------------------------------------------------------
# TopicCount
# --------------------------------------------------------------------------------------------


def test_static_topic_count() -> None:
    tc = StaticTopicCount("g_c1", {"a": 2, "b": 1})
    assert tc.pattern == "static"
    assert tc.consumer_id == "g_c1"
    assert tc.get_topic_count_map() == {"a": 2, "b": 1}
    assert tc.get_consumer_thread_ids_per_topic() == {
        "a": frozenset({ConsumerThreadId("g_c1", 0), ConsumerThreadId("g_c1", 1)}),
        "b": frozenset({ConsumerThreadId("g_c1", 0)}),
    }
    assert tc.encode_registration(1490000000000) == (
        b'{"version":1,"subscription":{"a":2,"b":1},"pattern":"static","timestamp":"1490000000000"}'
    )


def test_static_topic_count_copies_its_map() -> None:
    source = {"a": 1}
    tc = StaticTopicCount("c", source)
    source["b"] = 1
    tc.get_topic_count_map()["c"] = 1
    assert tc.get_topic_count_map() == {"a": 1}


@pytest.mark.parametrize("topic_count_map", [{"a": 0}, {"a": -1}, {"a": True}, {"": 1}])
def test_static_topic_count_rejects_bad_counts(topic_count_map: dict[str, int]) -> None:
    with pytest.raises(InvalidConfigError):
        StaticTopicCount("c", topic_count_map)


def test_wildcard_topic_count() -> None:
    topics = ["logs.app", "logs.db", "metrics", "__consumer_offsets"]
    tc = WildcardTopicCount("g_c1", Whitelist("logs\\..*"), 2, topics, True)
    assert tc.pattern == "white_list"
    assert tc.allowed_topics() == ("logs.app", "logs.db")
    assert tc.get_topic_count_map() == {"logs\\\\..*": 2}
    ids = {ConsumerThreadId("g_c1", 0), ConsumerThreadId("g_c1", 1)}
    assert tc.get_consumer_thread_ids_per_topic() == {"logs.app": ids, "logs.db": ids}
    assert tc.encode_registration(1490000000000) == (
        b'{"version":1,"subscription":{"logs\\\\..*":2},"pattern":"white_list",'
        b'"timestamp":"1490000000000"}'
    )


def test_wildcard_blacklist_and_internal_topics() -> None:
    topics = ["a", "b", "__consumer_offsets"]
    excluded = WildcardTopicCount("c", Blacklist("a"), 1, topics, True)
    assert excluded.pattern == "black_list"
    assert set(excluded.get_consumer_thread_ids_per_topic()) == {"b"}
    included = WildcardTopicCount("c", Blacklist("a"), 1, topics, False)
    assert set(included.get_consumer_thread_ids_per_topic()) == {"b", "__consumer_offsets"}


def test_wildcard_with_topics_re_evaluates() -> None:
    tc = WildcardTopicCount("c", Whitelist("t.*"), 1, ["t1"], True)
    later = tc.with_topics(["t1", "t2", "x"])
    assert set(later.get_consumer_thread_ids_per_topic()) == {"t1", "t2"}
    assert set(tc.get_consumer_thread_ids_per_topic()) == {"t1"}
    assert later.get_topic_count_map() == tc.get_topic_count_map()


def test_wildcard_rejects_bad_stream_count() -> None:
    with pytest.raises(InvalidConfigError):
        WildcardTopicCount("c", Whitelist("t"), 0, [], True)


def test_construct_static() -> None:
    reg = decode_registration(
        b'{"version":1,"subscription":{"topicA":2},"pattern":"static","timestamp":"1"}'
    )
    tc = construct_topic_count("g_c2", reg, ["topicA", "other"], True)
    assert tc == StaticTopicCount("g_c2", {"topicA": 2})


def test_construct_wildcard_uses_the_readers_topic_list() -> None:
    writer = WildcardTopicCount("g_w", Whitelist("orders-.*"), 3, ["orders-eu"], True)
    reg = decode_registration(writer.encode_registration(1490000000000))
    # The reader knows a topic the writer has not seen yet: it counts it for the writer.
    tc = construct_topic_count("g_w", reg, ["orders-eu", "orders-us", "audit"], True)
    assert isinstance(tc, WildcardTopicCount)
    assert tc.topic_filter == Whitelist("orders-.*")
    assert tc.num_streams == 3
    assert set(tc.get_consumer_thread_ids_per_topic()) == {"orders-eu", "orders-us"}


def test_construct_wildcard_regex_with_escapes_survives_the_round_trip() -> None:
    writer = WildcardTopicCount("g_w", Blacklist('a\\.b|"q"/x'), 1, [], True)
    reg = decode_registration(writer.encode_registration(0))
    tc = construct_topic_count("g_w", reg, ["a.b", "axb", "q/x"], True)
    assert isinstance(tc, WildcardTopicCount)
    assert tc.topic_filter.regex == writer.topic_filter.regex
    assert tc.pattern == "black_list"
    assert set(tc.get_consumer_thread_ids_per_topic()) == {"axb", "q/x"}


def test_construct_reader_exclusion_setting_applies() -> None:
    reg = Registration("white_list", {".*": 1})
    tc = construct_topic_count("c", reg, ["t", "__consumer_offsets"], False)
    assert set(tc.get_consumer_thread_ids_per_topic()) == {"t", "__consumer_offsets"}


def test_construct_empty_wildcard_or_unknown_pattern_is_static() -> None:
    empty = construct_topic_count("c", Registration("white_list", {}), ["t"], True)
    assert empty == StaticTopicCount("c", {})
    assert empty.get_consumer_thread_ids_per_topic() == {}
    odd = construct_topic_count("c", Registration("regex", {"t": 2}), ["t"], True)
    assert odd == StaticTopicCount("c", {"t": 2})


def test_construct_wildcard_with_invalid_regex() -> None:
    with pytest.raises(InvalidTopicFilterError):
        construct_topic_count("c", Registration("white_list", {"a[": 1}), ["t"], True)


# -- broker-side regex (KIP-848 SubscribedTopicRegex) -----------------------------------------


@pytest.mark.parametrize(
    ("raw", "sent"),
    [
        ("orders-.*", "orders-.*"),
        ("a, b", "a|b"),  # normalised as TopicFilter does
        ("[a-z]+\\.events", "[a-z]+\\.events"),
    ],
)
def test_a_whitelist_re2j_reads_goes_to_the_broker(raw: str, sent: str) -> None:
    assert broker_side_regex(Whitelist(raw), exclude_internal_topics=True) == sent


@pytest.mark.parametrize(
    "raw",
    [
        "(?!tmp-).*-events",  # lookahead
        "(?<=a)b",  # lookbehind
        "(a)\\1",  # backreference
        "(?>ab)c",  # atomic group
        "a++",  # possessive
        "a*+b",
        "a\\Z",
    ],
)
def test_a_whitelist_re2j_cannot_read_is_resolved_here(raw: str) -> None:
    assert broker_side_regex(Whitelist(raw), exclude_internal_topics=False) is None


def test_internal_topics_and_blacklists_are_resolved_here() -> None:
    # The broker would assign __consumer_offsets; exclude.internal.topics hides it here.
    assert broker_side_regex(Whitelist(".*"), exclude_internal_topics=True) is None
    assert broker_side_regex(Whitelist("__.*"), exclude_internal_topics=True) is None
    assert broker_side_regex(Whitelist(".*"), exclude_internal_topics=False) == ".*"
    assert broker_side_regex(Blacklist("tmp-.*"), exclude_internal_topics=True) is None
