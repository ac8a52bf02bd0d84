"""OAUTHBEARER tokens: fetched, refreshed before they expire, shared by every connection.

:func:`refreshing` wraps the token source of ``KafkaSecurity`` in aiokafka's
``AbstractTokenProvider`` shape (:class:`RefreshingTokenProvider`). The source is either a
provider given from code (an object with ``async token() -> str``) or the settings of the
Java client's OIDC client-credentials flow (``sasl.oauthbearer.token.endpoint.url``,
``sasl.oauthbearer.client.id``, ``sasl.oauthbearer.client.secret``,
``sasl.oauthbearer.scope``), run by :class:`ClientCredentialsSource` (an HTTP POST with
aiohttp, the ``oauth`` extra) or, for a ``file:`` URL, :class:`FileTokenSource` (the file is
read again at every refresh, as a sidecar rewrites it).

A token is reused until 80% of its lifetime has passed, with up to 5% jitter so that many
clients do not refresh at once (the Java client's ``sasl.login.refresh.window.factor`` = 0.8
and ``sasl.login.refresh.window.jitter`` = 0.05). The lifetime comes from the token's own
``exp`` and ``iat`` claims when it is a JWT, else from the token endpoint's ``expires_in``; a
token with neither is asked for again at every authentication. A source that fails is retried
with exponential backoff (``sasl.login.retry.backoff.ms`` = 100 up to
``sasl.login.retry.backoff.max.ms`` = 10000, as the Java client), except for an answer that
retrying cannot change (HTTP 400/401/403 ...), and after the last attempt the error names the
source and the last failure (never the token or the client secret).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import time
import urllib.parse
import urllib.request
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiokafka.abc import AbstractTokenProvider

from ..errors import AuthenticationError, InvalidConfigError
from ..security import _EndpointSpec

__all__ = [
    "ClientCredentialsSource",
    "FileTokenSource",
    "RefreshingTokenProvider",
    "TokenSourceError",
    "refreshing",
    "token_lifetime",
    "token_source",
]

log = logging.getLogger(__name__)

REFRESH_WINDOW_FACTOR = 0.8
REFRESH_WINDOW_JITTER = 0.05
OAUTH_EXTRA_HINT = "pip install 'aiozkconsumer[oauth]'"
"""How to install what the client-credentials flow needs (aiohttp)."""

_RETRYABLE_HTTP = frozenset((408, 429))
"""HTTP statuses below 500 worth retrying (a timeout, too many requests)."""


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


class TokenSourceError(Exception):
    """A token source could not give a token.

    Attributes:
        retryable: whether asking again may help (a timeout, HTTP 5xx, a missing file) or
            not (HTTP 401 ``invalid_client``: wrong credentials stay wrong).
    """

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class ClientCredentialsSource:
    """Tokens from an OAuth 2 token endpoint by the client-credentials grant (RFC 6749 §4.4).

    As the Java client's ``HttpAccessTokenRetriever``: a form POST of
    ``grant_type=client_credentials`` (and ``scope`` when set), the client id and secret in an
    HTTP Basic ``Authorization`` header (each form-encoded first, RFC 6749 §2.3.1); the answer's
    ``access_token`` is the token and ``expires_in`` its lifetime. One short-lived aiohttp
    session per request (tokens are fetched once per lifetime, so nothing is gained by keeping
    connections, and nothing is left to close).

    Args:
        url: ``sasl.oauthbearer.token.endpoint.url`` (``https://``, or ``http://`` for tests).
        client_id: ``sasl.oauthbearer.client.id``.
        client_secret: ``sasl.oauthbearer.client.secret`` (never shown).
        scope: ``sasl.oauthbearer.scope``, or ``None``.
        timeout_s: time limit of one request, default 10 s.

    Raises:
        InvalidConfigError: aiohttp is not installed (``key``
            ``sasl.oauthbearer.token.endpoint.url``; the message names the ``oauth`` extra).
    """

    def __init__(
        self,
        url: str,
        client_id: str,
        client_secret: str,
        scope: str | None = None,
        *,
        timeout_s: float = 10.0,
    ) -> None:
        try:
            import aiohttp  # noqa: F401 - the extra's presence, checked at configuration
        except ImportError:
            raise InvalidConfigError(
                "sasl.oauthbearer.token.endpoint.url",
                f"the OIDC client-credentials flow needs aiohttp: {OAUTH_EXTRA_HINT}",
            ) from None
        self.url = url
        self._client_id = client_id
        self._client_secret = client_secret
        self._scope = scope
        self._timeout_s = timeout_s

    @property
    def description(self) -> str:
        """``token endpoint <url>`` (user info stripped from the URL) for messages."""
        parts = urllib.parse.urlsplit(self.url)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        return f"token endpoint {urllib.parse.urlunsplit(parts._replace(netloc=netloc))}"

    async def token(self) -> str:
        """A new access token.

        Raises:
            TokenSourceError: the request failed, or the answer holds no token.
        """
        return (await self.fetch_token())[0]

    async def fetch_token(self) -> tuple[str, float | None]:
        """A new access token and its lifetime in seconds (``expires_in``, or ``None``).

        Raises:
            TokenSourceError: the endpoint could not be reached or timed out (retryable),
                answered with an HTTP error (retryable for 408, 429 and 5xx; the OAuth
                ``error`` and ``error_description`` quoted), or answered without an
                ``access_token``.
        """
        import aiohttp

        quote = urllib.parse.quote_plus
        credentials = f"{quote(self._client_id)}:{quote(self._client_secret)}".encode()
        form = {"grant_type": "client_credentials"}
        if self._scope:
            form["scope"] = self._scope
        headers = {
            "Authorization": f"Basic {base64.b64encode(credentials).decode('ascii')}",
            "Accept": "application/json",
            "Cache-Control": "no-cache",
        }
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s)) as s,
                s.post(self.url, data=form, headers=headers) as response,
            ):
                status = response.status
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise TokenSourceError(f"{self.description}: {type(e).__name__}: {e}") from None
        if status not in (200, 201):
            raise TokenSourceError(
                f"{self.description} answered HTTP {status}: {self._error_text(text)}",
                retryable=status >= 500 or status in _RETRYABLE_HTTP,
            )
        try:
            body = json.loads(text)
            token = body["access_token"]
        except (ValueError, KeyError, TypeError):
            raise TokenSourceError(
                f"{self.description} answered without an access_token", retryable=False
            ) from None
        if not isinstance(token, str) or not token:
            raise TokenSourceError(
                f"{self.description} answered an empty access_token", retryable=False
            )
        expires_in = body.get("expires_in")
        try:
            lifetime = float(expires_in) if expires_in is not None else None
        except (TypeError, ValueError):
            lifetime = None
        return token, lifetime

    def _error_text(self, text: str) -> str:
        """The OAuth error of an answer (RFC 6749 §5.2), or its start; no secret in it."""
        try:
            body = json.loads(text)
            error = str(body.get("error", ""))
            detail = str(body.get("error_description", ""))
            found = f"{error}: {detail}" if error and detail else error or detail
        except (ValueError, AttributeError):
            found = ""
        found = found or " ".join(text.split())[:200] or "(no body)"
        return found.replace(self._client_secret, "***") if self._client_secret else found

    def __repr__(self) -> str:
        return f"<ClientCredentialsSource {self.description} client {self._client_id!r}>"


class FileTokenSource:
    """Tokens read from a file (a ``file:`` token endpoint URL), read again at every refresh.

    Args:
        path: the file; its content, stripped of surrounding white space, is the token.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def description(self) -> str:
        """``token file <path>`` for messages."""
        return f"token file {self.path}"

    async def token(self) -> str:
        """The file's token.

        Raises:
            TokenSourceError: the file cannot be read or is empty (retryable: it may be
                being rewritten).
        """
        return (await self.fetch_token())[0]

    async def fetch_token(self) -> tuple[str, float | None]:
        """The file's token, with no lifetime of its own (a JWT's claims give one).

        Raises:
            TokenSourceError: the file cannot be read or is empty.
        """
        try:
            text = await asyncio.to_thread(self.path.read_text, encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
            raise TokenSourceError(f"cannot read {self.description}: {reason}") from None
        token = text.strip()
        if not token:
            raise TokenSourceError(f"{self.description} is empty")
        return token, None

    def __repr__(self) -> str:
        return f"<FileTokenSource {self.path}>"


def token_source(spec: _EndpointSpec) -> ClientCredentialsSource | FileTokenSource:
    """The source the client-credentials settings describe.

    Args:
        spec: ``KafkaSecurity.token_provider`` built from ``sasl.oauthbearer.*``.

    Returns:
        A :class:`FileTokenSource` for a ``file:`` URL, else a
        :class:`ClientCredentialsSource`.

    Raises:
        InvalidConfigError: the URL is empty, the client id or secret is missing for an
            HTTP endpoint, or aiohttp is not installed (the ``oauth`` extra).
    """
    url = spec.url
    if url.startswith("file:"):
        path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
        if not path:
            raise InvalidConfigError("sasl.oauthbearer.token.endpoint.url", "file: without a path")
        return FileTokenSource(path)
    if not url.startswith(("https://", "http://")):
        raise InvalidConfigError(
            "sasl.oauthbearer.token.endpoint.url",
            "must be an http(s):// URL (or file: holding a token)",
        )
    if not spec.client_id or not spec.client_secret:
        raise InvalidConfigError(
            "sasl.oauthbearer.client.id",
            "the client-credentials flow needs sasl.oauthbearer.client.id and "
            "sasl.oauthbearer.client.secret",
        )
    return ClientCredentialsSource(url, spec.client_id, spec.client_secret, spec.scope)


class RefreshingTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """A token source's tokens, cached until 80% (± jitter) of their lifetime.

    Args:
        source: an object with ``async token() -> str`` (and optionally ``extensions()``), or
            with ``async fetch_token() -> (token, lifetime in seconds or None)`` as this
            module's sources.
        attempts: tries per refresh before giving up, default 5.
        backoff_ms: first pause between tries, doubled each time up to ``backoff_max_ms``.
        backoff_max_ms: the longest pause, default 10000.
        clock: the wall clock (epoch seconds), default ``time.time`` (JWT claims are epoch
            times).
        sleep: how to wait between tries, default ``asyncio.sleep``.
        rng: the random source of the jitter.

    Raises (from :meth:`token`):
        AuthenticationError: the source failed ``attempts`` times, or once in a way retrying
            cannot change (the last failure named).
    """

    def __init__(
        self,
        source: Any,
        *,
        attempts: int = 5,
        backoff_ms: int = 100,
        backoff_max_ms: int = 10000,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._source = source
        self._attempts = attempts
        self._backoff_s = backoff_ms / 1000
        self._backoff_max_s = backoff_max_ms / 1000
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
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

    @property
    def refresh_at(self) -> float:
        """When the current token will be replaced, epoch seconds (0: at the next use)."""
        return self._refresh_at

    @property
    def source(self) -> Any:
        """The wrapped token source."""
        return self._source

    async def token(self) -> str:
        """The current token, fetched anew when due.

        Raises:
            AuthenticationError: the source kept failing.
        """
        async with self._lock:
            if self._token is None or self._clock() >= self._refresh_at:
                await self._refresh()
            assert self._token is not None
            return self._token

    def extensions(self) -> dict[str, str]:
        """The source's SASL extensions (KIP-342), if it has any."""
        ext = getattr(self._source, "extensions", None)
        return dict(ext()) if callable(ext) else {}

    def _describe(self) -> str:
        return str(getattr(self._source, "description", type(self._source).__name__))

    async def _fetch(self) -> tuple[Any, float | None]:
        fetch = getattr(self._source, "fetch_token", None)
        if callable(fetch):
            token, lifetime = await fetch()
            return token, lifetime
        return await self._source.token(), None

    async def _refresh(self) -> None:
        delay = self._backoff_s
        last: BaseException | None = None
        attempt = 0
        while attempt < self._attempts:
            attempt += 1
            try:
                token, lifetime = await self._fetch()
            except Exception as e:  # a user's provider may raise anything
                last = e
                log.warning(
                    "OAUTHBEARER %s failed (attempt %d of %d): %s",
                    self._describe(),
                    attempt,
                    self._attempts,
                    e if isinstance(e, TokenSourceError) else type(e).__name__,
                )
                if isinstance(e, TokenSourceError) and not e.retryable:
                    break
                if attempt < self._attempts:
                    await self._sleep(delay)
                    delay = min(delay * 2, self._backoff_max_s)
                continue
            if not isinstance(token, str) or not token:
                last = TypeError(f"token() returned {type(token).__name__}, not a token string")
                break
            self._set(token, lifetime)
            return
        tries = f"{attempt} attempt{'s' if attempt != 1 else ''}"
        raise AuthenticationError(
            "(token source)",
            "OAUTHBEARER",
            f"no token from {self._describe()} after {tries}: {type(last).__name__}: {last}",
        ) from None

    def _set(self, token: str, lifetime_s: float | None) -> None:
        self._token = token
        self.refreshes += 1
        life = token_lifetime(token)
        if life is None and lifetime_s is not None and lifetime_s > 0:
            now = self._clock()
            life = (now, now + lifetime_s)
        if life is None:
            self._refresh_at = 0.0  # unknown lifetime: ask at every authentication
            self._expires_at = 0.0
            return
        issued, expires = life
        window = REFRESH_WINDOW_FACTOR + self._rng.uniform(0, REFRESH_WINDOW_JITTER)
        self._refresh_at = issued + (expires - issued) * window
        self._expires_at = expires

    def __repr__(self) -> str:
        state = "no token" if self._token is None else f"expires {self._expires_at:.0f}"
        return f"<RefreshingTokenProvider {self._describe()} [{state}]>"


_WRAPPED: weakref.WeakKeyDictionary[Any, RefreshingTokenProvider] = weakref.WeakKeyDictionary()


def refreshing(source: Any) -> RefreshingTokenProvider:
    """``source`` as a :class:`RefreshingTokenProvider` (itself if it already is one).

    One wrapper per source (while the source lives): every connection of every client given
    the same source shares its token.

    Args:
        source: a provider with ``async token()``, or the client-credentials settings of
            ``KafkaSecurity`` (``sasl.oauthbearer.token.endpoint.url`` ...).

    Raises:
        InvalidConfigError: the source is neither, or its settings are incomplete (see
            :func:`token_source`; aiohttp missing names the ``oauth`` extra).
    """
    if isinstance(source, RefreshingTokenProvider):
        return source
    if isinstance(source, _EndpointSpec):
        found = _WRAPPED.get(source)
        if found is None:
            found = _WRAPPED[source] = RefreshingTokenProvider(token_source(source))
        return found
    if callable(getattr(source, "token", None)):
        try:
            found = _WRAPPED.get(source)
        except TypeError:  # not weak-referenceable, or unhashable
            return RefreshingTokenProvider(source)
        if found is None:
            found = _WRAPPED[source] = RefreshingTokenProvider(source)
        return found
    raise InvalidConfigError(
        "sasl.oauthbearer.token.provider",
        "must have an async token() method returning the token string, or set "
        "sasl.oauthbearer.token.endpoint.url",
    )
