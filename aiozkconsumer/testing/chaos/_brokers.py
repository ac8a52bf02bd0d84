"""What a Kafka-mode fault needs to know of the brokers: the group's coordinator, a
partition's leader, and whether every replica is back in sync.

The chaos runner asks these questions at injection time (the coordinator and the leaders move
as faults go on) through an admin client on the cluster's direct listeners, never through a
member's proxied link. Every answer is best effort: a question the brokers cannot answer in
time (a broker is down, the coordinator moves) is asked again until a limit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient

from aiozkconsumer.testing.cluster import LocalCluster

__all__ = ["BrokerLookup"]

log = logging.getLogger(__name__)

_CLIENT_ID = "aiozkconsumer-chaos-admin"
_REQUEST_TIMEOUT_MS = 5_000
_RETRY_S = 0.5
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
"""Internal topics whose replicas must be in sync before the next broker fault."""


class BrokerLookup:
    """Questions about the brokers of a running :class:`LocalCluster` (Kafka mode).

    Args:
        cluster: the running cluster.
    """

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    async def _ask(self, what: str, limit_s: float, question: Any) -> Any:
        """Ask ``question(admin)`` with a fresh admin client until it answers or
        ``limit_s`` passed; ``None`` then."""
        last: BaseException | None = None
        with anyio.move_on_after(limit_s):
            while True:
                admin = AIOKafkaAdminClient(
                    bootstrap_servers=self.cluster.bootstrap_servers.split(","),
                    client_id=_CLIENT_ID,
                    request_timeout_ms=_REQUEST_TIMEOUT_MS,
                )
                try:
                    with anyio.fail_after(2 * _REQUEST_TIMEOUT_MS / 1000):
                        await admin.start()
                        return await question(admin)
                except (kafka_errors.KafkaError, TimeoutError, OSError) as e:
                    last = e
                finally:
                    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                        await admin.close()
                await anyio.sleep(_RETRY_S)
        log.warning("could not learn %s within %.0f s: %r", what, limit_s, last)
        return None

    async def coordinator(self, group: str, limit_s: float = 15.0) -> int | None:
        """The broker id of ``group``'s coordinator (FindCoordinator); ``None`` if unknown."""

        async def ask(admin: AIOKafkaAdminClient) -> int:
            return int(await admin.find_coordinator(group))

        found = await self._ask(f"the coordinator of {group}", limit_s, ask)
        return None if found is None else int(found)

    async def partitions(
        self, topics: Sequence[str], limit_s: float = 15.0
    ) -> list[dict[str, Any]] | None:
        """``[{"topic", "partition", "leader", "replicas", "isr"}]`` of ``topics`` (a
        Metadata request); ``None`` if the brokers did not answer."""

        async def ask(admin: AIOKafkaAdminClient) -> list[dict[str, Any]]:
            described = await admin.describe_topics(list(topics))
            for t in described:
                if t.get("error_code"):
                    raise kafka_errors.for_code(int(t["error_code"]))
            return [
                {
                    "topic": t["topic"],
                    "partition": int(p["partition"]),
                    "leader": int(p["leader"]),
                    "replicas": [int(r) for r in p["replicas"]],
                    "isr": [int(r) for r in p["isr"]],
                }
                for t in described
                for p in t.get("partitions", ())
            ]

        result = await self._ask(f"the partitions of {', '.join(topics)}", limit_s, ask)
        return None if result is None else list(result)

    async def leaders(self, topic: str) -> dict[int, int]:
        """``{partition: leader broker id}`` of ``topic`` (empty if unknown; a partition
        without a leader, -1, is left out)."""
        rows = await self.partitions([topic]) or []
        return {r["partition"]: r["leader"] for r in rows if r["leader"] >= 0}

    async def wait_in_sync(self, topics: Sequence[str], limit_s: float) -> bool:
        """Wait until every partition of ``topics`` has its whole replica set in sync (and
        a leader); ``False`` if that did not happen within ``limit_s``."""
        with anyio.move_on_after(limit_s):
            while True:
                rows = await self.partitions(topics, limit_s=limit_s)
                if rows and all(
                    r["leader"] >= 0 and set(r["isr"]) >= set(r["replicas"]) for r in rows
                ):
                    return True
                await anyio.sleep(_RETRY_S)
        return False
