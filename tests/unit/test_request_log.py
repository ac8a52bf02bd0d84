"""Reading the brokers' request logs on their own: counting requests by API and client, and
the connections' principals read incrementally (lines written here, no broker)."""

from __future__ import annotations

import json
from pathlib import Path

from aiozkconsumer.testing._request_log import ConnectionsLogged, count_requests, principals


def line(api_key: int, client_id: str, principal: str, listener: str, *, body: str = "") -> str:
    """A completed request as ``kafka.request.logger`` writes it (the fields that matter)."""
    header = {"requestApiKey": api_key, "requestApiVersion": 12, "clientId": client_id}
    connection = f'"securityProtocol":"SASL_SSL","principal":"{principal}","listener":"{listener}"'
    return (
        f'[2026-01-01 00:00:00,000] DEBUG Completed request:{{"isForwarded":false,'
        f'"requestHeader":{json.dumps(header, separators=(",", ":"))},"request":{{{body}}},'
        f"{connection}}}\n"
    )


def test_requests_are_counted_by_api_and_client(tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    log.write_text(
        line(1, "consumer-1", "User:alice", "SASL_SSL")
        + line(1, "broker-1-fetcher-0", "User:ANONYMOUS", "PLAINTEXT")
        + line(3, "consumer-1", "User:alice", "SASL_SSL")
        + line(10, "consumer-1", "User:alice", "SASL_SSL")
    )
    assert count_requests(log, 1) == 2
    assert count_requests(log, 1, "consumer-1") == 1
    assert count_requests(log, 3, "broker-1-fetcher-0") == 0
    assert count_requests(log, 10) == 1  # not counted as API 1
    assert count_requests(tmp_path / "none.log", 1) == 0


def test_connections_are_read_as_the_log_grows(tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    logged = ConnectionsLogged()
    assert logged.read(log) == set()  # no log yet
    first = line(3, "c", "User:ANONYMOUS", "PLAINTEXT")
    second = line(3, "c", "User:alice", "SASL_SSL")
    log.write_text(first + second[:40])  # the second line is still being written
    assert logged.read(log) == {("PLAINTEXT", "User:ANONYMOUS")}
    with log.open("a") as f:
        f.write(second[40:])
    assert logged.read(log) == {("PLAINTEXT", "User:ANONYMOUS"), ("SASL_SSL", "User:alice")}
    assert "1 logs" in repr(logged)


def test_the_last_connection_of_a_line_is_the_one(tmp_path: Path) -> None:
    # An ACL request's own body holds principal fields of the same shape.
    body = '"securityProtocol":"SSL","principal":"User:mallory","listener":"SSL"'
    log = tmp_path / "requests.log"
    log.write_text(line(30, "admin", "User:admin", "SASL_PLAINTEXT", body=body))
    assert ConnectionsLogged().read(log) == {("SASL_PLAINTEXT", "User:admin")}


def test_principals_of_one_listener_in_any_case() -> None:
    pairs = [("SASL_SSL", "User:alice"), ("PLAINTEXT", "User:ANONYMOUS"), ("MTLS", "User:alice")]
    assert principals(pairs) == {"User:alice", "User:ANONYMOUS"}
    assert principals(pairs, "sasl_ssl") == {"User:alice"}
    assert principals(pairs, "SSL") == set()
