"""A local cluster's listeners as clients see them: where each listener is, the properties
that reach it (TLS, SASL, ZooKeeper over TLS), the brokers' racks, and who connected, from
the brokers' request logs.

:class:`ListenerTools` is that part of :class:`~aiozkconsumer.testing.cluster.LocalCluster`;
the answers themselves are pure (:mod:`~aiozkconsumer.testing._cluster_access`,
:mod:`~aiozkconsumer.testing._request_log`).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiozkconsumer.testing import _cluster_access
from aiozkconsumer.testing._cluster_base import ClusterCore
from aiozkconsumer.testing._errors import LocalClusterError
from aiozkconsumer.testing._processes import HOST
from aiozkconsumer.testing._request_log import count_requests, principals
from aiozkconsumer.testing.security import TEST_USER

__all__ = ["ListenerTools"]

_PRINCIPAL_POLL_S = 0.05


class ListenerTools(ClusterCore):
    """Listener addresses, client properties, racks and request logs."""

    @property
    def zookeeper_secure_connect(self) -> str:
        """Connect string of ZooKeeper's TLS port, ``"127.0.0.1:<port>"``.

        The same server as :attr:`zookeeper_connect`; TLS clients trust
        ``security.ca_file`` and may present the client certificate (x509 id
        :data:`~aiozkconsumer.testing.security.CLIENT_DN`).

        Raises:
            LocalClusterError: if ZooKeeper has no TLS port (``zookeeper_tls`` not set) or
                the cluster was never started.
        """
        options = self._settings.security
        if options is None or not options.zookeeper_tls:
            raise LocalClusterError(
                "ZooKeeper has no TLS port: use security=ClusterSecurity(zookeeper_tls=True)"
            )
        if self._zk_secure_port is None:
            raise LocalClusterError("the cluster was not started")
        return f"{HOST}:{self._zk_secure_port}"

    def bootstrap_servers_for(self, listener: str) -> str:
        """Bootstrap servers of one listener, ``"127.0.0.1:<port>,..."`` in broker id order.

        Args:
            listener: ``"PLAINTEXT"`` (the same as :attr:`bootstrap_servers`: the direct
                path, also with proxied links), or on a secured cluster ``"SSL"``,
                ``"MTLS"``, ``"SASL_SSL"``, ``"SASL_PLAINTEXT"`` or ``"SSL_WRONG_HOST"``
                (case does not matter).

        Raises:
            ValueError: if there is no such listener (or the cluster is not secured).
            LocalClusterError: if the cluster was never started.
        """
        if listener.upper() == "PLAINTEXT":
            return self.bootstrap_servers
        return _cluster_access.secured_bootstrap(listener, self._secure_ports, secured=self.secured)

    def client_properties(
        self, listener: str, mechanism: str | None = None, *, user: str = TEST_USER
    ) -> dict[str, str]:
        """The Java-client-style consumer properties that reach the brokers on a listener.

        Keys (only those the listener needs): ``bootstrap.servers``, ``security.protocol``
        (``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``), ``ssl.cafile`` (TLS
        listeners), ``ssl.certfile`` and ``ssl.keyfile`` (``MTLS`` only), ``sasl.mechanism``
        and, except for OAUTHBEARER, ``sasl.username`` and ``sasl.password``. For
        OAUTHBEARER no token is given: make one with
        :func:`~aiozkconsumer.testing.security.unsecured_jwt`. E.g.
        ``client_properties("SASL_SSL", "SCRAM-SHA-512")`` ->
        ``{"bootstrap.servers": "127.0.0.1:40123", "security.protocol": "SASL_SSL",
        "ssl.cafile": ".../security/ca.pem", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice", "sasl.password": "..."}``.

        Args:
            listener: as for :meth:`bootstrap_servers_for`.
            mechanism: the SASL mechanism (required on ``SASL_SSL`` and ``SASL_PLAINTEXT``,
                refused elsewhere): ``"PLAIN"``, ``"SCRAM-SHA-256"``, ``"SCRAM-SHA-512"`` or
                ``"OAUTHBEARER"``.
            user: whose name and password (``"alice"`` or ``"admin"``).

        Returns:
            A new dict of strings.

        Raises:
            ValueError: for an unknown listener or mechanism, a mechanism missing on (or
                given for a non-) SASL listener, or an unknown user.
            LocalClusterError: if the cluster was never started.
        """
        name = listener.upper()
        bootstrap = self.bootstrap_servers_for(name)
        return _cluster_access.client_properties(
            name, bootstrap, self._material, mechanism, user=user
        )

    def zookeeper_client_properties(self, *, client_cert: bool = True) -> dict[str, str]:
        """Consumer properties that reach ZooKeeper over TLS.

        ``{"zookeeper.connect": <zookeeper_secure_connect>, "zookeeper.ssl.client.enable":
        "true", "zookeeper.ssl.cafile": ..., "zookeeper.ssl.certfile": ...,
        "zookeeper.ssl.keyfile": ...}``.

        Args:
            client_cert: include the client certificate and key (the connection then
                authenticates as ``x509:`` :data:`~aiozkconsumer.testing.security.CLIENT_DN`).

        Raises:
            LocalClusterError: if ZooKeeper has no TLS port or the cluster was never started.
        """
        return _cluster_access.zookeeper_client_properties(
            self.zookeeper_secure_connect, self.security, client_cert=client_cert
        )

    @property
    def broker_racks(self) -> dict[int, str]:
        """Broker id -> its ``broker.rack`` (empty when built without ``broker_racks``)."""
        return dict(enumerate(self._settings.broker_racks or ()))

    @property
    def request_log_files(self) -> dict[int, Path]:
        """Broker id -> its request log (``request_log=True``, or secured clusters with
        ``request_log``; else empty).

        One line per completed request, with its principal and listener; read by
        :meth:`principals_seen` and :meth:`requests_logged`.
        """
        return dict(self._request_logs)

    def requests_logged(self, api_key: int, *, client_id: str | None = None) -> dict[int, int]:
        """How many requests of one API each broker served, from the brokers' request logs.

        A request is logged just after its response is sent, so one answered a moment ago
        may not be counted yet.

        Args:
            api_key: the request's API key (1: Fetch).
            client_id: only requests with this ``client.id`` in their header (a broker's
                own replica fetches carry e.g. ``broker-1-fetcher-0``).

        Returns:
            Broker id -> the number of such requests in its log.

        Raises:
            LocalClusterError: the cluster was not started with a request log.
        """
        if not self._request_logs:
            raise LocalClusterError("requests_logged needs a started cluster with request_log")
        return {
            broker_id: count_requests(path, api_key, client_id)
            for broker_id, path in self._request_logs.items()
        }

    def principals_seen(
        self, broker_id: int | None = None, *, listener: str | None = None
    ) -> set[str]:
        """The principals the brokers served requests for, from their request logs.

        A connection that authenticated (TLS client certificate, SASL) shows up with the
        principal the broker gave it, e.g. ``{"User:ANONYMOUS", "User:alice"}``: the
        cluster's own PLAINTEXT clients (and, in KRaft, the controller's traffic) are
        ``User:ANONYMOUS``. A request is logged just after its response is sent: to check
        a connection that made a single request, use :meth:`wait_for_principal`.

        Args:
            broker_id: one broker's log only (default: every broker).
            listener: only requests that came in on this listener (e.g. ``"SASL_SSL"``).

        Returns:
            The principals, as ``"<type>:<name>"`` strings.

        Raises:
            LocalClusterError: if the cluster is not secured, was not started, or was
                started with ``request_log=False``.
            KeyError: if there is no such broker.
        """
        options = self._settings.security
        if options is None or not options.request_log:
            raise LocalClusterError("principals_seen needs a secured cluster with request_log=True")
        if not self._request_logs:
            raise LocalClusterError("the cluster was not started")
        if broker_id is None:
            files = list(self._request_logs.values())
        else:
            self._broker(broker_id)
            files = [self._request_logs[broker_id]]
        connections = [pair for path in files for pair in self._logged_connections.read(path)]
        return principals(connections, listener)

    async def wait_for_principal(
        self,
        principal: str,
        broker_id: int | None = None,
        *,
        listener: str | None = None,
        time_limit: float = 10.0,
    ) -> None:
        """Wait until :meth:`principals_seen` includes ``principal``.

        Args:
            principal: e.g. ``"User:alice"``.
            broker_id: as for :meth:`principals_seen`.
            listener: as for :meth:`principals_seen`.
            time_limit: seconds.

        Raises:
            LocalClusterError: if it does not show up within ``time_limit`` (the message
                lists what was seen), or as for :meth:`principals_seen`.
        """
        deadline = time.monotonic() + time_limit
        while True:
            seen = self.principals_seen(broker_id, listener=listener)
            if principal in seen:
                return
            if time.monotonic() > deadline:
                where = f" on {listener}" if listener else ""
                raise LocalClusterError(
                    f"no request from {principal}{where} within {time_limit:.0f} s; "
                    f"seen: {sorted(seen)}"
                )
            await asyncio.sleep(_PRINCIPAL_POLL_S)
