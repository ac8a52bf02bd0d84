"""The Kafka wing: the members of a Kafka-coordinated group.

- :mod:`.base`: what both members share (``GroupMember``: the retry loop, the assignment's
  acquisition through the hand-over, the heartbeat skeleton, the history);
- :mod:`.classic`: the classic protocol (JoinGroup/SyncGroup, client-side assignors);
- :mod:`.consumer_protocol`: KIP-848 (``ConsumerGroupHeartbeat``, broker-side assignment);
- :mod:`.assignors`: the Java client's assignors (range, roundrobin, sticky,
  cooperative-sticky) as pure functions;
- :mod:`.state`: the member state machine, pure.
"""
