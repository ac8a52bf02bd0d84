"""Group administration over ZooKeeper: the old consumer's group and offset tools (Kafka 0.10.2.1).

:class:`GroupAdmin` holds one ZooKeeper session and one
:class:`~aiozkconsumer.cluster.ClusterView` (brokers, topics, partitions and, when needed, a
Kafka client) for: listing, describing and deleting groups (``ConsumerGroupCommand
--zookeeper``), the offset checker's view (``ConsumerOffsetChecker``), offset export / import /
update (``ExportZkOffsets``, ``ImportZkOffsets``, ``UpdateOffsetsInZK``), the offsets reset of
``kafka-consumer-groups.sh --reset-offsets`` (planned by :mod:`aiozkconsumer.tools.reset`) and the
rebalance check (``VerifyConsumerRebalance``, whose rules are the pure :func:`check_ownership`).
A group's members and state (:meth:`GroupAdmin.describe_members`,
:meth:`GroupAdmin.describe_state`) are judged by the pure :func:`group_state` and
:func:`infer_assignment_strategy`.

A node of a group that does not parse (a registration or offset node written by hand) does not
fail a description: it is reported as a :class:`MalformedNode` beside what did parse.

Whether topics and partitions come from ZooKeeper's ``/brokers/topics`` or from Kafka metadata
is decided by the view (:func:`~aiozkconsumer.cluster.metadata_source`, as the connector's
``cluster.metadata.source=auto``): Kafka when ZooKeeper has no ``/brokers/ids`` (a KRaft
cluster) and ``bootstrap_servers`` is given.

One job a module:

- :mod:`~aiozkconsumer.tools.admin.session`: the ZooKeeper session, the cluster view and the
  reads every tool shares (:class:`~aiozkconsumer.tools.admin.session.AdminSession`);
- :mod:`~aiozkconsumer.tools.admin.describe`: describe a group, its members and state; verify
  a rebalance; and the records of what it finds;
- :mod:`~aiozkconsumer.tools.admin.offsets`: a group's committed offsets in ZooKeeper and
  Kafka; export, import, update;
- :mod:`~aiozkconsumer.tools.admin.reset`: the offsets reset;
- :mod:`~aiozkconsumer.tools.admin.delete`: delete a group or a topic's nodes of it;
- :mod:`~aiozkconsumer.tools.admin.judges`: the pure decisions (no I/O);
- :mod:`~aiozkconsumer.tools.admin.nodes` and :mod:`~aiozkconsumer.tools.admin.errors`: the
  nodes read (a member, a node that does not parse) and the tools' refusals.
"""

from __future__ import annotations

from .delete import DeleteTools
from .describe import (
    DescribeTools,
    GroupDescription,
    GroupMembers,
    GroupState,
    MemberDescription,
    OffsetsStorage,
    PartitionOffsetState,
    RebalanceVerification,
)
from .errors import GroupActiveError, UnknownGroupError
from .judges import (
    GROUP_STABILITY,
    check_ownership,
    consumer_id_host,
    group_state,
    infer_assignment_strategy,
    owner_consumer_id,
)
from .nodes import MalformedNode, MemberInfo
from .offsets import ResetStorage
from .reset import ResetTools

__all__ = [
    "GROUP_STABILITY",
    "GroupActiveError",
    "GroupAdmin",
    "GroupDescription",
    "GroupMembers",
    "GroupState",
    "MalformedNode",
    "MemberDescription",
    "MemberInfo",
    "OffsetsStorage",
    "PartitionOffsetState",
    "RebalanceVerification",
    "ResetStorage",
    "UnknownGroupError",
    "check_ownership",
    "consumer_id_host",
    "group_state",
    "infer_assignment_strategy",
    "owner_consumer_id",
]


class GroupAdmin(ResetTools, DeleteTools, DescribeTools):
    """The group and offset tools over one ZooKeeper session.

    Use as an async context manager::

        async with GroupAdmin("127.0.0.1:2181") as admin:
            print(await admin.list_groups())
            description = await admin.describe_group("billing")

    Brokers, topics and partitions come from its :class:`~aiozkconsumer.cluster.ClusterView`
    (:attr:`cluster`), which also starts the Kafka client on first need (log end offsets,
    earliest offsets, Kafka metadata, Kafka-stored offsets), from ``bootstrap_servers`` or else
    from the brokers registered in ZooKeeper.

    Args:
        zookeeper_connect: ``host:port[,host:port...][/chroot]``.
        bootstrap_servers: Kafka brokers, ``host:port[,...]``; default: the PLAINTEXT
            endpoints of the brokers under ``/brokers/ids``. Needed for KRaft clusters.
        connection_timeout_ms: ``zookeeper.connection.timeout.ms``: how long :meth:`start`
            waits for a ZooKeeper session.
        session_timeout_ms: ``zookeeper.session.timeout.ms``; also bounds each ZooKeeper
            request while the connection is down.
        request_timeout_ms: ``socket.timeout.ms`` of Kafka requests.
        client_id: ``client.id`` of Kafka requests.
        zookeeper_security: TLS, credentials and the ACL of the nodes the tools create
            (offsets written by ``offsets import``/``reset``), as
            :func:`~aiozkconsumer.config.zookeeper_security_from_properties` reads them from
            ``--zk-tls-config-file`` / ``--command-config``, or
            :meth:`ZookeeperSecurity.from_config
            <aiozkconsumer.security.ZookeeperSecurity.from_config>`; default none.
        security: TLS and SASL of the Kafka connections (``--command-config``); default
            plaintext.

    Attributes:
        zk: the ZooKeeper session.
        cluster: the view of the cluster over ``zk`` (``cluster.metadata.source=auto``).
    """
