"""Test-kit codecs of the broker-side ZooKeeper nodes, which the consumer never writes.

Brokers and the controller write ``/brokers/ids/<id>``, ``/brokers/topics/<topic>`` and
``/brokers/topics/<topic>/partitions/<p>/state``; the consumer only reads the first two
(:mod:`aiozkconsumer.zk.layout` decodes them). Tests that stage these nodes without a broker
write them with the encoders here. The partition state node, which the consumer does not read
at all, has its decoder here too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aiozkconsumer.zk.layout import (
    BrokerInfo,
    _fail,
    _int_list,
    _load_object,
    _require_int,
)

__all__ = [
    "PartitionState",
    "decode_partition_state",
    "encode_broker",
    "encode_partition_state",
    "encode_topic_partitions",
]


def encode_broker(info: BrokerInfo) -> bytes:
    """Encode a broker registration in the shape Kafka writes for ``info.version``.

    The consumer never writes broker nodes; tests do, to stage a cluster. Kafka writes
    these keys from a hash map, so their order is not part of the format; this uses the order
    Kafka 3.9 happens to produce for version 5 (``features``,
    ``listener_security_protocol_map``, ``endpoints``, ``jmx_port``, ``port``, ``host``,
    ``version``, ``timestamp``, then ``rack``), dropping what a version does not have.

    Args:
        info: the registration; ``timestamp_ms`` ``None`` writes ``"0"``.

    Returns:
        The node's UTF-8 data (no spaces).
    """
    obj: dict[str, object] = {}
    if info.version >= 5:
        obj["features"] = {}
    if info.version >= 4:
        obj["listener_security_protocol_map"] = dict(
            info.listener_security_protocol_map
            if info.listener_security_protocol_map is not None
            else {
                e.listener_name: e.security_protocol or e.listener_name
                for e in info.parsed_endpoints()
            }
        )
    if info.version >= 2:
        obj["endpoints"] = list(info.endpoints)
    obj["jmx_port"] = info.jmx_port
    obj["port"] = info.port
    obj["host"] = info.host
    obj["version"] = info.version
    obj["timestamp"] = str(info.timestamp_ms if info.timestamp_ms is not None else 0)
    if info.version >= 3 and info.rack is not None:
        obj["rack"] = info.rack
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_topic_partitions(assignment: Mapping[int, Sequence[int]]) -> bytes:
    """Encode a topic's replica assignment as a version 1 node.

    Args:
        assignment: partition id -> replica broker ids.

    Returns:
        ``{"version":1,"partitions":{"0":[1,2],...}}`` with partitions in numeric order.

    Raises:
        ValueError: a partition id is negative.
    """
    parts: list[str] = []
    for partition, replicas in sorted(assignment.items()):
        if partition < 0:
            raise ValueError(f"partition ids must be >= 0, got {partition}")
        parts.append(f'"{partition}":[{",".join(str(int(r)) for r in replicas)}]')
    return ('{"version":1,"partitions":{' + ",".join(parts) + "}}").encode("ascii")


@dataclass(frozen=True)
class PartitionState:
    """A partition's leader and ISR, from ``/brokers/topics/<t>/partitions/<p>/state``.

    Attributes:
        leader: the leader's broker id, -1 when the partition has no leader.
        leader_epoch: the leader epoch.
        isr: the in-sync replicas' broker ids.
        controller_epoch: the epoch of the controller that wrote the state.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int


def decode_partition_state(data: bytes | None, path: str | None = None) -> PartitionState:
    """Decode a partition state node (``{"controller_epoch":1,"leader":1,...,"isr":[1]}``).

    Extra keys (``version``, Kafka 3.x's ``leader_recovery_state``) are ignored.

    Args:
        data: the node's data.
        path: the node's path, for error messages.

    Returns:
        The partition state.

    Raises:
        MalformedZookeeperDataError: the data is missing or not a UTF-8 JSON object, or
            ``leader``, ``leader_epoch``, ``isr`` or ``controller_epoch`` is missing or has
            the wrong type.
    """
    obj = _load_object(data, path, "partition state")
    leader = _require_int(obj, "leader", path, data)
    leader_epoch = _require_int(obj, "leader_epoch", path, data)
    if "isr" not in obj:
        _fail(path, data, "missing field 'isr'")
    isr = _int_list(obj["isr"], "'isr'", path, data)
    controller_epoch = _require_int(obj, "controller_epoch", path, data)
    return PartitionState(leader, leader_epoch, tuple(isr), controller_epoch)


def encode_partition_state(state: PartitionState) -> bytes:
    """Encode a partition state node as the 0.10.2 controller writes it.

    Args:
        state: the partition state.

    Returns:
        ``{"controller_epoch":..,"leader":..,"version":1,"leader_epoch":..,"isr":[..]}``.
    """
    isr = ",".join(str(b) for b in state.isr)
    return (
        f'{{"controller_epoch":{state.controller_epoch},"leader":{state.leader},'
        f'"version":1,"leader_epoch":{state.leader_epoch},"isr":[{isr}]}}'
    ).encode("ascii")
