"""The security keys of ConsumerConfig, the JAAS reader and the TLS context builder (no servers)."""

from __future__ import annotations

import json
import logging
import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme
from click.testing import CliRunner

from aiozkconsumer.cli import cli
from aiozkconsumer.config import (
    ConsumerConfig,
    kafka_security_from_properties,
    zookeeper_security_from_properties,
)
from aiozkconsumer.errors import InvalidConfigError, MalformedZookeeperDataError
from aiozkconsumer.security import KafkaSecurity, ZookeeperSecurity, jaas_credentials
from aiozkconsumer.zk.layout import decode_broker

CANARY = "canary-pw-7f3a9c"
KAFKA = {"group.id": "g", "group.coordinator": "kafka", "bootstrap.servers": "h:9093"}
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="alice" password="{CANARY}";'
)


def build(**props: Any) -> ConsumerConfig:
    return ConsumerConfig.from_properties({**KAFKA, **props})


def refused(key: str, **props: Any) -> InvalidConfigError:
    with pytest.raises(InvalidConfigError) as info:
        build(**props)
    assert info.value.key == key, str(info.value)
    assert CANARY not in str(info.value)
    return info.value


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    d = tmp_path_factory.mktemp("pki")
    paths = {
        "ca": d / "ca.pem",
        "cert": d / "cert.pem",
        "key": d / "key.pem",
        "both": d / "both.pem",
        "garbage": d / "garbage.pem",
        "jks": d / "store.jks",
    }
    ca.cert_pem.write_to_path(str(paths["ca"]))
    cert.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    cert.private_key_pem.write_to_path(str(paths["key"]))
    cert.private_key_and_cert_chain_pem.write_to_path(str(paths["both"]))
    paths["garbage"].write_text(
        "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
    )
    paths["jks"].write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02binary")
    return paths


# ---- the Java client's properties, as a properties file holds them -----------------------


def test_a_java_client_properties_file_builds_a_sasl_ssl_config(pki: dict[str, Path]) -> None:
    config = build(
        **{
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": SCRAM_JAAS,
            "ssl.truststore.location": str(pki["ca"]),
            "ssl.truststore.type": "PEM",
        }
    )
    assert config.security_protocol == "SASL_SSL"
    assert (config.sasl_username, config.sasl_password) == ("alice", CANARY)
    assert config.ssl_cafile == str(pki["ca"])
    security = KafkaSecurity.from_config(config)
    assert security.tls and security.sasl and security.describe() == "SASL_SSL/SCRAM-SHA-512"
    assert isinstance(security.ssl_context, ssl.SSLContext)
    assert security.ssl_context.check_hostname
    assert security.ssl_context.verify_mode == ssl.CERT_REQUIRED


def test_secrets_never_appear_in_repr_properties_errors_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    config = build(
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": SCRAM_JAAS,
            "zookeeper.auth": f"digest:alice:{CANARY}",
        }
    )
    security = KafkaSecurity.from_config(config)
    for text in (
        repr(config),
        str(config),
        repr(security),
        repr(ZookeeperSecurity.from_config(config)),
    ):
        assert CANARY not in text
        assert "alice" not in text or "sasl_username" in text
    assert "[hidden]" in repr(config)
    # A secret of the wrong type is refused without echoing it.
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(
            **{**{k.replace(".", "_"): v for k, v in KAFKA.items()}}, sasl_password=1234567
        )
    assert "1234567" not in str(info.value)
    assert CANARY not in caplog.text


def test_the_java_client_and_kip_1139_oauth_names_are_read() -> None:
    config = build(
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
            "sasl.oauthbearer.client.credentials.client.id": "svc",
            "sasl.oauthbearer.client.credentials.client.secret": CANARY,
            "sasl.oauthbearer.scope": "kafka",
        }
    )
    assert config.sasl_oauthbearer_client_id == "svc"
    assert config.sasl_oauthbearer_client_secret == CANARY
    assert CANARY not in repr(config) and CANARY not in repr(KafkaSecurity.from_config(config))


def test_oauthbearer_jaas_options_fill_the_client_credentials() -> None:
    jaas = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'clientId="svc" clientSecret="{CANARY}" scope="kafka";'
    )
    config = build(
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": jaas,
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        }
    )
    assert (config.sasl_oauthbearer_client_id, config.sasl_oauthbearer_scope) == ("svc", "kafka")


# ---- the JAAS reader ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mechanism", "expected"),
    [
        (
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
            'password="p w;x";',
            "PLAIN",
            {"sasl_username": "u", "sasl_password": "p w;x"},
        ),
        (
            "org.apache.kafka.common.security.scram.ScramLoginModule required\n"
            '  username=bob\n  password="a\\"b";',
            "SCRAM-SHA-256",
            {"sasl_username": "bob", "sasl_password": 'a"b'},
        ),
        (
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
            'keyTab="/etc/k.keytab" principal="c@EXAMPLE";',
            "GSSAPI",
            {},
        ),
    ],
)
def test_jaas_entries_are_read(text: str, mechanism: str, expected: dict[str, str]) -> None:
    assert jaas_credentials(text, mechanism) == expected


@pytest.mark.parametrize(
    ("text", "mechanism", "words"),
    [
        (SCRAM_JAAS, "PLAIN", "ScramLoginModule is not used by sasl.mechanism=PLAIN"),
        (f"PlainLoginModule password={CANARY}", "PLAIN", "is not a JAAS entry"),
        (f"org.example.Custom required password={CANARY};", "PLAIN", "is not one of"),
    ],
)
def test_a_wrong_jaas_entry_names_the_problem_not_the_secret(
    text: str, mechanism: str, words: str
) -> None:
    with pytest.raises(InvalidConfigError) as info:
        jaas_credentials(text, mechanism)
    assert info.value.key == "sasl.jaas.config"
    assert words in str(info.value)
    assert CANARY not in str(info.value)


# ---- impossible combinations: the key at fault is named -----------------------------------


def test_sasl_keys_with_a_protocol_without_sasl_are_refused() -> None:
    err = refused("sasl.username", **{"sasl.username": "u", "sasl.password": CANARY})
    assert "security.protocol=PLAINTEXT does not use SASL" in str(err)
    refused("sasl.mechanism", **{"security.protocol": "SSL", "sasl.mechanism": "PLAIN"})
    refused("sasl.jaas.config", **{"security.protocol": "SSL", "sasl.jaas.config": SCRAM_JAAS})


def test_tls_files_with_a_protocol_without_tls_are_refused(pki: dict[str, Path]) -> None:
    err = refused(
        "ssl.cafile", **{"security.protocol": "SASL_PLAINTEXT", "ssl.cafile": str(pki["ca"])}
    )
    assert "does not use TLS" in str(err)


def test_missing_files_and_a_key_without_its_certificate_are_refused(
    pki: dict[str, Path], tmp_path: Path
) -> None:
    err = refused("ssl.cafile", **{"security.protocol": "SSL", "ssl.cafile": str(tmp_path / "x")})
    assert "no such file" in str(err)
    refused("ssl.keyfile", **{"security.protocol": "SSL", "ssl.keyfile": str(pki["key"])})


def test_mechanisms_without_their_credentials_are_refused() -> None:
    err = refused(
        "sasl.password",
        **{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"},
    )
    assert "required with sasl.mechanism=PLAIN" in str(err)
    refused(
        "sasl.oauthbearer.token.endpoint.url",
        **{"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
    )
    refused(
        "sasl.oauthbearer.client.id",
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        },
    )
    refused("security.protocol", **{"security.protocol": "TLS"})
    refused("isolation.level", **{"isolation.level": "committed"})


def test_a_token_provider_object_is_accepted_from_code_only() -> None:
    class Provider:
        async def token(self) -> str:
            return "t"

    config = ConsumerConfig(
        group_id="g",
        group_coordinator="kafka",
        bootstrap_servers="h:1",
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauthbearer_token_provider=Provider(),
    )
    assert "<Provider>" in repr(config)
    assert "sasl.oauthbearer.token.provider" not in config.to_properties()
    with pytest.raises(InvalidConfigError) as info:
        config.replace(sasl_oauthbearer_token_provider=object())
    assert info.value.key == "sasl.oauthbearer.token.provider"


def test_java_keystores_are_refused_with_advice_pem_stores_accepted(pki: dict[str, Path]) -> None:
    err = refused(
        "ssl.truststore.location",
        **{"security.protocol": "SSL", "ssl.truststore.location": str(pki["jks"])},
    )
    assert "not a PEM file" in str(err)
    err = refused(
        "ssl.keystore.location",
        **{
            "security.protocol": "SSL",
            "ssl.keystore.location": str(pki["both"]),
            "ssl.keystore.type": "PKCS12",
        },
    )
    assert "convert it to PEM" in str(err)
    config = build(
        **{
            "security.protocol": "SSL",
            "ssl.keystore.location": str(pki["both"]),
            "ssl.keystore.type": "PEM",
            "ssl.truststore.location": str(pki["ca"]),
        }
    )
    assert config.ssl_certfile == str(pki["both"]) and config.ssl_cafile == str(pki["ca"])
    assert KafkaSecurity.from_config(config).ssl_context is not None


def test_a_file_that_does_not_hold_a_certificate_fails_naming_the_key(
    pki: dict[str, Path],
) -> None:
    config = build(**{"security.protocol": "SSL", "ssl.cafile": str(pki["garbage"])})
    with pytest.raises(InvalidConfigError) as info:
        KafkaSecurity.from_config(config)
    assert info.value.key == "ssl.cafile"
    config = build(
        **{
            "security.protocol": "SSL",
            "ssl.certfile": str(pki["cert"]),
            "ssl.keyfile": str(pki["cert"]),
            "ssl.password": CANARY,
        }
    )
    with pytest.raises(InvalidConfigError) as info:
        KafkaSecurity.from_config(config)
    assert info.value.key == "ssl.certfile" and CANARY not in str(info.value)


def test_hostname_checking_follows_endpoint_identification(pki: dict[str, Path]) -> None:
    config = build(
        **{
            "security.protocol": "SSL",
            "ssl.cafile": str(pki["ca"]),
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    ctx = KafkaSecurity.from_config(config).ssl_context
    assert ctx is not None and not ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED


# ---- ZooKeeper ----------------------------------------------------------------------------


def test_zookeeper_security_keys(pki: dict[str, Path]) -> None:
    sec = zookeeper_security_from_properties(
        {
            "zookeeper.auth": f"digest:alice:{CANARY}",
            "zookeeper.set.acl": "true",
            "zookeeper.ssl.client.enable": "true",
            "zookeeper.ssl.cafile": str(pki["ca"]),
            "zookeeper.connect": "ignored:1",
        }
    )
    assert sec.auth == ("digest", f"alice:{CANARY}") and sec.set_acl
    assert sec.ssl_context is not None and sec.secured and CANARY not in repr(sec)
    with pytest.raises(InvalidConfigError) as info:
        zookeeper_security_from_properties({"zookeeper.auth": f"digest{CANARY}"})
    assert info.value.key == "zookeeper.auth" and CANARY not in str(info.value)
    with pytest.raises(InvalidConfigError) as info:
        zookeeper_security_from_properties({"zookeeper.ssl.cafile": str(pki["ca"])})
    assert info.value.key == "zookeeper.ssl.cafile"
    assert not zookeeper_security_from_properties({}).secured


def test_kafka_security_from_a_command_config_ignores_other_keys() -> None:
    sec = kafka_security_from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": SCRAM_JAAS.replace(
                "scram.ScramLoginModule", "plain.PlainLoginModule"
            ),
            "client.id": "anything",
        }
    )
    assert sec.describe() == "SASL_PLAINTEXT/PLAIN" and sec.sasl_username == "alice"
    assert kafka_security_from_properties(None).security_protocol == "PLAINTEXT"


# ---- broker endpoints in ZooKeeper ---------------------------------------------------------


def test_the_endpoint_of_the_configured_protocol_is_chosen() -> None:
    data = json.dumps(
        {
            "version": 4,
            "host": None,
            "port": -1,
            "jmx_port": -1,
            "timestamp": "1",
            "endpoints": ["INTERNAL://10.0.0.1:9092", "EXTERNAL://kafka.example:9094"],
            "listener_security_protocol_map": {"INTERNAL": "PLAINTEXT", "EXTERNAL": "SASL_SSL"},
        }
    ).encode()
    info = decode_broker(1, data)
    assert info.address_for("SASL_SSL") == ("kafka.example", 9094)
    assert info.plaintext_address() == ("10.0.0.1", 9092)
    # A client protocol the broker does not offer is a configuration error, not malformed data.
    with pytest.raises(InvalidConfigError) as err:
        info.address_for("SSL")
    assert err.value.key == "security.protocol"
    assert not isinstance(err.value, MalformedZookeeperDataError)
    assert "offers PLAINTEXT, SASL_SSL: set security.protocol" in str(err.value)


# ---- the command line ---------------------------------------------------------------------


def test_command_config_errors_name_the_file_and_key_not_the_secret(tmp_path: Path) -> None:
    bad = tmp_path / "client.properties"
    bad.write_text(f"security.protocol=PLAINTEXT\nsasl.password={CANARY}\n")
    result = CliRunner().invoke(
        cli, ["groups", "list", "--command-config", str(bad), "--zookeeper", "127.0.0.1:1"]
    )
    assert result.exit_code == 2, result.output
    assert "sasl.password" in result.output and str(bad) in result.output
    assert CANARY not in result.output


class StaticProvider:
    """A token provider named by ``module:Class`` in a properties file."""

    async def token(self) -> str:
        return "static-token"


def test_a_token_provider_class_is_named_in_a_properties_file() -> None:
    name = f"{__name__}:StaticProvider"
    config = build(
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.provider": name,
        }
    )
    assert config.to_properties()["sasl.oauthbearer.token.provider"] == name
    assert isinstance(KafkaSecurity.from_config(config).token_provider, StaticProvider)
    with pytest.raises(InvalidConfigError) as info:
        build(
            **{
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.token.provider": f"{__name__}:NoSuchProvider",
            }
        )
    assert info.value.key == "sasl.oauthbearer.token.provider"
