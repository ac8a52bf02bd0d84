"""Security of every Kafka connection, built once from the config (Java client property names).

One place turns ``security.protocol``, ``ssl.*`` and ``sasl.*`` into what a connection needs:
an ``ssl.SSLContext`` (:func:`build_ssl_context`) and the SASL mechanism with its credentials
(:class:`KafkaSecurity`). Every connection the project opens takes it from here: the shared
aiokafka client (``kafka/client.py``), the fetch loops' own connections
(``kafka/fetch_connection.py``), ``SimpleConsumer``, the admin tools, both group coordinators,
the Spark executors and the test kit. :func:`jaas_credentials` reads a Java client's
``sasl.jaas.config`` (``PlainLoginModule``/``ScramLoginModule``/``OAuthBearerLoginModule``), so
a Java client's properties file works as it is.

Secrets (passwords, tokens, private-key passwords) are held in fields left out of every
``repr`` and never put into an error message or a log line.
"""

from __future__ import annotations

import pkgutil
import re
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiozkconsumer.errors import InvalidConfigError

if TYPE_CHECKING:
    from aiozkconsumer.config import ConsumerConfig

__all__ = [
    "KafkaSecurity",
    "ZookeeperSecurity",
    "build_ssl_context",
    "jaas_credentials",
    "resolve_token_provider",
]

# A JAAS entry: "<LoginModule class> <flag> key=value ... ;" (Java's ConfigFile grammar, one
# entry, as the Java client's sasl.jaas.config holds it).
_JAAS_ENTRY = re.compile(
    r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);?\s*$", re.S
)
_JAAS_OPTION = re.compile(r"\s*([\w.$-]+)\s*=\s*(\"((?:[^\"\\]|\\.)*)\"|[^\s;\"]+)")

_MODULE_MECHANISMS = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": ("OAUTHBEARER",),
    "com.sun.security.auth.module.Krb5LoginModule": ("GSSAPI",),
}


def _parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    match = _JAAS_ENTRY.fullmatch(text)
    if match is None:
        raise InvalidConfigError(
            "sasl.jaas.config",
            "is not a JAAS entry of the form '<LoginModule> required key=\"value\" ...;' "
            "(value hidden)",
        )
    module, _flag, rest = match.groups()
    options: dict[str, str] = {}
    pos = 0
    rest = rest.rstrip().rstrip(";")
    while pos < len(rest):
        if rest[pos:].strip() == "":
            break
        opt = _JAAS_OPTION.match(rest, pos)
        if opt is None:
            raise InvalidConfigError(
                "sasl.jaas.config",
                f"cannot read the options of {module} after character {pos} (value hidden)",
            )
        key, raw, quoted = opt.group(1), opt.group(2), opt.group(3)
        options[key] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else raw
        pos = opt.end()
    return module, options


def jaas_credentials(text: str, mechanism: str) -> dict[str, str]:
    """Read the credentials of a Java client's ``sasl.jaas.config``.

    Understands ``PlainLoginModule`` and ``ScramLoginModule`` (``username``, ``password``),
    ``OAuthBearerLoginModule`` (``clientId``, ``clientSecret``, ``scope``, as the Java client's
    OIDC login callback handler reads them) and ``Krb5LoginModule`` (no credentials are read:
    the ticket comes from the Kerberos cache or keytab).

    Args:
        text: the ``sasl.jaas.config`` value.
        mechanism: ``sasl.mechanism`` in force (upper case).

    Returns:
        Config attribute names (``sasl_username``, ``sasl_password``,
        ``sasl_oauthbearer_client_id``, ``sasl_oauthbearer_client_secret``,
        ``sasl_oauthbearer_scope``) to values, for the ones the entry gives.

    Raises:
        InvalidConfigError: ``key`` ``"sasl.jaas.config"``: the text is not a JAAS entry, names
            a login module this client does not know, or one that does not go with
            ``mechanism`` (a ``PlainLoginModule`` with ``SCRAM-SHA-512``). The value is never
            part of the message.
    """
    module, options = _parse_jaas(text)
    mechanisms = _MODULE_MECHANISMS.get(module)
    if mechanisms is None:
        known = ", ".join(sorted(m.rsplit(".", 1)[1] for m in _MODULE_MECHANISMS))
        raise InvalidConfigError(
            "sasl.jaas.config", f"login module {module} is not one of {known}"
        )
    if mechanism not in mechanisms:
        raise InvalidConfigError(
            "sasl.jaas.config",
            f"{module.rsplit('.', 1)[1]} is not used by sasl.mechanism={mechanism}; set "
            f"sasl.mechanism={mechanisms[0]}",
        )
    names = {
        "username": "sasl_username",
        "password": "sasl_password",
        "clientId": "sasl_oauthbearer_client_id",
        "clientSecret": "sasl_oauthbearer_client_secret",
        "scope": "sasl_oauthbearer_scope",
    }
    return {names[k]: v for k, v in options.items() if k in names}


def build_ssl_context(
    *,
    cafile: str | None,
    certfile: str | None,
    keyfile: str | None,
    password: str | None,
    check_hostname: bool,
    key_prefix: str = "ssl",
) -> ssl.SSLContext:
    """An ``SSLContext`` for a client: the CA to trust, an optional client certificate.

    Args:
        cafile: PEM file of the CA certificates to trust; ``None`` trusts the system's CAs.
        certfile: PEM file of the client certificate (chain), and its key when ``keyfile`` is
            ``None``; for mutual TLS.
        keyfile: PEM file of the client's private key.
        password: the private key's password (never shown).
        check_hostname: whether the server's certificate must name the host connected to
            (``ssl.endpoint.identification.algorithm=https``, the Java client's default).
        key_prefix: ``"ssl"`` or ``"zookeeper.ssl"``, for the keys named in errors.

    Returns:
        A context that verifies the server's certificate (always: only the host name check
        can be turned off).

    Raises:
        InvalidConfigError: a file does not hold what it should (``key`` names it); a wrong
            key password says so without showing it.
    """
    try:
        ctx = ssl.create_default_context(cafile=cafile)
    except (ssl.SSLError, OSError) as e:
        raise InvalidConfigError(
            f"{key_prefix}.cafile", f"cannot load CA certificates from {cafile!r}: {e}"
        ) from None
    ctx.check_hostname = check_hostname
    if certfile is not None:
        try:
            ctx.load_cert_chain(certfile, keyfile, password)
        except ssl.SSLError as e:
            what = "the certificate and key" if keyfile else "the certificate and its key"
            hint = " (wrong ssl.password?)" if password is not None or "password" in str(e) else ""
            raise InvalidConfigError(
                f"{key_prefix}.certfile",
                f"cannot load {what} from {certfile!r}"
                f"{f' and {keyfile!r}' if keyfile else ''}: {e.reason or e}{hint}",
            ) from None
        except OSError as e:
            raise InvalidConfigError(
                f"{key_prefix}.certfile", f"cannot read {certfile!r}: {e.strerror}"
            ) from None
    return ctx


def resolve_token_provider(name: str) -> Any:
    """A new instance of the OAUTHBEARER token provider class named ``module:Class``.

    ``sasl.oauthbearer.token.provider`` in a properties file (or a Spark option) names the
    class, built with no arguments, as ``interceptor.classes`` does for interceptors.

    Raises:
        InvalidConfigError: ``key`` ``"sasl.oauthbearer.token.provider"``: the name does not
            resolve, the class cannot be built without arguments, or it has no ``token()``.
    """
    key = "sasl.oauthbearer.token.provider"
    try:
        target = pkgutil.resolve_name(name)
    except (ImportError, AttributeError, ValueError) as e:
        raise InvalidConfigError(key, f"cannot load {name!r}: {e}") from None
    try:
        provider = target() if isinstance(target, type) else target
    except Exception as e:
        raise InvalidConfigError(key, f"{name!r} cannot be built without arguments: {e}") from None
    if not callable(getattr(provider, "token", None)):
        raise InvalidConfigError(key, f"{name!r} has no async token() method")
    return provider



@dataclass(frozen=True)
class KafkaSecurity:
    """How Kafka connections are secured: TLS context and SASL mechanism with credentials.

    Built from a :class:`~aiozkconsumer.config.ConsumerConfig` by :meth:`from_config`, or from
    a mapping of the same dotted keys by
    :func:`~aiozkconsumer.config.kafka_security_from_properties` (the admin tools, the Spark
    executors). ``repr`` shows the protocol and mechanism only.

    Attributes:
        security_protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
        ssl_context: the client TLS context (``None`` without TLS).
        sasl_mechanism: ``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``, ``OAUTHBEARER`` or
            ``GSSAPI`` (``None`` without SASL).
        sasl_username: PLAIN and SCRAM user name.
        sasl_password: PLAIN and SCRAM password (never shown).
        token_provider: OAUTHBEARER: an object with ``async token() -> str`` (aiokafka's
            ``AbstractTokenProvider`` shape).
        sasl_kerberos_service_name: GSSAPI service name, default ``kafka``.
        sasl_kerberos_domain_name: GSSAPI host name of the principal; default the broker's.
        reconnect_backoff_max_ms: the longest pause before reconnecting after a failed
            authentication.
    """

    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    sasl_mechanism: str | None = None
    sasl_username: str | None = field(default=None, repr=False)
    sasl_password: str | None = field(default=None, repr=False)
    token_provider: Any = field(default=None, repr=False)
    sasl_kerberos_service_name: str = "kafka"
    sasl_kerberos_domain_name: str | None = None
    reconnect_backoff_max_ms: int = 1000

    @property
    def tls(self) -> bool:
        """Whether connections use TLS."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        """Whether connections authenticate with SASL."""
        return self.security_protocol.startswith("SASL_")

    @classmethod
    def from_config(cls, config: ConsumerConfig) -> KafkaSecurity:
        """The security of ``config``'s Kafka connections.

        An OAUTHBEARER client-credentials flow (``sasl.oauthbearer.token.endpoint.url``)
        and a token provider given from code are both wrapped by
        :func:`aiozkconsumer.kafka.oauth.refreshing` (the caller's adapter does it; here the
        raw provider or endpoint is kept).

        Raises:
            InvalidConfigError: a TLS file does not load (see :func:`build_ssl_context`).
        """
        ctx: ssl.SSLContext | None = None
        if config.tls:
            ctx = config.ssl_context or build_ssl_context(
                cafile=config.ssl_cafile,
                certfile=config.ssl_certfile,
                keyfile=config.ssl_keyfile,
                password=config.ssl_password,
                check_hostname=config.ssl_check_hostname
                if config.ssl_check_hostname is not None
                else config.ssl_endpoint_identification_algorithm == "https",
            )
        sasl = config.security_protocol.startswith("SASL_")
        provider: Any = None
        if sasl and config.sasl_mechanism == "OAUTHBEARER":
            given = config.sasl_oauthbearer_token_provider
            if isinstance(given, str):
                given = resolve_token_provider(given)
            provider = given or _EndpointSpec(
                url=config.sasl_oauthbearer_token_endpoint_url or "",
                client_id=config.sasl_oauthbearer_client_id,
                client_secret=config.sasl_oauthbearer_client_secret,
                scope=config.sasl_oauthbearer_scope,
            )
        return cls(
            security_protocol=config.security_protocol,
            ssl_context=ctx,
            sasl_mechanism=config.sasl_mechanism if sasl else None,
            sasl_username=config.sasl_username if sasl else None,
            sasl_password=config.sasl_password if sasl else None,
            token_provider=provider,
            sasl_kerberos_service_name=config.sasl_kerberos_service_name,
            sasl_kerberos_domain_name=config.sasl_kerberos_domain_name,
            reconnect_backoff_max_ms=config.reconnect_backoff_max_ms,
        )

    def describe(self) -> str:
        """``SASL_SSL/SCRAM-SHA-512``-style text for messages (no secrets)."""
        if self.sasl_mechanism:
            return f"{self.security_protocol}/{self.sasl_mechanism}"
        return self.security_protocol


@dataclass(frozen=True)
class _EndpointSpec:
    """OAUTHBEARER client-credentials flow settings (``kafka/oauth.py`` runs it)."""

    url: str
    client_id: str | None
    client_secret: str | None = field(repr=False)
    scope: str | None


@dataclass(frozen=True)
class ZookeeperSecurity:
    """How ZooKeeper connections are secured: auth, TLS and the ACL of created nodes.

    Attributes:
        auth: ``(scheme, credentials)`` sent with AddAuth after each connect (``digest``,
            ``user:password``; never shown), or ``None``.
        ssl_context: TLS to ZooKeeper's ``secureClientPort``, or ``None``.
        set_acl: give every node the consumer creates creator-all + world-read ACLs
            (``zookeeper.set.acl``, as Kafka's brokers do for theirs).
    """

    auth: tuple[str, str] | None = field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    set_acl: bool = False

    @classmethod
    def from_config(cls, config: ConsumerConfig) -> ZookeeperSecurity:
        """The security of ``config``'s ZooKeeper connections.

        Raises:
            InvalidConfigError: a TLS file does not load.
        """
        auth = None
        if config.zookeeper_auth is not None:
            scheme, _, credentials = config.zookeeper_auth.partition(":")
            auth = (scheme, credentials)
        ctx = None
        if config.zookeeper_ssl_client_enable:
            ctx = build_ssl_context(
                cafile=config.zookeeper_ssl_cafile,
                certfile=config.zookeeper_ssl_certfile,
                keyfile=config.zookeeper_ssl_keyfile,
                password=config.zookeeper_ssl_password,
                check_hostname=config.zookeeper_ssl_endpoint_identification_algorithm == "https",
                key_prefix="zookeeper.ssl",
            )
        return cls(auth=auth, ssl_context=ctx, set_acl=config.zookeeper_set_acl)

    @property
    def secured(self) -> bool:
        """Whether anything is set (auth, TLS or ACLs)."""
        return self.auth is not None or self.ssl_context is not None or self.set_acl
