"""How clients reach a local cluster's listeners, on their own: the bootstrap servers of a
secured listener and the client properties per listener and mechanism (fake key material,
no servers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiozkconsumer.testing._cluster_access import (
    client_properties,
    secured_bootstrap,
    zookeeper_client_properties,
)
from aiozkconsumer.testing._errors import LocalClusterError
from aiozkconsumer.testing.security import SASL_MECHANISMS, SECURE_LISTENERS, SecurityMaterial

PORTS = {
    broker: {name: 9000 + 100 * broker + i for i, name in enumerate(SECURE_LISTENERS, 1)}
    for broker in (0, 1)
}


@pytest.fixture
def material(tmp_path: Path) -> SecurityMaterial:
    return SecurityMaterial(
        directory=tmp_path,
        ca_file=tmp_path / "ca.pem",
        client_cert_file=tmp_path / "client.pem",
        client_key_file=tmp_path / "client.key",
        server_keystore_file=tmp_path / "server.pem",
        wrong_ca_file=tmp_path / "wrong-ca.pem",
        wrong_host_keystore_file=tmp_path / "wrong-host.pem",
        passwords={"alice": "a-secret", "admin": "b-secret"},
        zookeeper_super_user="super",
        zookeeper_super_password="s-secret",
    )


def test_a_secured_listener_is_found_in_any_case_in_broker_order() -> None:
    assert secured_bootstrap("sasl_ssl", PORTS, secured=True) == "127.0.0.1:9003,127.0.0.1:9103"
    assert secured_bootstrap("MTLS", PORTS, secured=True) == "127.0.0.1:9002,127.0.0.1:9102"


def test_unknown_listeners_name_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match=r"no listener 'internal'; this cluster has PLAINTEXT, SSL"
    ):
        secured_bootstrap("internal", PORTS, secured=True)
    with pytest.raises(ValueError, match=r"no listener 'ssl'; this cluster has PLAINTEXT$"):
        secured_bootstrap("ssl", {}, secured=False)


def test_a_secured_listener_of_a_cluster_not_started_is_an_error() -> None:
    with pytest.raises(LocalClusterError, match="not started"):
        secured_bootstrap("SSL", {}, secured=True)


def test_plaintext_needs_no_material_and_takes_no_mechanism() -> None:
    assert client_properties("PLAINTEXT", "h:1", None) == {
        "bootstrap.servers": "h:1",
        "security.protocol": "PLAINTEXT",
    }
    with pytest.raises(ValueError, match="PLAINTEXT is not a SASL listener"):
        client_properties("PLAINTEXT", "h:1", None, "PLAIN")


def test_tls_listeners_trust_the_ca_and_mtls_presents_the_client_certificate(
    material: SecurityMaterial,
) -> None:
    assert client_properties("SSL", "h:1", material) == {
        "bootstrap.servers": "h:1",
        "security.protocol": "SSL",
        "ssl.cafile": str(material.ca_file),
    }
    mtls = client_properties("MTLS", "h:2", material)
    assert mtls["security.protocol"] == "SSL"
    assert mtls["ssl.certfile"] == str(material.client_cert_file)
    assert mtls["ssl.keyfile"] == str(material.client_key_file)
    assert "ssl.certfile" not in client_properties("SSL_WRONG_HOST", "h:3", material)
    with pytest.raises(ValueError, match="MTLS is not a SASL listener"):
        client_properties("MTLS", "h:2", material, "PLAIN")


@pytest.mark.parametrize("mechanism", [m for m in SASL_MECHANISMS if m != "OAUTHBEARER"])
def test_sasl_listeners_carry_the_users_name_and_password(
    material: SecurityMaterial, mechanism: str
) -> None:
    props = client_properties("SASL_SSL", "h:1", material, mechanism.lower(), user="admin")
    assert props["sasl.mechanism"] == mechanism
    assert (props["sasl.username"], props["sasl.password"]) == ("admin", "b-secret")
    assert props["ssl.cafile"] == str(material.ca_file)
    plain = client_properties("SASL_PLAINTEXT", "h:1", material, mechanism)
    assert plain["security.protocol"] == "SASL_PLAINTEXT" and "ssl.cafile" not in plain
    assert plain["sasl.username"] == "alice"


def test_oauthbearer_gets_no_password(material: SecurityMaterial) -> None:
    props = client_properties("SASL_SSL", "h:1", material, "OAUTHBEARER", user="nobody")
    assert props["sasl.mechanism"] == "OAUTHBEARER"
    assert "sasl.username" not in props and "sasl.password" not in props


def test_sasl_refuses_a_missing_or_unknown_mechanism_and_unknown_users(
    material: SecurityMaterial,
) -> None:
    with pytest.raises(ValueError, match="SASL_SSL needs a SASL mechanism, one of PLAIN"):
        client_properties("SASL_SSL", "h:1", material)
    with pytest.raises(ValueError, match="got 'GSSAPI'"):
        client_properties("SASL_SSL", "h:1", material, "GSSAPI")
    with pytest.raises(ValueError, match="no user 'mallory'; the users are alice, admin"):
        client_properties("SASL_SSL", "h:1", material, "PLAIN", user="mallory")


def test_secured_listeners_need_the_material_made_at_start() -> None:
    with pytest.raises(LocalClusterError, match="key material"):
        client_properties("SSL", "h:1", None)


def test_zookeeper_over_tls_with_and_without_the_client_certificate(
    material: SecurityMaterial,
) -> None:
    props = zookeeper_client_properties("127.0.0.1:2182", material)
    assert props == {
        "zookeeper.connect": "127.0.0.1:2182",
        "zookeeper.ssl.client.enable": "true",
        "zookeeper.ssl.cafile": str(material.ca_file),
        "zookeeper.ssl.certfile": str(material.client_cert_file),
        "zookeeper.ssl.keyfile": str(material.client_key_file),
    }
    bare = zookeeper_client_properties("127.0.0.1:2182", material, client_cert=False)
    assert set(bare) == {"zookeeper.connect", "zookeeper.ssl.client.enable", "zookeeper.ssl.cafile"}
