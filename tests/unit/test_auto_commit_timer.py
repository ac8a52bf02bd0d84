"""The auto-commit's timer without servers: the interval runs from one round's start to the
next (the Java client's auto-commit timer is reset when a commit is sent), so a commit held up
longer than the interval (a link cut that healed) is followed by the next one at once."""

from __future__ import annotations

from typing import Any, cast

import anyio

from aiozkconsumer.commits import FencedCommitter
from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.metrics import ConsumerMetrics
from aiozkconsumer.ownership import OwnershipState

INTERVAL_S = 2.0


async def test_a_commit_slower_than_the_interval_is_followed_by_the_next_at_once() -> None:
    committer = FencedCommitter(
        ConsumerConfig(group_id="g", zookeeper_connect="127.0.0.1:1"),
        "m",
        None,
        cast(Any, None),
        OwnershipState(1),
        ConsumerMetrics("c", "g"),
        on_fenced=lambda fenced: None,
    )
    calls: list[float] = []
    first, second = anyio.Event(), anyio.Event()

    async def commit(offsets: Any, retries: int = 0) -> Any:
        calls.append(anyio.current_time())
        if len(calls) == 1:
            first.set()
            await anyio.sleep(INTERVAL_S * 1.25)  # held up: longer than the interval
        else:
            second.set()
        return {}

    committer.commit = commit  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        tg.start_soon(committer.auto_commit, INTERVAL_S)
        # Timed from the held-up commit's return, the next round would come a whole
        # interval later; from its start, it is due when that commit returns.
        with anyio.fail_after(INTERVAL_S * 3):
            await first.wait()
        returned_by = calls[0] + INTERVAL_S * 1.25
        with anyio.fail_after(INTERVAL_S * 1.25 + INTERVAL_S / 2):
            await second.wait()
        tg.cancel_scope.cancel()
    assert calls[1] - returned_by < INTERVAL_S / 2
