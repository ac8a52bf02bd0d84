"""Why a bootstrap failed: one probe connection per bootstrap server, and the error it means.

aiokafka's ``AIOKafkaClient.bootstrap`` tries every bootstrap server and, when none works,
raises "Unable to bootstrap from ..." with each server's cause logged and dropped. A wrong
password, an untrusted certificate or a ``security.protocol`` that does not match the port
then all look alike, and all look like an unreachable cluster. :func:`diagnose_bootstrap`
opens one connection per server (all at once, together bounded by the request timeout) with
the fetch loops' connection (``fetch_connection.py``), which sets up TLS and SASL as the
shared client does but keeps each failure apart, and turns what it finds into the error that
names it:

- the TLS handshake fails: :class:`~aiozkconsumer.errors.SslAuthenticationError` with the
  reason (``certificate verify failed: ...``, ``hostname mismatch: ...``, a client
  certificate required or refused, or a port that does not speak TLS);
- SASL fails: :class:`~aiozkconsumer.errors.AuthenticationError` naming the mechanism and
  the broker's message (a wrong password, a mechanism the broker does not enable, a port
  without SASL);
- a client in the clear (``PLAINTEXT``) is answered with a TLS record, or the broker takes a
  SaslHandshake (a SASL port): :class:`~aiozkconsumer.errors.AuthenticationError` saying to
  set ``security.protocol`` (and, for SASL, the mechanisms the broker enables).

A server that cannot be reached, or that the probe finds nothing wrong with, gives no finding:
the caller keeps its :class:`~aiozkconsumer.errors.KafkaConnectionError`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka.conn import collect_hosts

from ..errors import AuthenticationError, BrokerNotAvailableError
from ..security import KafkaSecurity
from .auth import ILLEGAL_SASL_STATE, handshake_mechanisms
from .fetch_connection import FetchConnection

__all__ = ["diagnose_bootstrap", "probe_broker"]

log = logging.getLogger(__name__)

_PROBE_MECHANISM = "PLAIN"
"""What a client in the clear asks for in its SaslHandshake probe (any name would do: the
answer lists the broker's mechanisms either way)."""


async def probe_broker(
    host: str,
    port: int,
    security: KafkaSecurity,
    *,
    client_id: str,
    timeout_s: float,
    token_provider: Any = None,
) -> AuthenticationError | None:
    """Connect to one broker as ``security`` says and report what is wrong, if anything.

    With SASL the connection authenticates; without, it sends one SaslHandshake, which a
    listener without SASL refuses (``ILLEGAL_SASL_STATE``) and a SASL one answers with its
    mechanisms. One connection, closed before returning.

    Args:
        host: the broker's host.
        port: its port.
        security: the client's TLS and SASL settings.
        client_id: ``client.id`` for the request headers.
        timeout_s: time limit of the connect and of each request.
        token_provider: OAUTHBEARER's token provider (the client's shared one).

    Returns:
        The error the broker's answer means (an :class:`~aiozkconsumer.errors.
        SslAuthenticationError` for TLS), or ``None`` when the broker cannot be reached or
        nothing is wrong.
    """
    conn = FetchConnection(
        -1,
        lambda: (host, port),
        client_id,
        timeout_s,
        security=security,
        token_provider=token_provider,
    )
    broker = f"{host}:{port}"
    try:
        await conn.open()
        if security.sasl:
            return None  # authenticated: the cause is elsewhere
        code, mechanisms = await handshake_mechanisms(conn.request, _PROBE_MECHANISM)
    except AuthenticationError as e:
        return e
    except BrokerNotAvailableError as e:
        log.debug("bootstrap probe of %s: %s", broker, e)
        return None
    finally:
        conn.close()
    if code == ILLEGAL_SASL_STATE:
        return None  # a listener without SASL, as configured
    protocol = "SASL_SSL" if security.tls else "SASL_PLAINTEXT"
    return AuthenticationError(
        broker,
        None,
        f"the broker requires SASL on this port (its mechanisms: "
        f"{', '.join(mechanisms) or '(none)'}): set security.protocol={protocol} and "
        f"sasl.mechanism to one of them, with its credentials",
    )


async def diagnose_bootstrap(
    bootstrap_servers: str,
    security: KafkaSecurity,
    *,
    client_id: str,
    timeout_s: float,
    token_provider: Any = None,
) -> AuthenticationError | None:
    """Probe every bootstrap server at once (:func:`probe_broker`) and return the first
    finding, in the order the servers are given.

    Args:
        bootstrap_servers: ``host:port[,host:port]``.
        security: the client's TLS and SASL settings.
        client_id: ``client.id`` for the request headers.
        timeout_s: time limit of the whole diagnosis (the request timeout).
        token_provider: OAUTHBEARER's token provider.

    Returns:
        The error to raise instead of "could not reach", or ``None`` when no server gave a
        finding (unreachable, or nothing wrong the probe can see).
    """
    hosts = [(str(h), int(p)) for h, p, _ in collect_hosts(bootstrap_servers, randomize=False)]
    tasks = [
        asyncio.ensure_future(
            probe_broker(
                host,
                port,
                security,
                client_id=client_id,
                timeout_s=timeout_s,
                token_provider=token_provider,
            )
        )
        for host, port in hosts
    ]
    try:
        await asyncio.wait(tasks, timeout=timeout_s)
    finally:
        # A probe still waiting (a server that does not answer) gives no finding.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is None:
            finding = task.result()
            if finding is not None:
                return finding
    return None
