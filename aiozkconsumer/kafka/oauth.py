"""OAUTHBEARER tokens: refreshed before they expire, shared by every connection of a client.

:func:`refreshing` wraps the token source of ``KafkaSecurity`` (a provider given from code, an
object with ``async token() -> str``) in aiokafka's ``AbstractTokenProvider`` shape. A token is
reused until 80% of its lifetime has passed, with up to 5% jitter so that many clients do not
refresh at once (the Java client's ``sasl.login.refresh.window.factor`` = 0.8 and
``sasl.login.refresh.window.jitter`` = 0.05). The lifetime comes from the token's own ``exp``
and ``iat`` claims when it is a JWT; a token that is not one is asked for again at every
authentication. A source that fails is retried with exponential backoff, and after the last
attempt the error names the source and the last failure (never the token).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import time
import weakref
from typing import Any

from aiokafka.abc import AbstractTokenProvider

from ..errors import AuthenticationError

__all__ = ["RefreshingTokenProvider", "refreshing", "token_lifetime"]

log = logging.getLogger(__name__)

REFRESH_WINDOW_FACTOR = 0.8
REFRESH_WINDOW_JITTER = 0.05


def token_lifetime(token: str) -> tuple[float, float] | None:
    """``(issued at, expires at)`` in epoch seconds from a JWT's claims, or ``None``.

    ``iat`` defaults to now when absent; ``None`` when the token is not a JWT or has no
    ``exp``.
    """
    parts = token.split(".")
    if len(parts) < 2:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
        exp = float(claims["exp"])
    except (ValueError, KeyError, TypeError):
        return None
    iat = claims.get("iat")
    try:
        issued = float(iat) if iat is not None else time.time()
    except (TypeError, ValueError):
        issued = time.time()
    return issued, exp


class RefreshingTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """A token source's tokens, cached until 80% (± jitter) of their lifetime.

    Args:
        source: an object with ``async token() -> str`` (and optionally ``extensions()``).
        attempts: tries per refresh before giving up, default 5.
        backoff_ms: first pause between tries, doubled each time up to ``backoff_max_ms``.
        backoff_max_ms: the longest pause, default 10000.

    Raises (from :meth:`token`):
        AuthenticationError: the source failed ``attempts`` times (the last failure named).
    """

    def __init__(
        self,
        source: Any,
        *,
        attempts: int = 5,
        backoff_ms: int = 100,
        backoff_max_ms: int = 10000,
    ) -> None:
        self._source = source
        self._attempts = attempts
        self._backoff_s = backoff_ms / 1000
        self._backoff_max_s = backoff_max_ms / 1000
        self._token: str | None = None
        self._refresh_at = 0.0
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        self.refreshes = 0
        """Tokens fetched from the source so far."""

    @property
    def expires_at(self) -> float:
        """When the current token expires, epoch seconds (0 when unknown)."""
        return self._expires_at

    async def token(self) -> str:
        """The current token, fetched anew when due.

        Raises:
            AuthenticationError: the source kept failing.
        """
        async with self._lock:
            if self._token is None or time.time() >= self._refresh_at:
                await self._refresh()
            assert self._token is not None
            return self._token

    def extensions(self) -> dict[str, str]:
        """The source's SASL extensions (KIP-342), if it has any."""
        ext = getattr(self._source, "extensions", None)
        return dict(ext()) if callable(ext) else {}

    async def _refresh(self) -> None:
        delay = self._backoff_s
        last: BaseException | None = None
        for attempt in range(1, self._attempts + 1):
            try:
                token = await self._source.token()
            except Exception as e:  # a user's provider may raise anything
                last = e
                log.warning(
                    "OAUTHBEARER token source %s failed (attempt %d of %d): %s",
                    type(self._source).__name__,
                    attempt,
                    self._attempts,
                    type(e).__name__,
                )
                if attempt < self._attempts:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self._backoff_max_s)
                continue
            if not isinstance(token, str) or not token:
                last = TypeError(f"token() returned {type(token).__name__}, not a token string")
                break
            self._set(token)
            return
        raise AuthenticationError(
            "(token source)",
            "OAUTHBEARER",
            f"no token from {type(self._source).__name__} after {self._attempts} attempts: "
            f"{type(last).__name__}: {last}",
        ) from None

    def _set(self, token: str) -> None:
        self._token = token
        self.refreshes += 1
        life = token_lifetime(token)
        if life is None:
            self._refresh_at = 0.0  # unknown lifetime: ask at every authentication
            self._expires_at = 0.0
            return
        issued, expires = life
        window = REFRESH_WINDOW_FACTOR + random.uniform(0, REFRESH_WINDOW_JITTER)
        self._refresh_at = issued + (expires - issued) * window
        self._expires_at = expires

    def __repr__(self) -> str:
        state = "no token" if self._token is None else f"expires {self._expires_at:.0f}"
        return f"<RefreshingTokenProvider {type(self._source).__name__} [{state}]>"


_WRAPPED: weakref.WeakKeyDictionary[Any, RefreshingTokenProvider] = weakref.WeakKeyDictionary()


def refreshing(source: Any) -> RefreshingTokenProvider:
    """``source`` as a :class:`RefreshingTokenProvider` (itself if it already is one).

    Args:
        source: a provider with ``async token()``, or the client-credentials settings of
            ``KafkaSecurity`` (``sasl.oauthbearer.token.endpoint.url`` ...).

    Raises:
        InvalidConfigError: the source is neither.
    """
    if isinstance(source, RefreshingTokenProvider):
        return source
    if callable(getattr(source, "token", None)):
        # One wrapper per source: every connection of every client shares its token.
        try:
            found = _WRAPPED.get(source)
        except TypeError:  # not weak-referenceable
            return RefreshingTokenProvider(source)
        if found is None:
            found = _WRAPPED[source] = RefreshingTokenProvider(source)
        return found
    from ..errors import InvalidConfigError

    raise InvalidConfigError(
        "sasl.oauthbearer.token.endpoint.url",
        "the OIDC client-credentials flow is not available in this build; pass "
        "sasl_oauthbearer_token_provider",
    )
