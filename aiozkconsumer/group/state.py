"""The member state machine of a Kafka-coordinated member: pure, no I/O.

In the style of h11's ``_state.py``: the states, the events, one transition table, and an
event the table does not allow in the current state raises :class:`IllegalTransition`
instead of leaving the member in a state no code expects. Both Kafka members (the classic
protocol's and KIP-848's) drive one; the coordinators keep their data (member id,
generation or epoch, the assignment) and ask the machine what the member may do now
(heartbeat? commit? rejoin?).

::

    UNJOINED --join--> JOINING --joined--> JOINED --assignment_given--> RECONCILING
       ^                  |  ^                |                            |
       |               gave_up|            synced                        synced
       +------------------+  |                v                            v
                             +---join----- STABLE <---------------------- (STABLE)
    STABLE --assignment_given | reconcile--> RECONCILING (KIP-848: no rejoin)
    JOINING / JOINED / RECONCILING / STABLE --fenced--> FENCED --join--> JOINING
    UNJOINED / STABLE / FENCED --poll_expired--> STALE --join--> JOINING
    any but LEFT --leave--> LEAVING --left--> LEFT

The classic protocol's ``JoinGroup`` answer is ``joined`` and its ``SyncGroup`` answer
``assignment_given``; KIP-848's first heartbeat answer (an epoch) is ``joined`` and each
answer with an assignment ``assignment_given``; a KIP-848 member that is in the group and
rebalances (a new assignment, a changed subscription) starts with ``reconcile``. ``synced``
is the assignment taken (owned, fetching). A rebalance that gives up is ``gave_up``: a
member that never joined is UNJOINED again; one that joined keeps heartbeating (STABLE), so
the coordinator tells it what next. A member whose reader held what it was handed past
``max.poll.interval.ms`` is ``poll_expired``: it gave its partitions up and left (STALE) and
joins again when the reader asks for records again (:func:`check_poll_interval` decides).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

# The poll timer is the rule of both coordinators; it lives beside the readers it judges.
from ..queues import PollCheck, check_poll_interval

__all__ = [
    "TRANSITIONS",
    "IllegalTransition",
    "MemberEvent",
    "MemberState",
    "MemberStateMachine",
    "PollCheck",
    "check_poll_interval",
]


class MemberState(enum.Enum):
    """Where a member is in its group (the Java client's ``MemberState``, simplified)."""

    UNJOINED = "unjoined"
    """Not a member: before the first join, after giving up a join, after leaving failed."""
    JOINING = "joining"
    """A join is under way (JoinGroup, or a heartbeat at epoch 0)."""
    JOINED = "joined"
    """The coordinator took the member in; no assignment given yet."""
    RECONCILING = "reconciling"
    """An assignment is being taken: partitions released and acquired."""
    STABLE = "stable"
    """A member with its assignment taken: heartbeats flow, commits carry its generation."""
    FENCED = "fenced"
    """The coordinator no longer knows this membership: nothing may be handed out or
    committed until it rejoins."""
    STALE = "stale"
    """Left the group because a reader held what it was handed past ``max.poll.interval.ms``
    (the Java client's ``MemberState.STALE``): owns nothing, hands nothing out, commits
    nothing, and joins again once the reader asks for records again."""
    LEAVING = "leaving"
    """LeaveGroup (or the heartbeat at epoch -1) is under way."""
    LEFT = "left"
    """Gone for good (the connector is closing)."""


class MemberEvent(enum.Enum):
    """What happens to a member."""

    JOIN = "join"
    JOINED = "joined"
    ASSIGNMENT_GIVEN = "assignment_given"
    RECONCILE = "reconcile"
    SYNCED = "synced"
    HEARTBEAT_ANSWERED = "heartbeat_answered"
    FENCED = "fenced"
    GAVE_UP = "gave_up"
    POLL_EXPIRED = "poll_expired"
    LEAVE = "leave"
    LEFT = "left"


S = MemberState
E = MemberEvent

TRANSITIONS: Mapping[MemberState, Mapping[MemberEvent, MemberState]] = {
    S.UNJOINED: {
        E.JOIN: S.JOINING,
        # A classic member that gave a rejoin up still heartbeats with its generation.
        E.HEARTBEAT_ANSWERED: S.UNJOINED,
        E.FENCED: S.FENCED,
        E.POLL_EXPIRED: S.STALE,
        E.LEAVE: S.LEAVING,
    },
    S.JOINING: {
        E.JOIN: S.JOINING,  # the next attempt of the same rebalance
        E.JOINED: S.JOINED,
        E.FENCED: S.FENCED,
        E.GAVE_UP: S.UNJOINED,
        E.HEARTBEAT_ANSWERED: S.JOINING,  # a heartbeat sent before the rebalance began
        E.LEAVE: S.LEAVING,
    },
    S.JOINED: {
        E.JOIN: S.JOINING,  # the classic protocol: SyncGroup failed, join again
        E.ASSIGNMENT_GIVEN: S.RECONCILING,
        E.SYNCED: S.STABLE,  # KIP-848: nothing to take yet
        E.HEARTBEAT_ANSWERED: S.JOINED,
        E.FENCED: S.FENCED,
        E.GAVE_UP: S.STABLE,
        E.LEAVE: S.LEAVING,
    },
    S.RECONCILING: {
        E.JOIN: S.JOINING,
        E.ASSIGNMENT_GIVEN: S.RECONCILING,  # a newer assignment while taking one
        E.RECONCILE: S.RECONCILING,
        E.SYNCED: S.STABLE,
        E.HEARTBEAT_ANSWERED: S.RECONCILING,
        E.FENCED: S.FENCED,
        E.GAVE_UP: S.STABLE,
        E.LEAVE: S.LEAVING,
    },
    S.STABLE: {
        E.JOIN: S.JOINING,
        E.ASSIGNMENT_GIVEN: S.RECONCILING,
        E.RECONCILE: S.RECONCILING,
        E.HEARTBEAT_ANSWERED: S.STABLE,
        E.FENCED: S.FENCED,
        E.POLL_EXPIRED: S.STALE,
        E.LEAVE: S.LEAVING,
    },
    S.FENCED: {
        E.JOIN: S.JOINING,
        E.FENCED: S.FENCED,
        E.GAVE_UP: S.FENCED,
        E.HEARTBEAT_ANSWERED: S.FENCED,  # sent before the fence was known: ignored
        E.POLL_EXPIRED: S.STALE,
        E.LEAVE: S.LEAVING,
    },
    S.STALE: {
        E.JOIN: S.JOINING,  # the reader asked for records again
        # A heartbeat sent before the member left may still be answered (or fenced).
        E.HEARTBEAT_ANSWERED: S.STALE,
        E.FENCED: S.STALE,
        E.LEAVE: S.LEAVING,
    },
    # A heartbeat sent before the member began to leave may still be answered (or fenced).
    S.LEAVING: {E.LEFT: S.LEFT, E.HEARTBEAT_ANSWERED: S.LEAVING, E.FENCED: S.LEAVING},
    S.LEFT: {E.HEARTBEAT_ANSWERED: S.LEFT, E.FENCED: S.LEFT},
}
"""``{state: {event: next state}}``; an event missing from a state's row is illegal there."""


class IllegalTransition(RuntimeError):
    """An event the member's current state does not allow: a bug in the coordinator.

    Attributes:
        state: the state the member was in.
        event: the event.
    """

    def __init__(self, state: MemberState, event: MemberEvent) -> None:
        allowed = ", ".join(e.value for e in TRANSITIONS[state]) or "none"
        super().__init__(
            f"event {event.value!r} is not allowed in member state {state.value!r} "
            f"(allowed: {allowed})"
        )
        self.state = state
        self.event = event


class MemberStateMachine:
    """A member's state, moved only by :meth:`handle` along :data:`TRANSITIONS`.

    Attributes:
        state: the current state (``UNJOINED`` at first).
        history: the last transitions, ``(event, new state)``, oldest first (at most 32).
    """

    __slots__ = ("history", "state")

    def __init__(self) -> None:
        self.state = MemberState.UNJOINED
        self.history: list[tuple[MemberEvent, MemberState]] = []

    def handle(self, event: MemberEvent) -> MemberState:
        """Move on by ``event``; returns the new state.

        Raises:
            IllegalTransition: ``event`` is not allowed in the current state (the state
                stays as it was).
        """
        try:
            new = TRANSITIONS[self.state][event]
        except KeyError:
            raise IllegalTransition(self.state, event) from None
        self.state = new
        self.history.append((event, new))
        del self.history[:-32]
        return new

    @property
    def may_heartbeat(self) -> bool:
        """Whether the heartbeat task sends now: a member that took its assignment."""
        return self.state is MemberState.STABLE

    @property
    def is_member(self) -> bool:
        """Whether the coordinator counts this member in (joined, not fenced, not leaving)."""
        return self.state in (S.JOINED, S.RECONCILING, S.STABLE)

    @property
    def rebalancing(self) -> bool:
        """Whether a join or a reconciliation is under way."""
        return self.state in (S.JOINING, S.JOINED, S.RECONCILING)

    def __repr__(self) -> str:
        return f"<MemberStateMachine {self.state.value}>"
