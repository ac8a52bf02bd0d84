"""Which consumer client a chaos run's members use, and what the checker judges of each.

Our members (:mod:`aiozkconsumer.testing.verifiable`) are the default; aiokafka's
``AIOKafkaConsumer`` (:mod:`aiozkconsumer.testing.verifiable_aiokafka`) runs the same schedule
as a reference. Most of the history checker's rules are about any group member (loss,
duplicates below the group commit, exclusive ownership, commits); the ones stated for our
client's internals are not applied to aiokafka's members, and the report says so
(:func:`apply_client_rules`). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from aiozkconsumer.testing.chaos.schedule import CoordinatorMode
from aiozkconsumer.testing.history import AnomalyKind, CheckResult

__all__ = ["NOT_APPLIED", "NOT_RECORDED", "MemberClient", "apply_client_rules", "check_client"]


class MemberClient(enum.StrEnum):
    """The client the chaos run's member processes consume with."""

    AIOZKCONSUMER = "aiozkconsumer"
    """Our connector (:mod:`aiozkconsumer.testing.verifiable`), any coordinator mode."""
    AIOKAFKA = "aiokafka"
    """aiokafka's ``AIOKafkaConsumer`` (:mod:`aiozkconsumer.testing.verifiable_aiokafka`),
    ``kafka-classic`` mode only."""


NOT_APPLIED: Mapping[MemberClient, Mapping[AnomalyKind, str]] = {
    MemberClient.AIOZKCONSUMER: {},
    MemberClient.AIOKAFKA: {
        AnomalyKind.DUPLICATE_WINDOW_EXCEEDED: (
            "the bounds (docs/failure-semantics.md) are aiozkconsumer's: its session lease "
            "stops hand-outs 0.8 T after the last answered heartbeat; aiokafka has no lease, "
            "so its windows are listed next to those bounds, not judged"
        ),
    },
}
"""Per client, the anomaly kinds the checker's verdict leaves out, with the reason."""

NOT_RECORDED: Mapping[MemberClient, Mapping[str, str]] = {
    MemberClient.AIOZKCONSUMER: {},
    MemberClient.AIOKAFKA: {
        "session/generation": (
            "aiokafka's public API shows neither the member id nor the generation: events "
            "carry null, session losses are not counted and fenced epochs end at their "
            "revocation or last delivery"
        ),
        "handed_out_by": "no lease deadline: a delivery's time is its event's time",
        "suspended": "aiokafka does not report losing its coordinator: no suspensions",
    },
}
"""Per client, the event fields the checker gets no data for, with what that means."""


def check_client(client: MemberClient | str, mode: CoordinatorMode) -> MemberClient:
    """The client, checked against the run's coordinator mode.

    Raises:
        ValueError: an unknown client, or aiokafka with a mode other than ``kafka-classic``
            (aiokafka has neither ZooKeeper coordination nor the KIP-848 protocol).
    """
    client = MemberClient(client)
    if client is MemberClient.AIOKAFKA and mode is not CoordinatorMode.KAFKA_CLASSIC:
        raise ValueError(
            f"client aiokafka needs mode {CoordinatorMode.KAFKA_CLASSIC.value}, not {mode.value}"
        )
    return client


def apply_client_rules(
    result: CheckResult, client: MemberClient
) -> tuple[CheckResult, dict[str, int]]:
    """Leave out of the verdict the anomalies of the rules not applied to ``client``.

    Returns:
        The result without those anomalies, and ``{anomaly kind: how many were left out}``
        for every kind not applied (0 included), for the report.
    """
    skipped = NOT_APPLIED[client]
    if not skipped:
        return result, {}
    left_out = {kind.value: 0 for kind in skipped}
    kept = []
    for anomaly in result.anomalies:
        if anomaly.kind in skipped:
            left_out[anomaly.kind.value] += 1
        else:
            kept.append(anomaly)
    return dataclasses.replace(result, anomalies=kept), left_out
