"""The ZooKeeper wing: the recipes of a ZooKeeper-coordinated group, over the ``zk/`` adapter.

As kazoo keeps ``recipe/`` over its protocol and handlers:

- :mod:`.membership`: this member's registration under ``/consumers/<group>/ids``, and the
  reset a replaced session requires;
- :mod:`.watches`: the group's watches (members, topics, brokers) that trigger rebalances;
- :mod:`.lease`: the session lease that holds records back when the session may be gone;
- :mod:`.view`: the group's view a rebalance plans from;
- :mod:`.owners`: the owner nodes and fencing tokens (claim, wait, undo, fence, delete);
- :mod:`.phases`: where a rebalance's time went (pure);
- :mod:`.rebalancer`: ``syncedRebalance``, the serialized rebalance that carries the plan
  (``plan.py``) out through the hand-over.
"""
