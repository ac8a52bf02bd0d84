"""What the group tools read of a group's nodes: a live member, a node that does not parse.

:class:`MemberInfo` is a registration node read (``/consumers/<g>/ids/<consumer id>``);
:class:`MalformedNode` is a registration, owner or offset node that does not parse, reported
beside what did rather than failing the whole group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import MalformedZookeeperDataError
from ...zk import layout

__all__ = ["MalformedNode", "MemberInfo"]


@dataclass(frozen=True)
class MemberInfo:
    """A live member of a group (``/consumers/<g>/ids/<consumer id>``).

    Attributes:
        consumer_id: the member's consumer id string.
        registration: its decoded registration; ``None`` if the node vanished while read.
    """

    consumer_id: str
    registration: layout.Registration | None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        reg = self.registration
        return {
            "consumer_id": self.consumer_id,
            "pattern": None if reg is None else reg.pattern,
            "subscription": None if reg is None else dict(reg.subscription),
            "timestamp_ms": None if reg is None else reg.timestamp_ms,
        }


@dataclass(frozen=True)
class MalformedNode:
    """A node of a group that does not parse: reported instead of failing the whole group.

    Attributes:
        path: the node's path.
        reason: why it does not parse, with the data read.
    """

    path: str
    reason: str

    @classmethod
    def from_error(cls, error: MalformedZookeeperDataError, path: str) -> MalformedNode:
        """The node an error of :mod:`aiozkconsumer.zk.layout` names, without the error's
        ``malformed data in ZooKeeper node <path>:`` preamble."""
        text = str(error)
        preamble = f"malformed data in ZooKeeper node {error.path}: "
        return cls(path, text[len(preamble) :] if text.startswith(preamble) else text)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"path": self.path, "reason": self.reason}
