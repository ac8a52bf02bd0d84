"""How a client reaches a local cluster's listeners: pure (ports and key material in,
addresses and Java-client-style properties out; nothing is opened or read).

The answers behind :meth:`LocalCluster.bootstrap_servers_for
<aiozkconsumer.testing.cluster.LocalCluster.bootstrap_servers_for>`,
:meth:`~aiozkconsumer.testing.cluster.LocalCluster.client_properties` and
:meth:`~aiozkconsumer.testing.cluster.LocalCluster.zookeeper_client_properties`.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiozkconsumer.testing._errors import LocalClusterError
from aiozkconsumer.testing._processes import HOST
from aiozkconsumer.testing.security import (
    LISTENER_PROTOCOLS,
    SASL_MECHANISMS,
    SECURE_LISTENERS,
    TEST_USER,
    SecurityMaterial,
)

__all__ = ["client_properties", "secured_bootstrap", "zookeeper_client_properties"]


def secured_bootstrap(
    listener: str, secure_ports: Mapping[int, Mapping[str, int]], *, secured: bool
) -> str:
    """Bootstrap servers of a secured listener, ``"127.0.0.1:<port>,..."`` in broker order.

    Args:
        listener: the listener's name, any case (``"PLAINTEXT"`` is the caller's to answer).
        secure_ports: broker id -> listener name -> port (empty before the start).
        secured: whether the cluster has secured listeners.

    Raises:
        ValueError: if there is no such listener (or the cluster is not secured).
        LocalClusterError: if the cluster was never started.
    """
    name = listener.upper()
    if name not in SECURE_LISTENERS or not secured:
        known = ("PLAINTEXT", *SECURE_LISTENERS) if secured else ("PLAINTEXT",)
        raise ValueError(f"no listener {listener!r}; this cluster has {', '.join(known)}")
    if not secure_ports:
        raise LocalClusterError("the cluster was not started")
    return ",".join(f"{HOST}:{ports[name]}" for ports in secure_ports.values())


def client_properties(
    listener: str,
    bootstrap_servers: str,
    material: SecurityMaterial | None,
    mechanism: str | None = None,
    *,
    user: str = TEST_USER,
) -> dict[str, str]:
    """The consumer properties that reach the brokers on a listener (see
    ``LocalCluster.client_properties``).

    Args:
        listener: a known listener's name, upper case.
        bootstrap_servers: that listener's bootstrap servers.
        material: the cluster's key material (None only for ``PLAINTEXT``).
        mechanism: the SASL mechanism (SASL listeners only).
        user: whose name and password.

    Returns:
        A new dict of strings.

    Raises:
        ValueError: for an unknown mechanism, a mechanism missing on (or given for a non-)
            SASL listener, or an unknown user.
    """
    props = {"bootstrap.servers": bootstrap_servers}
    protocol = LISTENER_PROTOCOLS[listener]
    props["security.protocol"] = protocol
    sasl = protocol.startswith("SASL_")
    if mechanism is not None and not sasl:
        raise ValueError(f"{listener} is not a SASL listener; no mechanism applies")
    if protocol == "PLAINTEXT":
        return props
    if material is None:
        raise LocalClusterError("the cluster's key material is made when it starts")
    if protocol.endswith("SSL"):
        props["ssl.cafile"] = str(material.ca_file)
    if listener == "MTLS":
        props["ssl.certfile"] = str(material.client_cert_file)
        props["ssl.keyfile"] = str(material.client_key_file)
    if not sasl:
        return props
    chosen = (mechanism or "").upper()
    if chosen not in SASL_MECHANISMS:
        raise ValueError(
            f"{listener} needs a SASL mechanism, one of {', '.join(SASL_MECHANISMS)}; "
            f"got {mechanism!r}"
        )
    props["sasl.mechanism"] = chosen
    if chosen != "OAUTHBEARER":
        if user not in material.passwords:
            raise ValueError(f"no user {user!r}; the users are {', '.join(material.users)}")
        props["sasl.username"] = user
        props["sasl.password"] = material.passwords[user]
    return props


def zookeeper_client_properties(
    connect: str, material: SecurityMaterial, *, client_cert: bool = True
) -> dict[str, str]:
    """Consumer properties that reach ZooKeeper's TLS port at ``connect`` (see
    ``LocalCluster.zookeeper_client_properties``)."""
    props = {
        "zookeeper.connect": connect,
        "zookeeper.ssl.client.enable": "true",
        "zookeeper.ssl.cafile": str(material.ca_file),
    }
    if client_cert:
        props["zookeeper.ssl.certfile"] = str(material.client_cert_file)
        props["zookeeper.ssl.keyfile"] = str(material.client_key_file)
    return props
