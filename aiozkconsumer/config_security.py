"""The security rules of ``ConsumerConfig``: ``security.protocol``, ``ssl.*``, ``sasl.*`` and the
ZooKeeper security keys, checked once at construction (pure; no I/O but reading that files exist).

Kept apart from ``config.py`` so the many rules of the Java client's security keys (impossible
combinations, credentials from ``sasl.jaas.config``, PEM stores) read as one job. Every failure
is an :class:`~aiozkconsumer.errors.InvalidConfigError` naming the dotted key and never a secret.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from aiozkconsumer.errors import InvalidConfigError

if TYPE_CHECKING:
    from aiozkconsumer.config import ConsumerConfig

__all__ = [
    "check_choice",
    "check_kafka_security",
    "check_readable_file",
    "check_zookeeper_security",
    "pem_store",
]

_SECURITY_PROTOCOL_VALUES = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SASL_MECHANISM_VALUES = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
_ENDPOINT_IDENTIFICATION_VALUES = ("https", "")


def check_choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InvalidConfigError(key, f"must be one of {', '.join(allowed)}, got {value!r}")


def check_readable_file(key: str, path: str | None) -> None:
    if path is None:
        return
    if not os.path.isfile(path):
        raise InvalidConfigError(key, f"no such file: {path!r}")
    if not os.access(path, os.R_OK):
        raise InvalidConfigError(key, f"file {path!r} is not readable")


def pem_store(key: str, path: str, store_type: object) -> str:
    """A Java client's trust/key store location, accepted when it is a PEM file."""
    kind = str(store_type).strip().upper() if store_type is not None else None
    if kind not in (None, "PEM"):
        raise InvalidConfigError(
            key,
            f"a {kind} store cannot be read here; convert it to PEM (keytool -exportcert -rfc "
            f"for a truststore, openssl pkcs12 -nodes for a keystore) and set "
            f"{key.rsplit('.', 2)[0]}.type=PEM, or use ssl.cafile / ssl.certfile",
        )
    check_readable_file(key, path)
    if kind is None:
        with open(path, "rb") as f:
            looks_pem = b"-----BEGIN" in f.read(4096)
        if not looks_pem:
            raise InvalidConfigError(
                key,
                f"{path!r} is not a PEM file (a JKS or PKCS12 store?); convert it to PEM and "
                f"set {key.rsplit('.', 2)[0]}.type=PEM, or use ssl.cafile / ssl.certfile",
            )
    return path


def check_kafka_security(self: ConsumerConfig) -> None:
    """The rules of ``security.protocol``, ``ssl.*`` and ``sasl.*`` (at construction)."""
    protocol = self.security_protocol.upper()
    object.__setattr__(self, "security_protocol", protocol)
    check_choice("security.protocol", protocol, _SECURITY_PROTOCOL_VALUES)
    mechanism = self.sasl_mechanism.upper()
    object.__setattr__(self, "sasl_mechanism", mechanism)
    check_choice("sasl.mechanism", mechanism, _SASL_MECHANISM_VALUES)
    algorithm = self.ssl_endpoint_identification_algorithm.lower()
    object.__setattr__(self, "ssl_endpoint_identification_algorithm", algorithm)
    check_choice(
        "ssl.endpoint.identification.algorithm", algorithm, _ENDPOINT_IDENTIFICATION_VALUES
    )
    tls = protocol in ("SSL", "SASL_SSL")
    sasl = protocol.startswith("SASL_")
    if not tls:
        tls_keys = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_context")
        for name in tls_keys:
            if getattr(self, name) is not None:
                raise InvalidConfigError(
                    name.replace("_", "."),
                    f"is set but security.protocol={protocol} does not use TLS; set "
                    f"security.protocol=SSL or SASL_SSL",
                )
    if self.ssl_context is not None:
        import ssl

        if not isinstance(self.ssl_context, ssl.SSLContext):
            raise InvalidConfigError(
                "ssl.context",
                f"must be an ssl.SSLContext, got {type(self.ssl_context).__name__}",
            )
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password"):
            if getattr(self, name) is not None:
                raise InvalidConfigError(
                    name.replace("_", "."),
                    "is set together with ssl.context; give the files or the context, "
                    "not both",
                )
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        check_readable_file(name.replace("_", "."), getattr(self, name))
    if self.ssl_keyfile is not None and self.ssl_certfile is None:
        raise InvalidConfigError(
            "ssl.keyfile", "is set without ssl.certfile (the client certificate it belongs to)"
        )
    sasl_keys = (
        "sasl_username",
        "sasl_password",
        "sasl_jaas_config",
        "sasl_oauthbearer_token_provider",
        "sasl_oauthbearer_token_endpoint_url",
        "sasl_oauthbearer_client_id",
        "sasl_oauthbearer_client_secret",
        "sasl_oauthbearer_scope",
    )
    if not sasl:
        for name in sasl_keys:
            if getattr(self, name) is not None:
                raise InvalidConfigError(
                    name.replace("_", "."),
                    f"is set but security.protocol={protocol} does not use SASL; set "
                    f"security.protocol=SASL_SSL (or SASL_PLAINTEXT)",
                )
        if mechanism != "GSSAPI":
            raise InvalidConfigError(
                "sasl.mechanism",
                f"is {mechanism} but security.protocol={protocol} does not use SASL; set "
                f"security.protocol=SASL_SSL (or SASL_PLAINTEXT)",
            )
        return
    if self.sasl_jaas_config is not None:
        from aiozkconsumer.security import jaas_credentials

        creds = jaas_credentials(self.sasl_jaas_config, mechanism)
        for name, value in creds.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        for name in ("sasl_username", "sasl_password"):
            if not getattr(self, name):
                raise InvalidConfigError(
                    name.replace("_", "."),
                    f"required with sasl.mechanism={mechanism} (or a sasl.jaas.config "
                    f"with username and password)",
                )
    elif mechanism == "OAUTHBEARER":
        provider = self.sasl_oauthbearer_token_provider
        url = self.sasl_oauthbearer_token_endpoint_url
        if provider is None and url is None:
            raise InvalidConfigError(
                "sasl.oauthbearer.token.endpoint.url",
                "sasl.mechanism=OAUTHBEARER needs a token: set "
                "sasl.oauthbearer.token.endpoint.url with sasl.oauthbearer.client.id and "
                "sasl.oauthbearer.client.secret, or pass sasl_oauthbearer_token_provider",
            )
        if provider is not None and url is not None:
            raise InvalidConfigError(
                "sasl.oauthbearer.token.endpoint.url",
                "set together with sasl_oauthbearer_token_provider; give one of them",
            )
        if isinstance(provider, str):
            from aiozkconsumer.security import resolve_token_provider

            provider = resolve_token_provider(provider)
        if provider is not None and not callable(getattr(provider, "token", None)):
            raise InvalidConfigError(
                "sasl.oauthbearer.token.provider",
                "must have an async token() method returning the token string",
            )
        if url is not None:
            if not url.startswith(("https://", "http://", "file:")):
                raise InvalidConfigError(
                    "sasl.oauthbearer.token.endpoint.url",
                    "must be an http(s):// URL (or file: holding a token)",
                )
            if url.startswith("http") and not (
                self.sasl_oauthbearer_client_id and self.sasl_oauthbearer_client_secret
            ):
                raise InvalidConfigError(
                    "sasl.oauthbearer.client.id",
                    "the client-credentials flow needs sasl.oauthbearer.client.id and "
                    "sasl.oauthbearer.client.secret",
                )



def check_zookeeper_security(self: ConsumerConfig) -> None:
    """The rules of ``zookeeper.auth``, ``zookeeper.set.acl`` and ``zookeeper.ssl.*``."""
    if self.zookeeper_auth is not None:
        scheme, colon, credentials = self.zookeeper_auth.partition(":")
        if not colon or not scheme or not credentials:
            raise InvalidConfigError(
                "zookeeper.auth",
                "must be scheme:credentials, e.g. digest:user:password (value hidden)",
            )
        if scheme == "digest" and ":" not in credentials:
            raise InvalidConfigError(
                "zookeeper.auth",
                "digest credentials must be user:password (value hidden)",
            )
    if (
        self.zookeeper_set_acl
        and self.zookeeper_auth is None
        and self.zookeeper_ssl_certfile is None
    ):
        raise InvalidConfigError(
            "zookeeper.set.acl",
            "needs an identity for the creator's ACL: set zookeeper.auth "
            "(digest:user:password) or a client certificate (zookeeper.ssl.certfile)",
        )
    algorithm = self.zookeeper_ssl_endpoint_identification_algorithm.lower()
    object.__setattr__(self, "zookeeper_ssl_endpoint_identification_algorithm", algorithm)
    check_choice(
        "zookeeper.ssl.endpoint.identification.algorithm",
        algorithm,
        _ENDPOINT_IDENTIFICATION_VALUES,
    )
    for name in (
        "zookeeper_ssl_cafile",
        "zookeeper_ssl_certfile",
        "zookeeper_ssl_keyfile",
        "zookeeper_ssl_password",
    ):
        if getattr(self, name) is not None and not self.zookeeper_ssl_client_enable:
            raise InvalidConfigError(
                name.replace("_", "."),
                "is set but zookeeper.ssl.client.enable is false; set it to true",
            )
    for name in ("zookeeper_ssl_cafile", "zookeeper_ssl_certfile", "zookeeper_ssl_keyfile"):
        check_readable_file(name.replace("_", "."), getattr(self, name))
    if self.zookeeper_ssl_keyfile is not None and self.zookeeper_ssl_certfile is None:
        raise InvalidConfigError(
            "zookeeper.ssl.keyfile", "is set without zookeeper.ssl.certfile"
        )
