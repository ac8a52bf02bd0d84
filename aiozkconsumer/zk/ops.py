"""ZooKeeper operations as data: what one transaction (``multi``) is made of, and how it ended.

The pure plans (owner-node claims and deletes, fencing-token bumps, fenced offset commits)
return lists of these; ``ZkClient.multi`` sends them as one ZooKeeper ``multi`` request, which
the server applies whole or not at all, and answers with a :class:`MultiResult`. Pure: no
I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import (
    ZookeeperBadVersionError,
    ZookeeperNodeExistsError,
    ZookeeperNoNodeError,
)

__all__ = [
    "MAX_TRANSACTION_PARTITIONS",
    "Check",
    "Create",
    "Delete",
    "MultiFailure",
    "MultiResult",
    "Op",
    "SetData",
]


MAX_TRANSACTION_PARTITIONS = 500
"""At most this many partitions go into one ZooKeeper transaction (two operations each at
most, a few hundred bytes with the longest topic names): well within the server's request
limit (``jute.maxbuffer``, 1 MiB). More are claimed, bumped or deleted one request each."""


@dataclass(frozen=True)
class Create:
    """Create a node (a persistent one unless ``ephemeral``); fails with ``NodeExists``, or
    ``NoNode`` when its parent is missing (a multi creates no parents)."""

    path: str
    data: bytes
    ephemeral: bool = False


@dataclass(frozen=True)
class Delete:
    """Delete a node, only at ``version`` (``-1``: any); fails with ``NoNode`` or
    ``BadVersion``."""

    path: str
    version: int = -1


@dataclass(frozen=True)
class SetData:
    """Write an existing node, only at ``version`` (``-1``: any); fails with ``NoNode`` or
    ``BadVersion``. Applied, it gives the node's new version."""

    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True)
class Check:
    """Require a node to have ``version`` (of its data); fails with ``NoNode`` or
    ``BadVersion``. Changes nothing."""

    path: str
    version: int


Op = Create | Delete | SetData | Check

MultiFailure = ZookeeperNoNodeError | ZookeeperNodeExistsError | ZookeeperBadVersionError
"""The errors a transaction's operation can meet that its plan acts on; any other (an ACL, the
connection, the session) is raised by ``ZkClient.multi`` itself."""


@dataclass(frozen=True)
class MultiResult:
    """How one transaction ended: every operation applied, or none.

    Attributes:
        ops: the operations, in the order sent.
        versions: when applied, per operation, the node's new version for a
            :class:`SetData` (``None`` for the others); empty when it failed.
        failed_at: the index in ``ops`` of the operation that failed (nothing was applied),
            or ``None`` when the transaction was applied.
        error: that operation's error, naming its node: ``ZookeeperNoNodeError``,
            ``ZookeeperNodeExistsError`` or ``ZookeeperBadVersionError``, as the same
            operation alone would raise; ``None`` when applied.
    """

    ops: tuple[Op, ...]
    versions: tuple[int | None, ...] = ()
    failed_at: int | None = None
    error: MultiFailure | None = None

    @property
    def applied(self) -> bool:
        """Whether every operation was applied."""
        return self.failed_at is None

    @property
    def failed_op(self) -> Op | None:
        """The operation that failed, or ``None``."""
        return None if self.failed_at is None else self.ops[self.failed_at]

    def raise_for_failure(self) -> None:
        """Raise the failed operation's error (nothing when the transaction was applied).

        Raises:
            ZookeeperNoNodeError, ZookeeperNodeExistsError, ZookeeperBadVersionError: as
                :attr:`error`.
        """
        if self.error is not None:
            raise self.error
