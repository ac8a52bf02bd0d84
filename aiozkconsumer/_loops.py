"""Closing a private event loop the way ``asyncio.run`` does (shared by the loop owners)."""

from __future__ import annotations

import asyncio

__all__ = ["close_loop"]


def close_loop(loop: asyncio.AbstractEventLoop, *, shutdown_executor: bool = False) -> None:
    """Cancel the loop's remaining tasks, wait for them, finish async generators, close it.

    As ``asyncio.run``'s teardown, for loops that the caller created and ran itself. Call it
    from the thread that ran the loop, once the loop has stopped.

    Args:
        loop: a stopped, not yet closed event loop.
        shutdown_executor: also shut the loop's default executor down.
    """
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        if shutdown_executor:
            loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
