"""Authenticating a Kafka connection of our own: the SASL exchange, and TLS failures explained.

:func:`authenticate` runs the SaslHandshake (v1) and SaslAuthenticate (v1) exchange (KIP-43,
KIP-152) over any request/response function, with aiokafka's own mechanisms
(``SaslPlainAuthenticator``, ``ScramAuthenticator``, ``OAuthAuthenticator``,
``SaslGSSAPIAuthenticator``, built as aiokafka's ``conn.py`` builds them), and returns the
session the broker granted: when it has a lifetime (KIP-368: ``connections.max.reauth.ms``, or
an OAUTHBEARER token's expiry), :func:`reauthentication_delay` says when to authenticate
again, as the Java client does (at 85-95% of it). The fetch loops' own connection
(``fetch_connection.py``) and the bootstrap diagnosis (``diagnose.py``) use it; aiokafka's
connections authenticate themselves.

:func:`tls_failure_reason` turns the ``ssl`` module's exceptions into a sentence naming what
is wrong (an untrusted certificate, a host name the certificate does not hold, a client
certificate the broker requires or refused, a port that does not speak TLS).

Every message names the broker and the mechanism, never a password or a token: the broker's
own error message (which never holds one) is passed on, an authenticator's failure by its
class and text (aiokafka's hold none either).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import conn as _aiokafka_conn
from aiokafka.protocol.admin import (
    SaslAuthenticateRequest_v1,
    SaslHandShakeRequest_v1,
)

from ..errors import AuthenticationError
from ..security import KafkaSecurity
from .errors import error_name

__all__ = [
    "ILLEGAL_SASL_STATE",
    "REAUTH_WINDOW",
    "UNSUPPORTED_SASL_MECHANISM",
    "Exchange",
    "SaslSession",
    "authenticate",
    "handshake_mechanisms",
    "reauthentication_delay",
    "tls_failure_reason",
]

log = logging.getLogger(__name__)

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
"""What a broker answers a SaslHandshake with on a listener that does not use SASL."""

REAUTH_WINDOW = (0.85, 0.95)
"""Share of a session's lifetime after which to re-authenticate: uniformly in this range, as
the Java client's ``SaslClientAuthenticator`` (85% for network latency and clock drift, up to
10% more of jitter so that many connections do not re-authenticate at once)."""

Exchange = Callable[[Any], Awaitable[Any]]
"""Sends one request (an aiokafka request struct at its version) on the connection being
authenticated and returns the decoded response; raises ``OSError``, ``TimeoutError`` or
``ValueError`` when the connection fails (the caller translates those)."""

# OpenSSL's verify codes for a certificate that does not hold the host connected to.
_X509_V_ERR_HOSTNAME_MISMATCH = 62
_X509_V_ERR_IP_ADDRESS_MISMATCH = 64


@dataclass(frozen=True, slots=True)
class SaslSession:
    """A SASL authentication the broker accepted.

    Attributes:
        mechanism: the mechanism (``SCRAM-SHA-512``).
        lifetime_ms: the session's lifetime the broker sent (SaslAuthenticate v1+), 0 when it
            does not expire.
        started: ``time.monotonic()`` when the exchange began (the lifetime counts from the
            broker's end of it, a little later: measuring from here is on the safe side).
        reauthenticate_at: monotonic time to authenticate again at, or ``None``.
    """

    mechanism: str
    lifetime_ms: int
    started: float
    reauthenticate_at: float | None

    @property
    def expires_at(self) -> float | None:
        """Monotonic time the broker's session ends at (``None``: never)."""
        return self.started + self.lifetime_ms / 1000 if self.lifetime_ms > 0 else None


def reauthentication_delay(lifetime_ms: int, rng: random.Random | None = None) -> float | None:
    """Seconds after authenticating to re-authenticate: 85-95% of the session's lifetime.

    As the Java client's ``SaslClientAuthenticator.ReauthInfo`` (KIP-368).

    Args:
        lifetime_ms: the session lifetime from the broker's SaslAuthenticate response.
        rng: the random source of the jitter (default the module's).

    Returns:
        Seconds, or ``None`` when ``lifetime_ms`` is 0 (the session does not expire).
    """
    if lifetime_ms <= 0:
        return None
    low, high = REAUTH_WINDOW
    return lifetime_ms / 1000 * (rng or random).uniform(low, high)


def _authenticator(security: KafkaSecurity, host: str, broker: str, token_provider: Any) -> Any:
    """aiokafka's authenticator for ``security.sasl_mechanism``, as its ``conn.py`` builds it."""
    mechanism = security.sasl_mechanism
    loop = asyncio.get_running_loop()
    if mechanism == "PLAIN":
        return _aiokafka_conn.SaslPlainAuthenticator(
            loop=loop,
            sasl_plain_password=security.sasl_password,
            sasl_plain_username=security.sasl_username,
        )
    if mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        return _aiokafka_conn.ScramAuthenticator(
            loop=loop,
            sasl_plain_password=security.sasl_password,
            sasl_plain_username=security.sasl_username,
            sasl_mechanism=mechanism,
        )
    if mechanism == "OAUTHBEARER":
        if token_provider is None:
            raise AuthenticationError(broker, mechanism, "no OAUTHBEARER token provider given")
        return _aiokafka_conn.OAuthAuthenticator(sasl_oauth_token_provider=token_provider)
    if mechanism == "GSSAPI":
        if _aiokafka_conn.gssapi is None:
            raise AuthenticationError(
                broker, mechanism, "GSSAPI needs the gssapi package (pip install gssapi)"
            )
        domain = security.sasl_kerberos_domain_name or host
        return _aiokafka_conn.SaslGSSAPIAuthenticator(
            loop=loop, principal=f"{security.sasl_kerberos_service_name}@{domain}"
        )
    raise AuthenticationError(broker, mechanism, "not a SASL mechanism this client speaks")


async def handshake_mechanisms(exchange: Exchange, mechanism: str) -> tuple[int, list[str]]:
    """Send a SaslHandshake (v1) for ``mechanism``.

    Args:
        exchange: sends a request on the connection.
        mechanism: the mechanism asked for.

    Returns:
        ``(error code, the broker's enabled mechanisms)``: 0 when the broker takes
        ``mechanism``, :data:`UNSUPPORTED_SASL_MECHANISM` when it does not, and
        :data:`ILLEGAL_SASL_STATE` on a listener without SASL.

    Raises:
        OSError, TimeoutError, ValueError: from ``exchange``.
    """
    response = await exchange(SaslHandShakeRequest_v1(mechanism))
    return int(response.error_code), list(response.enabled_mechanisms or ())


async def authenticate(
    exchange: Exchange,
    security: KafkaSecurity,
    *,
    host: str,
    broker: str,
    token_provider: Any = None,
) -> SaslSession:
    """Authenticate a connection: SaslHandshake (v1), then SaslAuthenticate (v1) rounds.

    The broker must speak SaslAuthenticate v1 (Kafka 2.2 and later), which carries the
    session's lifetime (KIP-368). The same call re-authenticates an authenticated connection.

    Args:
        exchange: sends a request on the connection and returns the decoded response.
        security: the mechanism and credentials (``security.sasl_mechanism`` is set).
        host: the broker's host name (GSSAPI's default principal domain).
        broker: ``host:port`` for messages.
        token_provider: OAUTHBEARER's token provider (aiokafka's ``AbstractTokenProvider``
            shape; the client's shared :class:`~aiozkconsumer.kafka.oauth.
            RefreshingTokenProvider`).

    Returns:
        The session the broker granted.

    Raises:
        AuthenticationError: the broker refused the credentials (its message), does not
            enable the mechanism (the ones it does are named), does not use SASL on this
            port, or the exchange failed on the client's side (no token, an answer that
            does not verify).
        OSError, TimeoutError, ValueError: the connection failed (from ``exchange``).
    """
    mechanism = security.sasl_mechanism
    if mechanism is None:
        raise AuthenticationError(broker, None, "security.protocol uses SASL but no mechanism")
    started = time.monotonic()
    code, enabled = await handshake_mechanisms(exchange, mechanism)
    if code == UNSUPPORTED_SASL_MECHANISM:
        raise AuthenticationError(
            broker,
            mechanism,
            f"the broker does not enable {mechanism}; its mechanisms are "
            f"{', '.join(enabled) or '(none)'}: set sasl.mechanism to one of them",
        )
    if code == ILLEGAL_SASL_STATE:
        raise AuthenticationError(
            broker,
            mechanism,
            "this port does not use SASL (the broker answered the SaslHandshake with "
            "ILLEGAL_SASL_STATE): set security.protocol="
            f"{security.security_protocol.removeprefix('SASL_')} for it, or use the broker's "
            "SASL port",
        )
    if code:
        raise AuthenticationError(broker, mechanism, f"SaslHandshake failed: {error_name(code)}")
    authenticator = _authenticator(security, host, broker, token_provider)
    received: bytes | None = None
    lifetime_ms = 0
    while True:
        try:
            step = await authenticator.step(received)
        except AuthenticationError as e:  # the token provider gave up
            raise AuthenticationError(broker, mechanism, e.reason) from None
        except Exception as e:  # an authenticator's check of the broker's answer
            raise AuthenticationError(
                broker,
                mechanism,
                f"the broker's answer did not verify ({type(e).__name__}: {e})",
            ) from None
        if step is None:
            if mechanism == "OAUTHBEARER" and received:
                await _fail_oauth_challenge(exchange, broker, received)
            break
        payload, _expects_answer = step
        response = await exchange(SaslAuthenticateRequest_v1(payload))
        if response.error_code:
            reason = response.error_message or error_name(response.error_code)
            raise AuthenticationError(broker, mechanism, reason)
        received = response.sasl_auth_bytes
        lifetime_ms = int(response.session_lifetime_ms or 0)
    delay = reauthentication_delay(lifetime_ms)
    log.debug(
        "authenticated to %s with %s (session lifetime %d ms)", broker, mechanism, lifetime_ms
    )
    return SaslSession(
        mechanism=mechanism,
        lifetime_ms=lifetime_ms,
        started=started,
        reauthenticate_at=None if delay is None else started + delay,
    )


async def _fail_oauth_challenge(exchange: Exchange, broker: str, challenge: bytes) -> None:
    """End an OAUTHBEARER exchange the broker answered with an error challenge.

    RFC 7628 §3.2.2: a refused token is answered with a JSON error (``{"status":
    "invalid_token"}``) and no error code yet; the client must reply ``%x01``, after which the
    broker fails the exchange with its message. (aiokafka's own ``OAuthAuthenticator`` stops
    after the token and takes the challenge for success.)

    Raises:
        AuthenticationError: always, with the broker's message and the challenge's status.
    """
    try:
        status = str(json.loads(challenge).get("status", "refused"))
    except (ValueError, AttributeError):
        status = "refused"
    response = await exchange(SaslAuthenticateRequest_v1(b"\x01"))
    reason = f"the broker refused the token (status {status})"
    message = response.error_message or ""
    if message and message != challenge.decode("utf-8", "replace"):
        reason += f": {message}"
    raise AuthenticationError(broker, "OAUTHBEARER", reason)


def tls_failure_reason(
    exc: BaseException | None, host: str, *, handshake: bool = False
) -> str | None:
    """What a TLS failure means, in words, or ``None`` when ``exc`` is not one.

    Looks at ``exc`` and its causes (an ``ssl`` error wrapped in a ``ConnectionError``).

    Args:
        exc: what a connect or a read raised.
        host: the host connected to (named in a host name mismatch).
        handshake: ``exc`` ended a TLS handshake after the TCP connection was made: a reset
            or an end of stream then means the port does not speak TLS (a Kafka port that
            does not reads the ClientHello as an impossible request size and hangs up).

    Returns:
        ``"certificate verify failed: ..."``, ``"hostname mismatch: ..."``, ``"the broker
        requires a client certificate ..."``, ``"this port does not speak TLS ..."`` and the
        like; ``None`` for a failure that is not about TLS.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        reason = _tls_reason(exc, host, handshake)
        if reason is not None:
            return reason
        if handshake and isinstance(exc, ConnectionResetError | BrokenPipeError | EOFError):
            return _NOT_TLS
        exc = exc.__cause__ or exc.__context__
    return None


def _tls_reason(exc: BaseException, host: str, handshake: bool) -> str | None:
    if isinstance(exc, ssl.SSLCertVerificationError):
        message = exc.verify_message or getattr(exc, "reason", None) or str(exc)
        if exc.verify_code in (_X509_V_ERR_HOSTNAME_MISMATCH, _X509_V_ERR_IP_ADDRESS_MISMATCH):
            return (
                f"hostname mismatch: the broker's certificate is not valid for {host!r} "
                f"({message}); connect by a name the certificate holds"
            )
        return (
            f"certificate verify failed: {message} (is ssl.cafile the CA that signed the "
            f"broker's certificate?)"
        )
    if not isinstance(exc, ssl.SSLError):
        return None
    reason = str(getattr(exc, "reason", None) or exc)
    # With TLS 1.3 the broker checks the client's certificate after the client has finished
    # its handshake: its alert comes with the answer to the first request.
    if "CERTIFICATE_REQUIRED" in reason:
        return (
            f"the broker requires a client certificate (mutual TLS; {reason}): set "
            f"ssl.certfile and ssl.keyfile"
        )
    if any(a in reason for a in ("UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_UNKNOWN")):
        return (
            f"the broker refused the client certificate, or wants one and none was sent "
            f"(mutual TLS; {reason}): check ssl.certfile and ssl.keyfile"
        )
    if not handshake:
        return None  # e.g. an end of stream without close_notify: a dropped connection
    if "WRONG_VERSION_NUMBER" in reason or isinstance(exc, ssl.SSLEOFError):
        return _NOT_TLS
    return f"TLS handshake failed: {reason}"


_NOT_TLS = (
    "this port does not speak TLS (the broker closed the connection during the TLS "
    "handshake): set security.protocol=PLAINTEXT or SASL_PLAINTEXT for it, or use the "
    "broker's TLS port"
)
