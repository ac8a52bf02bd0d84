"""The group tools' two refusals: a group that does not exist, a group that has live members.

Both are :class:`~aiozkconsumer.errors.ConsumerError` subclasses, raised by
:class:`~aiozkconsumer.tools.GroupAdmin` and built by the pure judges of
:mod:`aiozkconsumer.tools.admin.judges`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import ConsumerError

__all__ = ["GroupActiveError", "UnknownGroupError"]


class UnknownGroupError(ConsumerError, LookupError):
    """A consumer group has no node under ``/consumers``.

    Attributes:
        group: the group id.
    """

    def __init__(self, group: str, message: str | None = None) -> None:
        super().__init__(message or f"consumer group '{group}' does not exist")
        self.group = group


class GroupActiveError(ConsumerError):
    """A group tool refused to change a group that has live members (``/consumers/<g>/ids``).

    Attributes:
        group: the group id.
        members: the live members' consumer ids.
    """

    def __init__(self, group: str, members: Sequence[str], message: str) -> None:
        super().__init__(message)
        self.group = group
        self.members = tuple(members)
