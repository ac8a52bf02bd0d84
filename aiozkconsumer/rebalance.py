"""Rebalance: the pure plan and the serialized worker that carries it out.

``plan_assignment`` is pure: from a view of the group (members' registrations, the topics and
their partitions) it returns the global assignment, exactly as the original's assignors (every
member computes the same plan from the same view). ``Rebalancer`` performs one
``syncedRebalance`` (``ZookeeperConsumerConnector.scala``, 0.10.2, §3.4–3.5 of the reference):
assign from a fresh view, release what moves (stop handing it out and fetching it, commit its
consumed offsets with auto-commit on, call the listener, delete its owner nodes), read the
committed offsets of what is new, claim its owner nodes (undoing the claims of the attempt on
any conflict), start fetching it; up to ``rebalance.max.retries`` attempts.

Beyond the original:

- Incremental: partitions whose owner does not change keep their owner node, their fetcher and
  their place in the stream; a member joining does not stop the whole group. The original
  released and re-claimed everything on every rebalance. The ZooKeeper layout is unchanged, and
  a member running the original computes the same plan, so it never claims what we keep.
- After a failed claim it waits for the blocking owner nodes to be deleted (a ZooKeeper watch)
  instead of always sleeping the full ``rebalance.backoff.ms``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from .assignors import Assignment, AssignmentContext, get_assignor
from .cluster import read_brokers, read_partitions_for_topics
from .errors import (
    ConsumerError,
    ConsumerRebalanceFailedError,
    MalformedZookeeperDataError,
    OffsetStorageError,
    ZookeeperConnectionError,
    ZookeeperError,
    ZookeeperSessionExpiredError,
)
from .records import PartitionTopicInfo, TopicPartition
from .subscription import ConsumerThreadId, TopicCount, construct_topic_count
from .zk import layout

if TYPE_CHECKING:
    from .connector import ZookeeperConsumerConnector

__all__ = ["RebalanceRecord", "Rebalancer", "plan_assignment"]

log = logging.getLogger(__name__)


def plan_assignment(
    *,
    group: str,
    consumer_id: str,
    topic_counts: Mapping[str, TopicCount],
    partitions_for_topic: Mapping[str, Iterable[int]],
    strategy: str,
) -> Assignment:
    """Compute the group's assignment from one view of it (pure).

    Args:
        group: ``group.id``.
        consumer_id: the consumer id string of the member computing the plan.
        topic_counts: every member's subscription, by consumer id string.
        partitions_for_topic: partition ids of each subscribed topic.
        strategy: ``partition.assignment.strategy`` (``range`` or ``roundrobin``).

    Returns:
        ``{consumer id: {TopicPartition: ConsumerThreadId}}`` with an entry (maybe empty) for
        every member, as the original's assignors return.

    Raises:
        InvalidConfigError: unknown strategy.
    """
    ctx = AssignmentContext.build(group, consumer_id, topic_counts, partitions_for_topic)
    return get_assignor(strategy)(ctx)


async def _call_listener(call: Awaitable[None]) -> None:
    """Await a listener hook; any exception it raises fails the rebalance attempt.

    As the original, where the listener ran inside the attempt's ``try``.
    """
    try:
        await call
    except ConsumerError:
        raise
    except Exception as e:
        raise ConsumerError(f"the rebalance listener raised {e!r}") from e


@dataclass(frozen=True)
class RebalanceRecord:
    """What one ``syncedRebalance`` did.

    Attributes:
        started_at: wall-clock start, seconds since the epoch.
        duration_s: how long it took, seconds.
        attempts: attempts made (1 when the first succeeded).
        succeeded: whether it ended owning its assignment.
        partitions: the partitions owned afterwards.
        reason: what triggered it.
        members: the group's members (consumer id strings) the last attempt assigned over.
        kept: partitions that stayed with this member and kept fetching throughout.
        released: partitions this member gave up.
        acquired: partitions this member claimed.
    """

    started_at: float
    duration_s: float
    attempts: int
    succeeded: bool
    partitions: tuple[TopicPartition, ...]
    reason: str
    members: tuple[str, ...] = ()
    kept: int = 0
    released: int = 0
    acquired: int = 0


class Rebalancer:
    """Performs rebalances for one connector, one at a time (the caller holds the lock).

    Args:
        connector: the connector whose fetchers, queues, offsets and ZooKeeper session it uses.
    """

    def __init__(self, connector: ZookeeperConsumerConnector) -> None:
        self.c = connector
        self.history: list[RebalanceRecord] = []
        self.failed_attempts = 0
        self.last_moves = (0, 0, 0)
        self._members: tuple[str, ...] = ()

    async def synced_rebalance(self, reason: str) -> None:
        """Time ``_synced_rebalance`` in ``RebalanceRateAndTime`` (KAFKA-1446)."""
        with self.c.metrics.rebalance_rate_and_time().time():
            await self._synced_rebalance(reason)

    async def _synced_rebalance(self, reason: str) -> None:
        """Run up to ``rebalance.max.retries`` attempts (``syncedRebalance``).

        An attempt cut short by ZooKeeper connection loss or session expiry does not use up
        one of them: the next one starts when the session is connected again, within the
        connector's ``connection_retry_window_s`` (the original's ZkClient blocked the
        attempt until the connection was back).

        Raises:
            ConsumerRebalanceFailedError: no attempt succeeded. The consumer then owns no
                partition and fetches nothing; it stays registered, and the next trigger
                (member change, new session) rebalances again.
        """
        c = self.c
        cfg = c.config
        started, t0 = time.time(), time.monotonic()
        backoff_s = cfg.effective_rebalance_backoff_ms / 1000
        last_error: BaseException | None = None
        connection_deadline: float | None = None
        attempt = 0
        while attempt < cfg.rebalance_max_retries:
            attempt += 1
            if c.closing:
                return
            log.info(
                "[%s] begin rebalancing (attempt %d, %s)", c.consumer_id_string, attempt, reason
            )
            blocking: list[str] = []
            self.last_moves = (0, 0, 0)
            try:
                # The session may have been replaced since the last attempt (or since the
                # rebalance began): own nothing of the old one and register again first.
                await c.handle_new_session_if_needed()
                done = await self._rebalance(blocking)
            except (ConsumerError, MalformedZookeeperDataError, ZookeeperError) as e:
                log.info("[%s] exception during rebalance: %s", c.consumer_id_string, e)
                last_error, done = e, False
            if done:
                self._record(started, t0, attempt, True, reason)
                return
            # A failed attempt keeps what it kept (it still holds those owner nodes, so nobody
            # else can take them) and waits before the next one.
            self.failed_attempts += 1
            c.rebalance_attempt_failed()
            if isinstance(last_error, (ZookeeperConnectionError, ZookeeperSessionExpiredError)):
                now = anyio.current_time()
                if connection_deadline is None:
                    connection_deadline = now + c.connection_retry_window_s
                if now < connection_deadline and not c.closing:
                    attempt -= 1  # lost to the connection, not to the group: not counted
                    with anyio.move_on_after(connection_deadline - now):
                        await c.zk.wait_for_state("connected")
                        await anyio.sleep(backoff_s)
                    continue
            try:
                if blocking:
                    await c.zk.wait_deleted(blocking, backoff_s)
                else:
                    await anyio.sleep(backoff_s)
            except ZookeeperError as e:
                log.info("[%s] waiting before the next attempt: %s", c.consumer_id_string, e)
                await anyio.sleep(backoff_s)
        # Out of attempts: own nothing, fetch nothing, as the original after its last attempt.
        await self._release(list(c.topic_registry))
        await c.fetcher.stop_connections()
        self._record(started, t0, cfg.rebalance_max_retries, False, reason)
        raise ConsumerRebalanceFailedError(
            f"{c.consumer_id_string} can't rebalance after {cfg.rebalance_max_retries} retries"
            + (f"; last error: {last_error}" if last_error else "")
        ) from last_error

    def _record(self, started: float, t0: float, attempts: int, ok: bool, reason: str) -> None:
        rec = RebalanceRecord(
            started_at=started,
            duration_s=time.monotonic() - t0,
            attempts=attempts,
            succeeded=ok,
            partitions=tuple(sorted(self.c.topic_registry)),
            reason=reason,
            members=self._members,
            kept=self.last_moves[0],
            released=self.last_moves[1],
            acquired=self.last_moves[2],
        )
        self.history.append(rec)
        log.info(
            "[%s] rebalance %s in %.3f s after %d attempt(s); owns %d partitions",
            self.c.consumer_id_string,
            "done" if ok else "FAILED",
            rec.duration_s,
            attempts,
            len(rec.partitions),
        )

    async def _release(self, tps: Iterable[TopicPartition]) -> None:
        """Give up partitions: stop handing them out and fetching them, commit, delete owners.

        The original's ``closeFetchersForQueues`` + ``releasePartitionOwnership``, for the
        partitions that move: they are marked inactive first (no record of them is handed out
        any more, and queued chunks of them are dropped by the iterators), their consumed
        offsets are committed while we still own them (auto-commit on), the listener's
        ``before_releasing_partitions`` sees them, then their owner nodes are deleted.
        """
        c = self.c
        registry = c.topic_registry
        released = {tp: registry[tp] for tp in tps if tp in registry}
        if not released:
            return
        for pti in released.values():
            pti.active = False
        c.fetcher.remove_partitions(released)
        if c.config.auto_commit_enable:
            try:
                final = {tp: p.consumed_offset for tp, p in released.items()}
                await c.store_commit(final, c.config.offsets_commit_max_retries)
            except (ZookeeperError, OffsetStorageError) as e:
                log.warning("[%s] commit before release failed: %s", c.consumer_id_string, e)
        if c.listener is not None:
            ownership: dict[str, set[int]] = {}
            for tp in released:
                ownership.setdefault(tp.topic, set()).add(tp.partition)
            await _call_listener(c.listener.before_releasing_partitions(ownership))
        for tp in sorted(released):
            # Only our own node: after a session expiry it may be another member's by now.
            await c.zk.delete_if_owned(layout.owner_path(c.config.group_id, tp.topic, tp.partition))
        c.offset_store.forget(released)
        for tp in released:
            c.committed_offsets.pop(tp, None)
        c.topic_registry = {tp: p for tp, p in registry.items() if tp not in released}
        c.owned_partitions_changed()

    async def _rebalance(self, blocking: list[str]) -> bool:
        """One attempt (``rebalance(cluster)``). Returns ``True`` on success.

        ``blocking`` receives the owner paths held by others when the claim fails.
        """
        c = self.c
        cfg = c.config
        group = cfg.group_id
        zk = c.zk
        me = c.consumer_id_string
        own = await zk.get_data(layout.ids_path(group, me))
        if own is None:
            # Gone with an expired session this member has not noticed yet: register on the
            # current session (the session watcher drops the old ownership before the next
            # attempt).
            log.warning("[%s] own registration is missing: registering again", me)
            await c.register()
            return False
        from_kafka = await c.metadata_from_kafka()
        if from_kafka:
            kafka = await c.ensure_kafka()
            all_topics = sorted(await kafka.all_topics())
            brokers = None
        else:
            brokers = await read_brokers(zk)
            if not brokers:
                log.warning("[%s] no brokers found when trying to rebalance.", me)
                c.watch_broker_ids()
                return True
            all_topics = await zk.get_children(layout.BROKER_TOPICS_PATH) or []
        members = sorted(await zk.get_children(layout.ids_dir(group)) or [])
        self._members = tuple(members)
        topic_counts: dict[str, TopicCount] = {}
        # ZooKeeper answers pipelined requests in order on one connection: read all at once.
        datas = await asyncio.gather(
            *(zk.get_data(layout.ids_path(group, member)) for member in members)
        )
        for member, data in zip(members, datas, strict=True):
            path = layout.ids_path(group, member)
            if data is None:
                continue  # left meanwhile; the ids watch triggers another rebalance
            try:
                reg = layout.decode_registration(data, path)
            except MalformedZookeeperDataError as e:
                if member == me:
                    raise
                # Every member reads the same bytes and leaves the same member out, so the
                # plans still agree; the rest of the group keeps consuming.
                log.error("[%s] leaving member %s out of the assignment: %s", me, member, e)
                continue
            topic_counts[member] = construct_topic_count(
                member, reg, all_topics, cfg.exclude_internal_topics
            )
        if me not in topic_counts:
            raise ConsumerError(f"own registration of {me} vanished during rebalance")
        topics = {
            t
            for tcount in topic_counts.values()
            for t in tcount.get_consumer_thread_ids_per_topic()
        }
        if from_kafka:
            partitions = await kafka.partitions_for_topics(topics)
        else:
            partitions = await read_partitions_for_topics(zk, topics)
        assignment = plan_assignment(
            group=group,
            consumer_id=me,
            topic_counts=topic_counts,
            partitions_for_topic=partitions,
            strategy=cfg.partition_assignment_strategy,
        )
        mine = assignment.get(me, {})

        # Incremental: partitions that stay ours (same stream) keep fetching and keep their
        # owner nodes; only the ones that move are released, and only new ones claimed. Every
        # member computes the same plan, so nobody else claims what we keep.
        registry = c.topic_registry
        keep = {
            tp
            for tp, tid in mine.items()
            if tp in registry
            and registry[tp].active
            and registry[tp].queue is c.queue_for(tp.topic, tid)
        }
        await self._release([tp for tp in registry if tp not in keep])
        acquire = {tp: tid for tp, tid in mine.items() if tp not in keep}
        offsets = await c.offset_store.fetch(acquire)
        if c.closing:
            return False
        c.committed_offsets.update({tp: o for tp, o in offsets.items() if o >= 0})
        new_ptis: dict[TopicPartition, PartitionTopicInfo] = {}
        for tp, thread_id in acquire.items():
            offset = offsets[tp]
            new_ptis[tp] = PartitionTopicInfo(
                topic=tp.topic,
                partition=tp.partition,
                queue=c.queue_for(tp.topic, thread_id),
                meters=c.message_meters(tp.topic),
                consumed_offset=offset,
                fetched_offset=offset,
                fetch_size=cfg.fetch_message_max_bytes,
                client_id=cfg.effective_client_id,
                gate=c.gate,
            )
        if not await self._claim(acquire, blocking):
            return False
        # Fencing: each claim moves the partition's fencing token on, so a former owner
        # (a zombie that has not noticed yet) can no longer commit it.
        tokens = await asyncio.gather(
            *(
                c.zk.bump(
                    layout.fencing_path(cfg.group_id, tp.topic, tp.partition),
                    layout.encode_owner(str(acquire[tp])),
                )
                for tp in new_ptis
            )
        )
        for pti, token in zip(new_ptis.values(), tokens, strict=True):
            pti.fence = token
        c.topic_registry = {**c.topic_registry, **new_ptis}
        self.last_moves = (len(keep), len(registry) - len(keep), len(new_ptis))
        c.owned_partitions_changed()
        if c.listener is not None:
            global_view: dict[str, dict[int, ConsumerThreadId]] = {}
            for per_consumer in assignment.values():
                for tp, tid in per_consumer.items():
                    global_view.setdefault(tp.topic, {})[tp.partition] = tid
            await _call_listener(c.listener.before_starting_fetchers(me, global_view))
        if c.fetch_enabled and c.topic_registry:
            await c.ensure_kafka(brokers)
            if not c.fetcher.running:
                # Also after an attempt that failed once its claims were in (a broker was
                # unreachable): everything owned must be fetched, not only what is new.
                await c.fetcher.start_connections(c.topic_registry.values(), c.task_group)
            elif new_ptis:
                c.fetcher.add_partitions(new_ptis.values())
        return True

    async def _claim(
        self, mine: Mapping[TopicPartition, ConsumerThreadId], blocking: list[str]
    ) -> bool:
        """Create our owner nodes (``reflectPartitionOwnershipDecision``).

        Tries all, not stopping at the first conflict; on any conflict deletes those created
        in this attempt and returns ``False``.
        """
        c = self.c
        created: list[str] = []
        items = sorted(mine.items())
        paths = [layout.owner_path(c.config.group_id, tp.topic, tp.partition) for tp, _ in items]
        results = await asyncio.gather(
            *(
                c.zk.create_ephemeral_expect_conflict(path, layout.encode_owner(str(thread_id)))
                for path, (_, thread_id) in zip(paths, items, strict=True)
            ),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            # Undo what did get created, then fail the attempt with the first error.
            made = [p for p, r in zip(paths, results, strict=True) if r is True]
            await asyncio.gather(*(c.zk.delete(p) for p in made), return_exceptions=True)
            raise errors[0]
        for path, (tp, _), ok in zip(paths, items, results, strict=True):
            if ok:
                created.append(path)
            else:
                log.info(
                    "[%s] waiting for the partition ownership to be deleted: %s for topic %s",
                    c.consumer_id_string,
                    tp.partition,
                    tp.topic,
                )
                blocking.append(path)
        if blocking:
            await asyncio.gather(*(c.zk.delete(path) for path in created))
            return False
        return True
