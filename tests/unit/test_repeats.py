"""Rate-limited repeated warnings (``aiozkconsumer._repeats``), without servers."""

from __future__ import annotations

import logging

import pytest

from aiozkconsumer._repeats import Repeats, throttle_aiokafka


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_line_passes_then_one_per_interval_with_the_count_left_out() -> None:
    clock = Clock()
    repeats = Repeats(10.0, clock)
    assert repeats.allow("k") == 0
    for _ in range(49):
        clock.now += 0.2
        assert repeats.allow("k") is None
    assert repeats.allow("other") == 0  # keys are independent
    clock.now += 0.3  # 10.1 s after the first
    assert repeats.allow("k") == 49
    assert repeats.suffix(49) == " (49 more like it in the last 10 s)"
    assert repeats.suffix(0) == ""


def test_forget_ends_a_run() -> None:
    clock = Clock()
    repeats = Repeats(10.0, clock)
    assert repeats.allow("k") == 0
    assert repeats.allow("k") is None
    repeats.forget("k")  # the condition cleared: the next occurrence is news
    assert repeats.allow("k") == 0


def test_warning_formats_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    repeats = Repeats(10.0, clock)
    log = logging.getLogger("test.repeats")
    with caplog.at_level(logging.WARNING, logger="test.repeats"):
        for _ in range(3):
            repeats.warning(log, "k", "broker %s down", 7)
        clock.now += 11
        repeats.warning(log, "k", "broker %s down", 7)
    assert [r.getMessage() for r in caplog.records] == [
        "broker 7 down",
        "broker 7 down (2 more like it in the last 10 s)",
    ]


def test_aiokafkas_connection_errors_are_throttled_per_broker_and_others_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    throttle_aiokafka()
    throttle_aiokafka()  # once per process
    aiokafka = logging.getLogger("aiokafka")
    assert len([f for f in aiokafka.filters if type(f).__name__ == "_AiokafkaFilter"]) == 1
    with caplog.at_level(logging.ERROR, logger="aiokafka"):
        for _ in range(20):
            aiokafka.error("Unable connect to node with id %s: %s", 901, "refused")
            aiokafka.error("Unable connect to node with id %s: %s", 902, "refused")
            aiokafka.error("Some other error %s", 1)
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("Unable connect to node with id 901: refused") == 1
    assert messages.count("Unable connect to node with id 902: refused") == 1
    assert messages.count("Some other error 1") == 20
