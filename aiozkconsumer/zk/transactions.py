"""ZooKeeper transactions and ``multiRead`` on the wire: the answers read back as data.

``ZkClient.multi`` sends a transaction of ``ops.py``'s operations and ``judge_transaction``
reads its per-operation results as a ``MultiResult``; ``ZkClient.get_many`` sends a
``multiRead`` (ZooKeeper 3.6+, which aiozk 0.32 lacks: ``MultiReadRequest``) and
``read_results`` reads its answer. No I/O here.
"""

from __future__ import annotations

from typing import Any

from aiozk import exc as zk_exc
from aiozk import protocol as zk_protocol

from ..errors import (
    ZookeeperBadVersionError,
    ZookeeperError,
    ZookeeperNodeExistsError,
    ZookeeperNoNodeError,
)
from .error_map import map_zk_errors
from .ops import Check, Create, Delete, MultiResult, Op, SetData

__all__ = [
    "MAX_READS_PER_REQUEST",
    "MULTI_READ_SINCE",
    "MultiReadRequest",
    "judge_transaction",
    "read_results",
]

_OP_NAMES: dict[type, str] = {Create: "create", SetData: "write", Delete: "delete", Check: "check"}
"""How a ``NoAuth`` message names each kind of operation."""


class MultiReadRequest(zk_protocol.TransactionRequest):  # type: ignore[misc]  # untyped
    """ZooKeeper's ``multiRead`` (3.6+): reads answered together, each on its own (a missing
    node fails only its own read). aiozk 0.32 does not have it; its wire format is the
    transaction's, with another opcode."""

    opcode = 22


class MultiReadResponse(zk_protocol.TransactionResponse):  # type: ignore[misc]  # untyped
    opcode = 22  # registered in aiozk's response table by its metaclass


MULTI_READ_SINCE = (3, 6, 0)
"""The first ZooKeeper version that answers ``multiRead``."""

MAX_READS_PER_REQUEST = 500
"""At most this many reads go into one ``multiRead`` (a request of a few hundred bytes each
at most, well within the server's 1 MiB ``jute.maxbuffer``)."""


def read_results(
    paths: list[str], results: list[Any], auth_scheme: str | None
) -> list[tuple[bytes, Any] | None]:
    """A ``multiRead``'s answer as per path ``(data, stat)`` or ``None`` (no node).

    Raises:
        ZookeeperError: the answer's length is not the request's, or a read failed otherwise
            than for a missing node (its translated error: ``ZookeeperAuthError``, ...).
    """
    if len(results) != len(paths):
        raise ZookeeperError(f"ZooKeeper answered {len(paths)} reads with {len(results)} results")
    out: list[tuple[bytes, Any] | None] = []
    for path, result in zip(paths, results, strict=True):
        if isinstance(result, zk_exc.NoNode):
            out.append(None)
        elif isinstance(result, Exception):
            with map_zk_errors(path, op="read", auth_scheme=auth_scheme):
                raise result
        else:
            out.append((result.data or b"", result.stat))
    return out


def judge_transaction(
ops: tuple[Op, ...], results: list[Any], auth_scheme: str | None
) -> MultiResult:
    """A transaction's answer (each operation's result) as a :class:`MultiResult`.

    Sent as is rather than by aiozk's Transaction.commit, which drops the result of each
    failed operation: a ``NoAuth`` would look like any other failure.
    """
    if len(results) != len(ops):
        raise ZookeeperError(
            f"ZooKeeper answered a transaction of {len(ops)} operations with "
            f"{len(results)} results"
        )
    for i, (op, result) in enumerate(zip(ops, results, strict=True)):
        if not isinstance(result, zk_exc.ResponseError) or isinstance(
            result, (zk_exc.RolledBack, zk_exc.RuntimeInconsistency)
        ):
            continue
        what = _OP_NAMES[type(op)]
        try:
            with map_zk_errors(op.path, op=what, auth_scheme=auth_scheme):
                raise result
        except (ZookeeperNoNodeError, ZookeeperNodeExistsError, ZookeeperBadVersionError) as e:
            return MultiResult(ops=ops, failed_at=i, error=e)
    if any(isinstance(result, Exception) for result in results):
        raise ZookeeperError(f"ZooKeeper refused a transaction on {ops[0].path}: {results}")
    versions = tuple(
        int(result.stat.version) if isinstance(op, SetData) else None
        for op, result in zip(ops, results, strict=True)
    )
    return MultiResult(ops=ops, versions=versions)
