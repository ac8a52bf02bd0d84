"""The nemesis's plan: the fault kinds and a seeded, pure scheduler of faults.

:class:`FaultScheduler` draws a chaos run's faults from ``random.Random(seed)`` alone, so the
same seed gives the same faults at the same offsets. No I/O: the runner
(:func:`aiozkconsumer.testing.chaos.run_chaos`) injects what it plans.

A run's members are coordinated by ZooKeeper or by Kafka (:class:`CoordinatorMode`); each mode
has its own fault kinds and weights (:data:`DEFAULT_WEIGHTS`, :data:`KAFKA_WEIGHTS`): the
ZooKeeper faults (session expiry, ZooKeeper restarts and link cuts) mean nothing to a
Kafka-coordinated member, whose coordinator is a broker (the group-coordinator kill, the
partition-leader kill, the link cut to one broker and the rolling restart are its faults).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiozkconsumer.testing.proxy import Direction, FaultMode

__all__ = [
    "DEFAULT_WEIGHTS",
    "KAFKA_WEIGHTS",
    "CoordinatorMode",
    "Fault",
    "FaultKind",
    "FaultScheduler",
    "weights_for",
]


class CoordinatorMode(enum.StrEnum):
    """Who coordinates a chaos run's group.

    - ``zookeeper``: ``ZookeeperConsumerConnector`` members (the original's group).
    - ``kafka-classic``: ``group.coordinator=kafka``, the classic protocol
      (JoinGroup/SyncGroup, a broker's group coordinator).
    - ``kafka-consumer``: ``group.coordinator=kafka``, ``group.protocol=consumer`` (KIP-848).
    """

    ZOOKEEPER = "zookeeper"
    KAFKA_CLASSIC = "kafka-classic"
    KAFKA_CONSUMER = "kafka-consumer"

    @property
    def kafka(self) -> bool:
        """Whether the group is coordinated by Kafka."""
        return self is not CoordinatorMode.ZOOKEEPER


class FaultKind(enum.StrEnum):
    """The faults a chaos run injects (see the package docstring).

    ZooKeeper mode: ``kill``, ``pause``, ``expire``, ``zookeeper_restart``,
    ``broker_restart``, ``zookeeper_link``, ``broker_link``. Kafka mode: ``kill``, ``pause``
    (shorter or longer than the session timeout), ``coordinator_kill`` (SIGKILL the group's
    coordinator broker, restart it later: the coordinator moves), ``leader_kill`` (SIGKILL the
    leader of a partition of the topic, restart it later), ``broker_link`` (a member's link to
    one broker, or to all), ``rolling_restart`` (every broker, one after the other).
    """

    KILL = "kill"
    PAUSE = "pause"
    EXPIRE = "expire"
    ZOOKEEPER_RESTART = "zookeeper_restart"
    BROKER_RESTART = "broker_restart"
    ZOOKEEPER_LINK = "zookeeper_link"
    BROKER_LINK = "broker_link"
    COORDINATOR_KILL = "coordinator_kill"
    LEADER_KILL = "leader_kill"
    ROLLING_RESTART = "rolling_restart"


DEFAULT_WEIGHTS: Mapping[FaultKind, float] = {
    FaultKind.KILL: 3,
    FaultKind.PAUSE: 2,
    FaultKind.EXPIRE: 3,
    FaultKind.ZOOKEEPER_RESTART: 1,
    FaultKind.BROKER_RESTART: 1,
    FaultKind.ZOOKEEPER_LINK: 3,
    FaultKind.BROKER_LINK: 2,
}
"""Relative frequency of each kind in ZooKeeper mode. Server restarts are rarer: each takes
seconds to tens of seconds of a two-core machine, and a broker restart holds the producer back
meanwhile."""

KAFKA_WEIGHTS: Mapping[FaultKind, float] = {
    FaultKind.KILL: 3,
    FaultKind.PAUSE: 3,
    FaultKind.COORDINATOR_KILL: 1.5,
    FaultKind.LEADER_KILL: 1.5,
    FaultKind.BROKER_LINK: 3,
    FaultKind.ROLLING_RESTART: 0.5,
}
"""Relative frequency of each kind in Kafka mode (one broker fault at a time: with replication
factor 3 and ``min.insync.replicas=2`` a second broker down stops every write)."""

_LINK_KINDS = frozenset({FaultKind.ZOOKEEPER_LINK, FaultKind.BROKER_LINK})
_ZOOKEEPER_ONLY = frozenset(
    {FaultKind.EXPIRE, FaultKind.ZOOKEEPER_RESTART, FaultKind.ZOOKEEPER_LINK}
)
_KAFKA_ONLY = frozenset(
    {FaultKind.COORDINATOR_KILL, FaultKind.LEADER_KILL, FaultKind.ROLLING_RESTART}
)
_BROKER_FAULTS = frozenset(
    {
        FaultKind.BROKER_RESTART,
        FaultKind.COORDINATOR_KILL,
        FaultKind.LEADER_KILL,
        FaultKind.ROLLING_RESTART,
    }
)
"""Faults on the brokers, on no member."""


def weights_for(mode: CoordinatorMode) -> Mapping[FaultKind, float]:
    """The default weights of a mode: :data:`DEFAULT_WEIGHTS` or :data:`KAFKA_WEIGHTS`."""
    return KAFKA_WEIGHTS if mode.kafka else DEFAULT_WEIGHTS


@dataclass(frozen=True)
class Fault:
    """One planned fault (an entry of a :class:`FaultScheduler` schedule).

    Attributes:
        number: its position in the schedule, from 1.
        at_s: when to inject it, in seconds from the start of the fault phase.
        kind: what it is.
        member: the consumer slot it hits (``0 .. consumers-1``); ``None`` for a link fault
            on every consumer, and for server restarts.
        broker: the broker a ``broker_restart`` restarts; the one broker a Kafka-mode
            ``broker_link`` cuts (``None``: every broker). ``coordinator_kill`` and
            ``leader_kill`` find theirs when injected.
        duration_s: how long the fault lasts before it is healed: the pause, the link cut,
            the time ZooKeeper stays down, the time a killed broker stays down. 0 for instant
            faults (kill, expire, broker restart, rolling restart).
        mode: a link fault's proxy mode (``BLACKHOLE``, ``RESET`` or ``DELAY``).
        direction: a link fault's direction: ``"up"`` (consumer to server), ``"down"`` or
            ``"both"``.
        delay_s: the latency of a ``DELAY`` link fault, seconds.
    """

    number: int
    at_s: float
    kind: FaultKind
    member: int | None = None
    broker: int | None = None
    duration_s: float = 0.0
    mode: FaultMode | None = None
    direction: Direction = "both"
    delay_s: float = 0.0

    def resources(self, consumers: int) -> frozenset[str]:
        """What the fault occupies while it runs; faults sharing one never overlap.

        A consumer process (``c<slot>``), a consumer's link to ZooKeeper or to the brokers
        (``zk-link-<slot>``, ``kafka-link-<slot>``), ZooKeeper, or a broker.

        An expiry also needs the consumer's ZooKeeper link intact: a session is never
        expired while its owner cannot hear of it (its link cut, or the process paused).
        ZooKeeper itself never expires a session sooner than a session timeout after it last
        heard from the client, and the connector's ownership lease relies on that; closing
        the session from outside while the client is cut off would be a fault no client can
        detect in time, not a fault of the consumer.

        A broker restart also occupies ZooKeeper: a Kafka 3.9 broker in ZooKeeper mode that
        loses its session while it starts exits (a fault of the trusted substrate, not of the
        consumers).
        """
        if self.kind in (FaultKind.KILL, FaultKind.PAUSE):
            return frozenset({f"c{self.member}"})
        if self.kind in _KAFKA_ONLY:
            # One broker fault at a time: two brokers down leave fewer in-sync replicas
            # than min.insync.replicas, and every write stops.
            return frozenset({"brokers"})
        if self.kind is FaultKind.EXPIRE:
            return frozenset({f"c{self.member}", f"zk-link-{self.member}", "zookeeper"})
        if self.kind is FaultKind.ZOOKEEPER_RESTART:
            return frozenset({"zookeeper"})
        if self.kind is FaultKind.BROKER_RESTART:
            return frozenset({f"broker-{self.broker}", "zookeeper"})
        prefix = "zk-link" if self.kind is FaultKind.ZOOKEEPER_LINK else "kafka-link"
        slots = range(consumers) if self.member is None else (self.member,)
        return frozenset(f"{prefix}-{slot}" for slot in slots)

    def __str__(self) -> str:
        who = "every consumer" if self.member is None else f"c{self.member}"
        if self.kind is FaultKind.KILL:
            what = f"kill {who} (SIGKILL) and start a replacement"
        elif self.kind is FaultKind.PAUSE:
            what = f"pause {who} (SIGSTOP) for {self.duration_s:.1f} s"
        elif self.kind is FaultKind.EXPIRE:
            what = f"expire the ZooKeeper session of {who}"
        elif self.kind is FaultKind.ZOOKEEPER_RESTART:
            what = f"restart ZooKeeper (down {self.duration_s:.1f} s)"
        elif self.kind is FaultKind.BROKER_RESTART:
            what = f"restart broker {self.broker}"
        elif self.kind is FaultKind.COORDINATOR_KILL:
            what = f"kill the group coordinator's broker (down {self.duration_s:.1f} s)"
        elif self.kind is FaultKind.LEADER_KILL:
            what = f"kill a partition leader's broker (down {self.duration_s:.1f} s)"
        elif self.kind is FaultKind.ROLLING_RESTART:
            what = "restart every broker, one after the other"
        else:
            server = "ZooKeeper" if self.kind is FaultKind.ZOOKEEPER_LINK else "broker"
            if self.kind is FaultKind.BROKER_LINK and self.broker is not None:
                server = f"broker {self.broker}"
            mode = self.mode.value if self.mode is not None else "?"
            if self.mode is FaultMode.DELAY:
                mode = f"delay {self.delay_s:.2f} s"
            direction = "" if self.mode is FaultMode.RESET else f" {self.direction}"
            what = f"cut the {server} link of {who}: {mode}{direction} for {self.duration_s:.1f} s"
        return f"#{self.number} @{self.at_s:.1f}s {what}"

    def to_json(self) -> dict[str, Any]:
        """The fault as a JSON-serializable dict."""
        return {
            "number": self.number,
            "at_s": round(self.at_s, 3),
            "kind": self.kind.value,
            "member": self.member,
            "broker": self.broker,
            "duration_s": round(self.duration_s, 3),
            "mode": self.mode.value if self.mode is not None else None,
            "direction": self.direction,
            "delay_s": round(self.delay_s, 3),
            "text": str(self),
        }


class FaultScheduler:
    """A seeded plan of faults: the nemesis of a chaos run (pure, no I/O).

    Faults come every ``interval_s`` on average (uniformly between half and one and a half
    times it), their kind drawn with ``weights``. The scheduler keeps a model of what each
    planned fault occupies (see :meth:`Fault.resources`) and for how long (its duration, plus
    an estimate for the ones whose length only the servers know: a replacement consumer's
    start, a server restart), and draws again (up to 8 times) when a draw would hit something
    still busy; a tick with nothing free plans no fault.

    Args:
        seed: seeds the :class:`random.Random` every draw comes from.
        consumers: consumer slots, >= 1.
        brokers: broker ids that may be restarted.
        session_timeout_ms: the consumers' ``zookeeper.session.timeout.ms``: pauses last
            1.3 to 2 times it, link cuts 0.3 to 2 times it (some shorter than a session
            timeout, which the session should survive, some longer).
        interval_s: mean seconds between faults, > 0 (default 2).
        weights: relative frequency per kind (default :data:`DEFAULT_WEIGHTS`); a kind left
            out, or weighted 0, is never drawn.
        links: whether link faults are possible (the cluster has a proxied link per consumer).
        mode: who coordinates the group (default ZooKeeper): the kinds of the other mode are
            never drawn, and the default weights are the mode's (:func:`weights_for`). In
            Kafka mode pauses are shorter than the session timeout (0.3 to 0.8 times it) or
            longer (1.3 to 2 times), half each; a broker link cut hits one broker (two in
            three) or every one; a killed broker stays down 2 to 8 s.
        compound: the probability, 0 to 1 (default 0: none), that a link cut of one
            member (ZooKeeper's in ZooKeeper mode, a broker's in Kafka mode) that heals
            within the session timeout is followed by a kill of that member 0.1 to 0.9
            session timeouts after the heal: the compound fault whose duplicate window is
            ``C + T + ε`` (``docs/failure-semantics.md``; the checker judges it as
            ``kill_after_<cut>``). Drawn from a generator of its own, so that ``0`` leaves
            the schedule of a seed as it was.

    Raises:
        ValueError: if ``consumers < 1``, ``interval_s <= 0``, ``session_timeout_ms <= 0``,
            ``compound`` is outside ``[0, 1]``, or no kind has a positive weight.
    """

    def __init__(
        self,
        seed: int,
        *,
        consumers: int,
        brokers: Sequence[int] = (0,),
        session_timeout_ms: int,
        interval_s: float = 2.0,
        weights: Mapping[FaultKind, float] | None = None,
        links: bool = True,
        mode: CoordinatorMode = CoordinatorMode.ZOOKEEPER,
        compound: float = 0.0,
    ) -> None:
        if not 0.0 <= compound <= 1.0:
            raise ValueError(f"compound must be within [0, 1], got {compound}")
        if consumers < 1:
            raise ValueError(f"consumers must be >= 1, got {consumers}")
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        if session_timeout_ms <= 0:
            raise ValueError(f"session_timeout_ms must be > 0, got {session_timeout_ms}")
        chosen = dict(weights_for(mode) if weights is None else weights)
        foreign = _ZOOKEEPER_ONLY if mode.kafka else _KAFKA_ONLY
        chosen = {k: w for k, w in chosen.items() if k not in foreign}
        if not links:
            chosen = {k: w for k, w in chosen.items() if k not in _LINK_KINDS}
        if not brokers:
            for kind in _BROKER_FAULTS:
                chosen.pop(kind, None)
        self.kinds = [k for k in FaultKind if chosen.get(k, 0) > 0]
        if not self.kinds:
            raise ValueError("no fault kind has a positive weight")
        self.weights = [float(chosen[k]) for k in self.kinds]
        self.seed = seed
        self.mode = mode
        self.consumers = consumers
        self.brokers = list(brokers)
        self.session_s = session_timeout_ms / 1000
        self.interval_s = float(interval_s)
        self.compound = compound

    def plan(self, duration_s: float) -> list[Fault]:
        """The faults of a fault phase of ``duration_s`` seconds, in time order.

        Deterministic: the same scheduler arguments and ``duration_s`` give the same list.
        """
        rng = random.Random(self.seed)
        follow_rng = random.Random(f"{self.seed}-compound")
        busy_until: dict[str, float] = {}
        faults: list[Fault] = []
        t = rng.uniform(0.5, 1.5) * self.interval_s
        while t < duration_s:
            for _ in range(8):
                fault, hold_s = self._draw(rng, len(faults) + 1, t)
                needs = fault.resources(self.consumers)
                if all(busy_until.get(r, -math.inf) <= t for r in needs):
                    for r in needs:
                        busy_until[r] = t + hold_s
                    faults.append(fault)
                    if self.compound > 0:
                        faults += self._follow_up(follow_rng, fault, busy_until, duration_s)
                    break
            t += rng.uniform(0.5, 1.5) * self.interval_s
        if self.compound > 0:  # a follow-up comes after faults drawn later: renumber
            faults.sort(key=lambda f: (f.at_s, f.number))
            faults = [dataclasses.replace(f, number=i) for i, f in enumerate(faults, 1)]
        return faults

    def _follow_up(
        self,
        rng: random.Random,
        cut: Fault,
        busy_until: dict[str, float],
        duration_s: float,
    ) -> list[Fault]:
        """The kill that makes ``cut`` a compound fault (see ``compound``), if drawn and its
        member is free from now until the replacement has joined; it occupies the member."""
        cut_kind = FaultKind.BROKER_LINK if self.mode.kafka else FaultKind.ZOOKEEPER_LINK
        if cut.kind is not cut_kind or cut.member is None or cut.duration_s >= self.session_s:
            return []
        if rng.random() >= self.compound:
            return []
        at_s = cut.at_s + cut.duration_s + self.session_s * rng.uniform(0.1, 0.9)
        member = f"c{cut.member}"
        if at_s >= duration_s or busy_until.get(member, -math.inf) > cut.at_s:
            return []
        busy_until[member] = at_s + 8.0
        return [Fault(cut.number, at_s, FaultKind.KILL, member=cut.member)]

    def _draw(self, rng: random.Random, number: int, at_s: float) -> tuple[Fault, float]:
        """One fault and how long the scheduler should consider its resources busy."""
        kind = rng.choices(self.kinds, self.weights)[0]
        member = rng.randrange(self.consumers)
        session = self.session_s
        if kind is FaultKind.KILL:
            # The replacement needs a few seconds to start and join.
            return Fault(number, at_s, kind, member=member), 8.0
        if kind is FaultKind.PAUSE:
            if self.mode.kafka and rng.random() < 0.5:
                pause = session * rng.uniform(0.3, 0.8)
            else:
                pause = session * rng.uniform(1.3, 2.0)
            return Fault(number, at_s, kind, member=member, duration_s=pause), pause + 1.0
        if kind in (FaultKind.COORDINATOR_KILL, FaultKind.LEADER_KILL):
            # Down, then restarted; then its replicas catch up before the next broker fault.
            down = rng.uniform(2.0, 8.0)
            return Fault(number, at_s, kind, duration_s=down), down + 20.0
        if kind is FaultKind.ROLLING_RESTART:
            return Fault(number, at_s, kind), 45.0
        if kind is FaultKind.EXPIRE:
            return Fault(number, at_s, kind, member=member), 3.0
        if kind is FaultKind.ZOOKEEPER_RESTART:
            down = rng.uniform(0.5, 3.0)
            return Fault(number, at_s, kind, duration_s=down), down + 8.0
        if kind is FaultKind.BROKER_RESTART:
            broker = rng.choice(self.brokers)
            return Fault(number, at_s, kind, broker=broker), 25.0
        scope: int | None = member if rng.random() < 0.75 else None
        one_broker: int | None = None
        if self.mode.kafka and kind is FaultKind.BROKER_LINK:
            scope = member
            if rng.random() < 2 / 3:
                one_broker = rng.choice(self.brokers)
        mode = rng.choices(
            (FaultMode.BLACKHOLE, FaultMode.RESET, FaultMode.DELAY), (0.5, 0.25, 0.25)
        )[0]
        direction: Direction = rng.choices(("both", "up", "down"), (0.5, 0.25, 0.25))[0]
        delay = 0.0
        if mode is FaultMode.RESET:
            direction = "both"
        if mode is FaultMode.DELAY:
            delay = (
                session * rng.uniform(0.1, 0.8)
                if kind is FaultKind.ZOOKEEPER_LINK
                else rng.uniform(0.2, 2.0)
            )
            length = session * rng.uniform(1.0, 2.0)
        else:
            length = session * rng.uniform(0.3, 2.0)
        fault = Fault(
            number,
            at_s,
            kind,
            member=scope,
            broker=one_broker,
            duration_s=length,
            mode=mode,
            direction=direction,
            delay_s=delay,
        )
        return fault, length + 0.5
