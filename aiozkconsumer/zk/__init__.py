"""The ZooKeeper adapter: the only package that imports aiozk.

- :mod:`.client`: ``ZkClient``, one session with the consumer's idioms, errors translated;
- :mod:`.session`: aiozk's session and connection, reconnecting promptly, with TLS and auth;
- :mod:`.layout`: the ZooKeeper paths and node codecs of the original (pure);
- :mod:`.ops`: operations as data, what one transaction (``ZkClient.multi``) is made of (pure);
- :mod:`.retry`: the connection-loss retry policy (``retryUntilConnected``).
"""
