"""Reading the brokers' request logs (``kafka.request.logger`` at DEBUG): which requests a
broker served and for whom. Plain file reads, no server: tested on written files.

One line per completed request; Kafka 3.9 and 4.x both end the line's JSON with the
connection's ``securityProtocol``, ``principal`` and ``listener``. Behind
:meth:`LocalCluster.requests_logged
<aiozkconsumer.testing.cluster.LocalCluster.requests_logged>` and
:meth:`~aiozkconsumer.testing.cluster.LocalCluster.principals_seen`.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

__all__ = ["ConnectionsLogged", "count_requests", "principals"]

# The connection of a completed request. The last match of a line is the one: a request's
# own body may hold "principal" fields too (ACL requests).
_CONNECTION_RE = re.compile(
    r'"securityProtocol":"[A-Z_]+","principal":"([^"]*)","listener":"([^"]*)"'
)


def count_requests(request_log: Path, api_key: int, client_id: str | None = None) -> int:
    """How many requests of one API a request log holds (0 if there is no log yet).

    Args:
        request_log: the broker's request log.
        api_key: the request's API key (1: Fetch).
        client_id: only requests with this ``client.id`` in their header.
    """
    head = f'"requestApiKey":{int(api_key)},'
    client = None if client_id is None else f'"clientId":{json.dumps(client_id)}'
    n = 0
    with contextlib.suppress(FileNotFoundError), request_log.open(encoding="utf-8") as f:
        for line in f:
            if head in line and (client is None or client in line):
                n += 1
    return n


class ConnectionsLogged:
    """The ``(listener, principal)`` pairs of request logs, read incrementally.

    The logs only grow and are polled (``wait_for_principal``), so each is read from where
    the last read stopped; a line still being written is read next time.
    """

    def __init__(self) -> None:
        # Request log -> (bytes parsed so far, the pairs in them).
        self._read: dict[Path, tuple[int, set[tuple[str, str]]]] = {}

    def __repr__(self) -> str:
        return f"<ConnectionsLogged [{len(self._read)} logs]>"

    def read(self, request_log: Path) -> set[tuple[str, str]]:
        """The pairs in ``request_log`` so far (empty if the broker logged nothing yet)."""
        offset, seen = self._read.get(request_log, (0, set()))
        try:
            with request_log.open("rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:  # the broker has not logged a request yet
            return seen
        complete = data.rfind(b"\n") + 1  # a line being written is read next time
        for line in data[:complete].decode("utf-8", errors="replace").splitlines():
            matches = _CONNECTION_RE.findall(line)
            if matches:
                principal, where = matches[-1]
                seen.add((where, principal))
        self._read[request_log] = (offset + complete, seen)
        return seen


def principals(connections: Iterable[tuple[str, str]], listener: str | None = None) -> set[str]:
    """The principals of ``(listener, principal)`` pairs, of one listener (any case) or all."""
    wanted = None if listener is None else listener.upper()
    return {
        principal for where, principal in connections if wanted is None or where.upper() == wanted
    }
