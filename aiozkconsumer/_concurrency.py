"""Structured fan-out: run awaitables concurrently inside one anyio task group.

``asyncio.gather`` leaves its siblings running when one fails; these helpers own every task
they start, cancel the rest on the first failure and raise that failure itself (not wrapped in
an ``ExceptionGroup``), so callers catch the classes they know.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import TypeVar

import anyio

__all__ = ["gather", "gather_outcomes"]

_T = TypeVar("_T")


async def gather(awaitables: Iterable[Awaitable[_T]]) -> list[_T]:
    """Await all concurrently; results in the order given.

    Args:
        awaitables: the awaitables to run (each is awaited exactly once).

    Returns:
        Their results, in order.

    Raises:
        Exception: the first failure, as itself; the other awaitables are cancelled (and
            awaited) before it is raised.
    """
    items = list(awaitables)
    results: list[_T | None] = [None] * len(items)
    errors: list[BaseException] = []

    async def run(i: int, aw: Awaitable[_T]) -> None:
        try:
            results[i] = await aw
        except Exception as e:
            if not errors:
                errors.append(e)
            tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        for i, aw in enumerate(items):
            tg.start_soon(run, i, aw)
    if errors:
        raise errors[0]
    return results  # type: ignore[return-value]


async def gather_outcomes(awaitables: Iterable[Awaitable[_T]]) -> list[_T | Exception]:
    """Await all concurrently, each to its end; a failure is returned in its place.

    Args:
        awaitables: the awaitables to run.

    Returns:
        For each, in order, its result or the ``Exception`` it raised. Cancellation of the
        caller still cancels all of them and propagates.
    """
    items = list(awaitables)
    outcomes: list[_T | Exception | None] = [None] * len(items)

    async def run(i: int, aw: Awaitable[_T]) -> None:
        try:
            outcomes[i] = await aw
        except Exception as e:
            outcomes[i] = e

    async with anyio.create_task_group() as tg:
        for i, aw in enumerate(items):
            tg.start_soon(run, i, aw)
    return outcomes  # type: ignore[return-value]
