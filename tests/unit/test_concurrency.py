"""Structured fan-out helpers: the first failure cancels the siblings and comes out as itself."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from aiozkconsumer._concurrency import gather, gather_outcomes


async def test_gather_returns_results_in_order() -> None:
    async def value(v: int) -> int:
        await anyio.lowlevel.checkpoint()
        return v

    assert await gather(value(i) for i in range(5)) == [0, 1, 2, 3, 4]


async def test_gather_cancels_siblings_and_raises_the_failure_itself() -> None:
    sibling_cancelled = anyio.Event()
    started = anyio.Event()

    async def slow() -> int:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            sibling_cancelled.set()
            raise
        return 0

    async def fail() -> int:
        await started.wait()
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await gather([slow(), fail()])
    assert sibling_cancelled.is_set()


async def test_gather_outcomes_puts_failures_in_place() -> None:
    async def ok() -> str:
        return "ok"

    async def bad() -> str:
        raise ValueError("bad")

    out = await gather_outcomes([ok(), bad(), ok()])
    assert out[0] == "ok" and out[2] == "ok"
    assert isinstance(out[1], ValueError)
