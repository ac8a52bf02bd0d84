"""OAUTHBEARER tokens (``kafka/oauth.py``): refresh timing, retries, the client-credentials flow.

The refresh rules run on a fake wall clock and a recording ``sleep``, so nothing waits; the
client-credentials flow talks to a real HTTP server on loopback (aiohttp's), which checks
what the Java client sends (form POST, HTTP Basic with form-encoded id and secret) and answers
as an OAuth 2 token endpoint does.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import sys
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from aiozkconsumer.errors import AuthenticationError, InvalidConfigError
from aiozkconsumer.kafka.oauth import (
    ClientCredentialsSource,
    FileTokenSource,
    RefreshingTokenProvider,
    TokenSourceError,
    refreshing,
    token_source,
)
from aiozkconsumer.security import _EndpointSpec

CLIENT_ID = "svc:reader"  # a colon, which HTTP Basic needs form-encoded
SECRET = "canary-s3cret/+&="


def jwt(issued: float, lifetime_s: float) -> str:
    def b64(obj: dict[str, Any]) -> str:
        raw = json.dumps(obj).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    claims = {"sub": "alice", "iat": int(issued), "exp": int(issued + lifetime_s)}
    return f"{b64({'alg': 'none'})}.{b64(claims)}."


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Sleeps:
    """A ``sleep`` that returns at once and remembers what it was asked."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


class Source:
    """Hands out the results of ``make`` in turn; an exception instance is raised."""

    def __init__(self, *results: Any) -> None:
        self.results = list(results)
        self.calls = 0

    async def token(self) -> str:
        self.calls += 1
        result = self.results.pop(0) if len(self.results) > 1 else self.results[0]
        if isinstance(result, BaseException):
            raise result
        return str(result(self.calls) if callable(result) else result)


def provider(source: Any, clock: Clock, sleeps: Sleeps | None = None) -> RefreshingTokenProvider:
    return RefreshingTokenProvider(
        source, clock=clock, sleep=sleeps or Sleeps(), rng=random.Random(3)
    )


# -- refresh timing --------------------------------------------------------------------------


async def test_a_jwt_is_reused_until_80_percent_of_its_lifetime_plus_jitter() -> None:
    clock = Clock()
    source = Source(lambda n: jwt(clock.now, 100))
    tokens = provider(source, clock)
    first = await tokens.token()
    assert source.calls == 1 and tokens.refreshes == 1
    assert clock.now + 80 <= tokens.refresh_at <= clock.now + 85
    assert tokens.expires_at == clock.now + 100
    refresh_at = tokens.refresh_at
    clock.now = refresh_at - 0.001
    assert await tokens.token() == first and source.calls == 1
    clock.now = refresh_at
    second = await tokens.token()
    assert source.calls == 2 and second != first


async def test_the_jitter_spreads_refreshes_over_five_percent() -> None:
    clock = Clock()
    points = []
    for seed in range(50):
        tokens = RefreshingTokenProvider(
            Source(jwt(clock.now, 1000)), clock=clock, rng=random.Random(seed)
        )
        await tokens.token()
        points.append(tokens.refresh_at - clock.now)
    assert all(800 <= p <= 850 for p in points)
    assert max(points) - min(points) > 25


async def test_an_opaque_token_lives_by_the_endpoints_expires_in() -> None:
    class Endpoint:
        calls = 0

        async def fetch_token(self) -> tuple[str, float | None]:
            self.calls += 1
            return f"opaque-{self.calls}", 50.0

    clock = Clock()
    source = Endpoint()
    tokens = provider(source, clock)
    assert await tokens.token() == "opaque-1"
    assert clock.now + 40 <= tokens.refresh_at <= clock.now + 42.5
    clock.now += 39
    assert await tokens.token() == "opaque-1"
    clock.now += 4
    assert await tokens.token() == "opaque-2"


async def test_a_token_without_lifetime_is_asked_for_at_every_authentication() -> None:
    clock = Clock()
    source = Source(lambda n: f"opaque-{n}")
    tokens = provider(source, clock)
    assert [await tokens.token() for _ in range(3)] == ["opaque-1", "opaque-2", "opaque-3"]


async def test_concurrent_authentications_share_one_fetch() -> None:
    release = asyncio.Event()
    calls = 0

    class Slow:
        async def token(self) -> str:
            nonlocal calls
            calls += 1
            await release.wait()
            return jwt(Clock().now, 600)

    tokens = RefreshingTokenProvider(Slow(), clock=Clock())
    waiting = [asyncio.ensure_future(tokens.token()) for _ in range(5)]
    await asyncio.sleep(0)  # let them all reach the lock
    release.set()
    got = await asyncio.gather(*waiting)
    assert len(set(got)) == 1 and calls == 1


# -- retries, backoff and the error ----------------------------------------------------------


async def test_a_failing_source_is_retried_with_doubling_backoff() -> None:
    clock, sleeps = Clock(), Sleeps()
    source = Source(OSError("down"), OSError("down"), OSError("down"), jwt(clock.now, 60))
    tokens = provider(source, clock, sleeps)
    assert await tokens.token()
    assert source.calls == 4
    assert sleeps.delays == [0.1, 0.2, 0.4]


async def test_the_backoff_is_capped() -> None:
    clock, sleeps = Clock(), Sleeps()
    tokens = RefreshingTokenProvider(
        Source(OSError("down")),
        attempts=8,
        backoff_ms=1000,
        backoff_max_ms=3000,
        clock=clock,
        sleep=sleeps,
    )
    with pytest.raises(AuthenticationError):
        await tokens.token()
    assert sleeps.delays == [1, 2, 3, 3, 3, 3, 3]


async def test_a_source_that_keeps_failing_gives_one_clear_error() -> None:
    clock, sleeps = Clock(), Sleeps()
    tokens = provider(Source(ConnectionRefusedError(111, "refused")), clock, sleeps)
    with pytest.raises(AuthenticationError) as info:
        await tokens.token()
    error = info.value
    assert type(error) is AuthenticationError and error.mechanism == "OAUTHBEARER"
    assert "no token from Source after 5 attempts" in str(error)
    assert "ConnectionRefusedError" in str(error) and "refused" in str(error)
    assert len(sleeps.delays) == 4


async def test_an_answer_retrying_cannot_change_is_not_retried() -> None:
    clock, sleeps = Clock(), Sleeps()
    source = Source(TokenSourceError("HTTP 401: invalid_client", retryable=False))
    tokens = provider(source, clock, sleeps)
    with pytest.raises(AuthenticationError, match="after 1 attempt: .*invalid_client"):
        await tokens.token()
    assert source.calls == 1 and sleeps.delays == []


# -- the client-credentials flow against a real HTTP server ---------------------------------


class TokenEndpoint:
    """An OAuth 2 token endpoint on loopback (aiohttp's server)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.url = ""

    async def handle(self, request: Any) -> Any:
        from aiohttp import web

        form = dict(await request.post())
        scheme, _, encoded = request.headers.get("Authorization", "").partition(" ")
        user, _, password = base64.b64decode(encoded).decode().partition(":")
        self.requests.append(
            {
                "scheme": scheme,
                "client_id": urllib.parse.unquote_plus(user),
                "secret": urllib.parse.unquote_plus(password),
                "form": form,
                "content_type": request.content_type,
            }
        )
        status, body = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return web.json_response(body, status=status)


@pytest.fixture
async def endpoint() -> AsyncIterator[TokenEndpoint]:
    from aiohttp import web

    server = TokenEndpoint()
    app = web.Application()
    app.router.add_post("/oauth2/token", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    server.url = f"http://{host}:{port}/oauth2/token"
    try:
        yield server
    finally:
        await runner.cleanup()


def spec(url: str, scope: str | None = "kafka.read") -> _EndpointSpec:
    return _EndpointSpec(url=url, client_id=CLIENT_ID, client_secret=SECRET, scope=scope)


async def test_the_client_credentials_grant_is_what_the_java_client_sends(
    endpoint: TokenEndpoint,
) -> None:
    endpoint.answers = [(200, {"access_token": "opaque-abc", "expires_in": 300})]
    source = token_source(spec(endpoint.url))
    assert isinstance(source, ClientCredentialsSource)
    assert await source.fetch_token() == ("opaque-abc", 300.0)
    (sent,) = endpoint.requests
    assert sent["scheme"] == "Basic"
    assert (sent["client_id"], sent["secret"]) == (CLIENT_ID, SECRET)
    assert sent["form"] == {"grant_type": "client_credentials", "scope": "kafka.read"}
    assert sent["content_type"] == "application/x-www-form-urlencoded"


async def test_no_scope_sends_none(endpoint: TokenEndpoint) -> None:
    endpoint.answers = [(200, {"access_token": "t"})]
    source = token_source(spec(endpoint.url, scope=None))
    assert await source.fetch_token() == ("t", None)
    assert endpoint.requests[0]["form"] == {"grant_type": "client_credentials"}


async def test_one_provider_per_settings_refreshing_by_expires_in(endpoint: TokenEndpoint) -> None:
    endpoint.answers = [(200, {"access_token": "opaque-1", "expires_in": 3600})]
    settings = spec(endpoint.url)
    tokens = refreshing(settings)
    assert refreshing(settings) is tokens  # aiokafka's connections and ours share it
    assert await tokens.token() == "opaque-1"
    assert await tokens.token() == "opaque-1"
    assert len(endpoint.requests) == 1
    issued = tokens.expires_at - 3600
    assert 0.8 * 3600 <= tokens.refresh_at - issued <= 0.85 * 3600


async def test_a_refused_client_is_one_error_naming_the_endpoint_and_no_secret(
    endpoint: TokenEndpoint,
) -> None:
    endpoint.answers = [
        (401, {"error": "invalid_client", "error_description": f"bad secret {SECRET}"})
    ]
    tokens = RefreshingTokenProvider(token_source(spec(endpoint.url)), sleep=Sleeps())
    with pytest.raises(AuthenticationError) as info:
        await tokens.token()
    message = str(info.value)
    assert f"token endpoint {endpoint.url} answered HTTP 401: invalid_client" in message
    assert "after 1 attempt" in message  # 401 is not retried
    assert SECRET not in message and SECRET not in repr(tokens)
    assert len(endpoint.requests) == 1


async def test_a_failing_endpoint_is_retried(endpoint: TokenEndpoint) -> None:
    endpoint.answers = [
        (503, {"error": "temporarily_unavailable"}),
        (503, {"error": "temporarily_unavailable"}),
        (200, {"access_token": "at-last", "expires_in": 60}),
    ]
    sleeps = Sleeps()
    tokens = RefreshingTokenProvider(token_source(spec(endpoint.url)), sleep=sleeps)
    assert await tokens.token() == "at-last"
    assert len(endpoint.requests) == 3 and sleeps.delays == [0.1, 0.2]


async def test_an_answer_without_a_token_is_named(endpoint: TokenEndpoint) -> None:
    endpoint.answers = [(200, {"token_type": "Bearer"})]
    with pytest.raises(TokenSourceError, match="without an access_token") as info:
        await token_source(spec(endpoint.url)).fetch_token()
    assert not info.value.retryable


async def test_an_unreachable_endpoint_is_retryable() -> None:
    import socket

    with socket.socket() as sock:  # bound, never listening
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/token"
        with pytest.raises(TokenSourceError) as info:
            await token_source(spec(url)).fetch_token()
    assert info.value.retryable and "ClientConnectorError" in str(info.value)


def test_without_aiohttp_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # import aiohttp -> ImportError
    with pytest.raises(InvalidConfigError, match=r"aiozkconsumer\[oauth\]") as info:
        token_source(spec("https://idp.example/token"))
    assert info.value.key == "sasl.oauthbearer.token.endpoint.url"


def test_incomplete_settings_are_refused() -> None:
    bare = _EndpointSpec(
        url="https://idp.example/token", client_id=None, client_secret=None, scope=None
    )
    with pytest.raises(InvalidConfigError, match="client.id"):
        token_source(bare)
    with pytest.raises(InvalidConfigError, match="http"):
        token_source(_EndpointSpec(url="ftp://x", client_id="a", client_secret="b", scope=None))


# -- file: tokens ----------------------------------------------------------------------------


async def test_a_file_token_is_read_again_at_each_refresh(tmp_path: Path) -> None:
    path = tmp_path / "token"
    clock = Clock()
    path.write_text(jwt(clock.now, 100) + "\n")
    source = token_source(
        _EndpointSpec(url=path.as_uri(), client_id=None, client_secret=None, scope=None)
    )
    assert isinstance(source, FileTokenSource)
    tokens = provider(source, clock)
    first = await tokens.token()
    assert first == path.read_text().strip()
    path.write_text(jwt(clock.now + 90, 100))  # a sidecar renews it
    clock.now += 86
    second = await tokens.token()
    assert second != first and second == path.read_text()


@pytest.mark.parametrize(
    "make", [lambda p: None, lambda p: p.write_text("  \n")], ids=["missing", "empty"]
)
async def test_a_missing_or_empty_token_file_is_named(
    tmp_path: Path, make: Callable[[Path], Any]
) -> None:
    path = tmp_path / "token"
    make(path)
    tokens = provider(FileTokenSource(path), Clock())
    with pytest.raises(AuthenticationError, match=f"token file {path}"):
        await tokens.token()
