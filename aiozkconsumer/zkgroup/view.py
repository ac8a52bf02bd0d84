"""The group's view a ZooKeeper rebalance plans from, read from ZooKeeper and the cluster.

The own registration, brokers, topics, the members' subscriptions and the partitions of
their topics, all in flight at once; a view reads again only the registrations of members
it has not seen (or all of them when the ``/ids`` child version shows a member registered
again), not every one each time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._concurrency import gather
from ..cluster import ClusterView
from ..config import ConsumerConfig
from ..errors import ConsumerError, MalformedZookeeperDataError
from ..plan import registrations_still_valid
from ..subscription import StaticTopicCount, TopicCount, construct_topic_count
from ..zk import layout
from ..zk.client import ZkClient
from .membership import Membership

__all__ = ["View", "ViewReader"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class View:
    """What one attempt plans from (see :meth:`ViewReader.read`)."""

    registered: bool = True
    brokers: bool = True
    topic_counts: Mapping[str, TopicCount] = field(default_factory=dict)
    partitions: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


class ViewReader:
    """Reads one member's view of its group, remembering the registrations it read.

    Args:
        config: the consumer configuration (``group.id``, ``exclude.internal.topics``).
        consumer_id: this member's consumer id string.
        zk: the ZooKeeper session.
        cluster: brokers, topics and partitions.
        membership: this member's registration (its path).
        topic_count: returns this member's subscription.
        on_no_brokers: called when ZooKeeper has no broker (starts a watch on them).

    Attributes:
        members: the members of the last view, sorted.
        ids_version: the ``/ids`` child version read with the last view (``None``: none).
    """

    def __init__(
        self,
        *,
        config: ConsumerConfig,
        consumer_id: str,
        zk: ZkClient,
        cluster: ClusterView,
        membership: Membership,
        topic_count: Callable[[], TopicCount | None],
        on_no_brokers: Callable[[], None],
    ) -> None:
        self.config = config
        self.consumer_id = consumer_id
        self.zk = zk
        self.cluster = cluster
        self.membership = membership
        self.topic_count = topic_count
        self.on_no_brokers = on_no_brokers
        self.members: tuple[str, ...] = ()
        self.ids_version: int | None = None
        # The members' registrations read with the last view, and that view's /ids node
        # (creation zxid), child version (read before the list) and list.
        self._registrations: dict[str, bytes] = {}
        self._registrations_view: tuple[int, int, tuple[str, ...]] | None = None

    async def read(self) -> View:
        """Read the group's view: the own registration, brokers, topics, the members'
        subscriptions and the partitions of their topics.

        The reads are independent, so they are all in flight at once (one ZooKeeper session
        answers pipelined requests in order): about three round trips instead of one per
        read. The partitions of this member's own topics (a static subscription) are read
        with them, those of other members' topics afterwards. The cluster's topic list is
        needed only to match wildcard subscriptions: a member with a static one reads it only
        when some registration is a wildcard one (after the registrations; with Kafka
        metadata it is a metadata request for every topic and its partitions, the costliest
        read of the view on a cluster of thousands of partitions).

        Returns:
            The view; ``registered`` is ``False`` when the own registration node is missing,
            ``brokers`` is ``False`` when ZooKeeper has no broker (nothing to assign; a watch
            on ``/brokers/ids`` is started).

        Raises:
            ConsumerError: the own registration vanished between the reads.
            MalformedZookeeperDataError: the own registration, a broker or a topic node does
                not parse.
            ZookeeperError: a read failed (the others were cancelled).
        """
        cfg = self.config
        group, me, zk, cluster = cfg.group_id, self.consumer_id, self.zk, self.cluster
        from_kafka = await cluster.metadata_from_kafka()  # decided once, at the first call
        own = self.topic_count()
        guess = (
            sorted(own.get_consumer_thread_ids_per_topic())
            if isinstance(own, StaticTopicCount)
            else []
        )
        registered = has_brokers = True
        all_topics: list[str] = []
        members: list[str] = []
        datas: list[bytes | None] = []
        partitions: dict[str, tuple[int, ...]] = {}

        async def read_registration() -> None:
            nonlocal registered
            registered = await zk.get_data(self.membership.path) is not None

        async def read_brokers() -> None:
            nonlocal has_brokers
            has_brokers = bool(await cluster.brokers())

        async def read_topics() -> None:
            nonlocal all_topics
            all_topics = await cluster.all_topics()

        async def read_members() -> None:
            nonlocal members, datas
            # The list and the child version from one snapshot: the version counts exactly
            # the joins and leaves up to this list (a member joining after it makes the view
            # look changed later, a re-plan).
            listed = await zk.get_children_and_stat(layout.ids_dir(group))
            stat = None if listed is None else listed[1]
            self.ids_version = None if stat is None else int(stat.child_version)
            members = [] if listed is None else sorted(listed[0])
            datas = await self._read_registrations(members, stat)

        async def read_partitions() -> None:
            partitions.update(await cluster.partitions_for_topics(guess))

        topics_read = not isinstance(own, StaticTopicCount)
        steps = [read_registration(), read_members()]
        if topics_read:
            steps.append(read_topics())
        if not from_kafka:
            steps.append(read_brokers())
        if guess:
            steps.append(read_partitions())
        await gather(steps)
        if not registered:
            return View(registered=False)
        if not has_brokers:
            log.warning("[%s] no brokers found when trying to rebalance.", me)
            self.on_no_brokers()
            return View(brokers=False)
        self.members = tuple(members)
        registrations: dict[str, layout.Registration] = {}
        for member, data in zip(members, datas, strict=True):
            path = layout.ids_path(group, member)
            if data is None:
                continue  # left meanwhile; the ids watch triggers another rebalance
            try:
                registrations[member] = layout.decode_registration(data, path)
            except MalformedZookeeperDataError as e:
                if member == me:
                    raise
                # Every member reads the same bytes and leaves the same member out, so the
                # plans still agree; the rest of the group keeps consuming.
                log.error("[%s] leaving member %s out of the assignment: %s", me, member, e)
        if not topics_read and any(reg.is_wildcard for reg in registrations.values()):
            all_topics = await cluster.all_topics()
        topic_counts: dict[str, TopicCount] = {
            member: construct_topic_count(member, reg, all_topics, cfg.exclude_internal_topics)
            for member, reg in registrations.items()
        }
        if me not in topic_counts:
            raise ConsumerError(f"own registration of {me} vanished during rebalance")
        topics = {
            t
            for tcount in topic_counts.values()
            for t in tcount.get_consumer_thread_ids_per_topic()
        }
        missing = topics - partitions.keys()
        if missing:
            partitions.update(await cluster.partitions_for_topics(missing))
        return View(
            topic_counts=topic_counts, partitions={t: partitions[t] for t in sorted(topics)}
        )

    async def _read_registrations(self, members: list[str], stat: Any) -> list[bytes | None]:
        """The registration data of ``members``, in order (``None``: gone meanwhile).

        A registration is written once and never updated, so the data the previous view read
        still holds for a member listed by both views unless it was deleted and registered
        again in between, which the ``/ids`` child versions of the two lists tell
        (:func:`plan.registrations_still_valid`; each version is read with its list, in one
        snapshot): only when they do not account for every change is every registration read
        again, as the original always did. A view of one join or leave thus reads one
        registration, or none, instead of all of them, in one round trip after the list.

        Args:
            members: the members just listed.
            stat: ``/ids``'s stat, read with the list (``None``: no such node).
        """
        zk, group = self.zk, self.config.group_id
        known = self._registrations
        node = None if stat is None else int(stat.created_zxid)
        version = None if stat is None else int(stat.child_version)
        got: dict[str, bytes | None] = {}
        previous = self._registrations_view
        if previous is not None and node is not None and version is not None and known:
            prev_node, prev_version, prev_members = previous
            if prev_node == node and registrations_still_valid(
                prev_members, prev_version, members, version
            ):
                got.update({m: known[m] for m in members if m in known})
        unread = [m for m in members if m not in got]
        read = await zk.get_many(layout.ids_path(group, m) for m in unread)
        got.update({m: None if r is None else r[0] for m, r in zip(unread, read, strict=True)})
        datas = [got[m] for m in members]
        self._registrations = {m: d for m, d in zip(members, datas, strict=True) if d is not None}
        self._registrations_view = None if node is None else (node, version or 0, tuple(members))
        return datas

    async def membership_changed(self) -> bool:
        """Whether the ``/ids`` child version differs from the one read with the view."""
        ids = await self.zk.get(layout.ids_dir(self.config.group_id))
        version = None if ids is None else int(ids[1].child_version)
        return version is None or version != self.ids_version
