"""Group membership in ZooKeeper: the registration node and what a new session obliges.

A member registers at ``/consumers/<group>/ids/<consumer id>`` (``registerConsumerInZK``,
0.10.2) as a checked ephemeral node. When its session expires, the server deletes that node
and its owner nodes: another member may own its partitions already, so it drops them without
committing and registers again on the new session
(``ZKSessionExpireListener.handleNewSession``).

With ``zookeeper.poll.liveness.enable`` a member may also deregister itself (delete its node)
while a reader holds past ``max.poll.interval.ms`` (``liveness.PollLiveness``): it is *stale*
then, takes part in no rebalance, and registers again at the first rebalance after the reader
asks for records again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from ..fetcher import FetcherManager
from ..offsets import OffsetStore
from ..ownership import OwnershipState
from ..stream import KafkaStream
from ..subscription import TopicCount
from ..zk import layout
from ..zk.client import ZkClient

__all__ = ["Membership"]

log = logging.getLogger(__name__)


class Membership:
    """This member's registration, and the reset a replaced session requires.

    Args:
        group: ``group.id``.
        consumer_id: the consumer id string (the registration node's name).
        zk: the ZooKeeper session.
        ownership: the member's ownership state (dropped after an expiry).
        fetcher: the fetcher manager (stopped after an expiry).
        offset_store: the offset store (forgets dropped partitions).
        topic_count: returns the subscription to register (``None`` before streams exist).
        streams: returns every stream (their current chunks are dropped after an expiry).
    """

    def __init__(
        self,
        group: str,
        consumer_id: str,
        zk: ZkClient,
        ownership: OwnershipState,
        fetcher: FetcherManager,
        offset_store: OffsetStore,
        topic_count: Callable[[], TopicCount | None],
        streams: Callable[[], Iterable[KafkaStream]],
    ) -> None:
        self.group = group
        self.consumer_id = consumer_id
        self.zk = zk
        self.ownership = ownership
        self.fetcher = fetcher
        self.offset_store = offset_store
        self.topic_count = topic_count
        self.streams = streams
        self.registered_session: int | None = None
        self.session_replaced = False
        self.stale = False
        """Deregistered on a poll timeout and the reader still holds: no rebalance runs."""
        self.deregistered = False
        """The node was deleted on a poll timeout: the next rebalance registers again."""

    @property
    def path(self) -> str:
        """The registration node's path."""
        return layout.ids_path(self.group, self.consumer_id)

    async def register(self) -> None:
        """Write the registration node (``registerConsumerInZK``), as a checked ephemeral.

        Raises:
            ZookeeperNodeExistsError: another live session registered the same consumer id.
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        tc = self.topic_count()
        if tc is None:
            raise RuntimeError("register() before the subscription exists")
        data = tc.encode_registration(int(time.time() * 1000))
        await self.zk.create_ephemeral_checked(self.path, data)
        self.registered_session = self.zk.session_id
        self.deregistered = False
        log.info("[%s] registered at %s", self.consumer_id, self.path)

    async def deregister(self) -> bool:
        """Delete the registration node (a poll timeout), so the other members rebalance.

        Returns:
            Whether a node was deleted (``False``: it was gone already).

        Raises:
            ZookeeperConnectionError: ZooKeeper is unreachable.
        """
        self.deregistered = True
        deleted = await self.zk.delete(self.path)
        log.info("[%s] deregistered from %s", self.consumer_id, self.path)
        return deleted

    def end_stale(self) -> None:
        """The reader asks for records again: the next rebalance registers and takes part."""
        self.stale = False

    def note_session(self, session_id: int | None) -> bool:
        """Note a (re)connected session; returns whether it replaced the registered one."""
        if session_id is not None and session_id != self.registered_session:
            self.session_replaced = True
        return self.session_replaced

    async def handle_new_session_if_needed(self) -> None:
        """Before a rebalance attempt: if the session was replaced, drop and re-register.

        As ``ZKSessionExpireListener.handleNewSession`` (0.10.2): the old session's ephemeral
        nodes are gone, so another member may own our partitions already; offsets consumed
        since the last commit are not committed (the original's ``resetState``).

        A member that deregistered on a poll timeout registers again here (not while it is
        still stale: it owns nothing then, and a replaced session waits for the rejoin too).
        """
        if self.stale:
            return
        if not self.session_replaced:
            if self.deregistered:
                await self.register()
            return
        await self.fetcher.stop_connections()
        dropped = self.ownership.release_all()
        self.offset_store.forget(dropped)
        self.ownership.clear_queues()
        for stream in self.streams():
            stream.clear()
        await self.register()
        self.session_replaced = False
        self.ownership.gate.reopen()

    def __repr__(self) -> str:
        sid = self.registered_session
        return (
            f"<Membership {self.path} [session {'-' if sid is None else hex(sid)}"
            f"{', replaced' if self.session_replaced else ''}"
            f"{', stale' if self.stale else ''}]>"
        )
