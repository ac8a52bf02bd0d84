"""Deleting a ZooKeeper-coordinated group, or one topic's nodes of it (Kafka 0.10.2).

:class:`DeleteTools` deletes what ``ConsumerGroupCommand --delete --zookeeper`` deletes
(``AdminUtils.deleteConsumerGroupInZK`` and its per-topic variants), refusing a group with
live members as the pure :func:`~aiozkconsumer.tools.admin.judges.group_deletion_refusal`
decides, and what the console consumer deletes unchecked (its own group, on exit; its offsets with
``--delete-consumer-offsets``, after :meth:`~DeleteTools.group_has_offsets`).
"""

from __future__ import annotations

import logging

from ...errors import UnknownTopicError
from ...zk import layout
from .errors import GroupActiveError, UnknownGroupError
from .judges import group_deletion_refusal
from .session import AdminSession

__all__ = ["DeleteTools"]

log = logging.getLogger(__name__)


class DeleteTools(AdminSession):
    """``groups delete``: a group, a topic of a group, a topic of every inactive group."""

    async def delete_group(self, group: str, *, force_malformed: bool = False) -> None:
        """Delete ``/consumers/<group>`` and everything below it, if no member is live.

        As ``AdminUtils.deleteConsumerGroupInZK`` (0.10.2). The check and the deletion are not
        atomic (as in the original): a member joining in between is not noticed.

        Args:
            group: the group id.
            force_malformed: also delete the group when every live member's registration
                node is malformed (a node left by hand, which no consumer can have
                written); a member whose registration parses still refuses the deletion.

        Raises:
            UnknownGroupError: the group does not exist.
            GroupActiveError: the group has live members (with ``force_malformed``: a live
                member whose registration parses).
        """
        await self._require_group(group)
        members = await self.member_ids(group)
        if members:
            healthy, malformed = await self._read_members(group)
            paths = [m.path for m in malformed]
            refusal = group_deletion_refusal(
                group,
                members,
                [m.consumer_id for m in healthy if m.registration is not None],
                paths,
                force_malformed=force_malformed,
            )
            if refusal is not None:
                raise refusal
            log.info("deleting group %s with malformed registrations: %s", group, ", ".join(paths))
        await self.zk.delete_recursive(layout.group_dir(group))

    async def delete_group_topic(self, group: str, topic: str) -> bool:
        """Delete a group's owner and offset nodes of one topic, if no member is live.

        As ``AdminUtils.deleteConsumerGroupInfoForTopicInZK``; when ``topic`` is the group's
        only topic the whole group is deleted.

        Returns:
            ``True`` if the whole group was deleted, ``False`` if only the topic's nodes.

        Raises:
            UnknownGroupError: the group does not exist.
            UnknownTopicError: the group has no owner or offset nodes for ``topic``.
            GroupActiveError: the group has live members.
        """
        await self._require_group(group)
        topics = await self.group_topics(group)
        if topic not in topics:
            raise UnknownTopicError(
                topic, f"Consumer group '{group}' has no information for topic '{topic}'."
            )
        members = await self.member_ids(group)
        if members:
            raise GroupActiveError(
                group,
                members,
                f"Delete for group '{group}' topic '{topic}' failed because its consumers are "
                "still active.",
            )
        if topics == [topic]:
            await self.zk.delete_recursive(layout.group_dir(group))
            return True
        await self.zk.delete_recursive(layout.owners_dir(group, topic))
        await self.zk.delete_recursive(layout.offsets_dir(group, topic))
        return False

    async def delete_topic_from_groups(self, topic: str) -> tuple[list[str], list[str]]:
        """Delete ``topic``'s nodes from every inactive group that has offsets for it.

        As ``AdminUtils.deleteAllConsumerGroupInfoForTopicInZK`` (``--delete --topic t``).

        Returns:
            ``(groups cleaned, active groups skipped)``, each sorted.
        """
        cleaned: list[str] = []
        skipped: list[str] = []
        for group in await self.list_groups():
            if not await self.zk.exists(layout.offsets_dir(group, topic)):
                continue
            try:
                await self.delete_group_topic(group, topic)
            except GroupActiveError:
                skipped.append(group)
            except (UnknownGroupError, UnknownTopicError):
                continue  # deleted meanwhile
            else:
                cleaned.append(group)
        return cleaned, skipped

    async def delete_group_unchecked(self, group: str) -> None:
        """Delete ``/consumers/<group>`` whatever its state (``ZkUtils.maybeDeletePath``).

        What the console consumer does with ``--delete-consumer-offsets`` and with its own
        generated group on exit. Missing nodes are fine.
        """
        await self.zk.delete_recursive(layout.group_dir(group))

    async def group_has_offsets(self, group: str) -> bool:
        """Whether ``/consumers/<group>/offsets`` exists (the console consumer's check)."""
        return await self.zk.exists(f"{layout.group_dir(group)}/offsets")
