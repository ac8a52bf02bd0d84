"""One base for the objects used as ``async with X(...) as x``: started on entering,
closed on leaving.

anyio's ``AsyncResource`` (``__aenter__`` returns the object, ``__aexit__`` awaits
``aclose()``), plus a ``start()`` awaited on entering, and a hook that learns the block
failed (the test kit keeps a failed run's logs).
"""

from __future__ import annotations

from types import TracebackType
from typing import ClassVar, Self

import anyio
from anyio.abc import AsyncResource

__all__ = ["AsyncService"]


class AsyncService(AsyncResource):
    """Started by ``async with`` (:meth:`start`), closed on leaving it (:meth:`aclose`).

    Subclasses define ``start`` and ``aclose``; ``_block_failed`` is told of an exception
    the block raised before ``aclose`` runs. With ``shield_close`` the close runs shielded
    from the cancellation that may be ending the block.
    """

    shield_close: ClassVar[bool] = False

    async def start(self) -> None:
        """Start the service (awaited on entering ``async with``)."""

    def _block_failed(self, exc: BaseException) -> None:
        """The ``async with`` block raised ``exc`` (called before ``aclose``)."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        if exc_val is not None:
            self._block_failed(exc_val)
        if self.shield_close:
            with anyio.CancelScope(shield=True):
                await self.aclose()
        else:
            await self.aclose()
