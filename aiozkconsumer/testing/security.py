"""Secured listeners of the local cluster: options, key material, SCRAM and JWT helpers.

``LocalCluster(security=ClusterSecurity(...))`` (or ``security=True``) gives every broker,
next to its ``PLAINTEXT`` listener (still the inter-broker listener and the one the kit's own
tools use), one listener per name in :data:`SECURE_LISTENERS`, on free loopback ports, in both
flavours:

======================  ==================  ===============================================
listener name           security protocol   what a client must bring
======================  ==================  ===============================================
``SSL``                 SSL                 the CA (server authentication only)
``MTLS``                SSL                 the CA and a client certificate
                                            (``ssl.client.auth=required``)
``SASL_SSL``            SASL_SSL            the CA and one of :data:`SASL_MECHANISMS`
``SASL_PLAINTEXT``      SASL_PLAINTEXT      one of :data:`SASL_MECHANISMS`
``SSL_WRONG_HOST``      SSL                 the CA and no hostname check: the certificate
                                            names :data:`WRONG_HOST` only, so a client that
                                            checks hostnames must fail
======================  ==================  ===============================================

The key material is made when the cluster starts (:func:`create_material`), with ``trustme``,
into ``<work_dir>/security/``: one CA, a server certificate for ``127.0.0.1``/``localhost``, a
client certificate (``CN=alice``, for mTLS and ZooKeeper x509), a second, unrelated CA
(:attr:`SecurityMaterial.wrong_ca_file`, for "untrusted certificate" tests) and a server
certificate for a wrong host name. Private keys are written as unencrypted PKCS#8, the only
PEM key form both Kafka's and ZooKeeper's PEM key stores read.

Users (:attr:`SecurityMaterial.passwords`): ``alice`` and ``admin``, each with a random
password made per cluster, known to PLAIN (through the listener's JAAS ``user_<name>``
options) and to SCRAM-SHA-256 and SCRAM-SHA-512 (KRaft: ``kafka-storage format
--add-scram``; ZooKeeper mode: the credentials are written to ``/config/users/<name>`` in
ZooKeeper before the brokers start, as ``kafka-configs --zookeeper`` would, which the brokers
load at start-up). OAUTHBEARER uses the broker's default validator of unsecured JWTs: any
``{"alg":"none"}`` token with ``sub`` and a future ``exp`` (:func:`unsecured_jwt`)
authenticates as ``User:<sub>``. ``ClusterSecurity(reauth_ms=...)`` sets the SASL
listeners' ``connections.max.reauth.ms``; other listener settings pass through
``broker_properties`` with the listener prefix (``listener.name.sasl_ssl.<key>``).

ZooKeeper (``ClusterSecurity(zookeeper_tls=True)``) gets a TLS port next to its plain one,
with the same server certificate, client certificates checked when sent (``x509`` auth), and
in every secured cluster a digest super user (``admin``, :attr:`SecurityMaterial.
zookeeper_super_password`) that may touch any node whatever its ACL. The brokers keep using
the plain port, without ACLs (no ``zookeeper.set.acl``).

Which principal each connection got is read from the brokers' own request logs
(``kafka.request.logger`` at DEBUG, in a file of its own): ``principals_seen()``.

What a test needs comes from the cluster: :attr:`LocalCluster.security
<aiozkconsumer.testing.LocalCluster.security>` (this module's :class:`SecurityMaterial`),
``bootstrap_servers_for(listener)``, ``client_properties(listener, mechanism)``,
``zookeeper_client_properties()`` and ``principals_seen()``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import os
import secrets
import ssl
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

__all__ = [
    "ADMIN_USER",
    "CLIENT_DN",
    "LISTENER_PROTOCOLS",
    "SASL_MECHANISMS",
    "SCRAM_ITERATIONS",
    "SCRAM_MECHANISMS",
    "SECURE_LISTENERS",
    "TEST_USER",
    "WRONG_HOST",
    "ClusterSecurity",
    "SecurityMaterial",
    "create_material",
    "scram_credential",
    "scram_user_node",
    "unsecured_jwt",
    "zookeeper_digest",
]

SECURE_LISTENERS: tuple[str, ...] = ("SSL", "MTLS", "SASL_SSL", "SASL_PLAINTEXT", "SSL_WRONG_HOST")
"""The listeners a secured cluster adds to every broker, in port order."""

LISTENER_PROTOCOLS: Mapping[str, str] = MappingProxyType(
    {
        "PLAINTEXT": "PLAINTEXT",
        "SSL": "SSL",
        "MTLS": "SSL",
        "SASL_SSL": "SASL_SSL",
        "SASL_PLAINTEXT": "SASL_PLAINTEXT",
        "SSL_WRONG_HOST": "SSL",
    }
)
"""Listener name -> its security protocol (``listener.security.protocol.map``)."""

SASL_MECHANISMS: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
"""The SASL mechanisms enabled on ``SASL_SSL`` and ``SASL_PLAINTEXT``."""

SCRAM_MECHANISMS: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")

TEST_USER = "alice"
"""The user tests authenticate as (PLAIN, SCRAM; the client certificate's CN)."""
ADMIN_USER = "admin"
"""A second user (PLAIN, SCRAM), and ZooKeeper's digest super user."""

CLIENT_DN = f"CN={TEST_USER},OU=tests,O=aiozkconsumer"
"""Subject of the client certificate, as Java prints it (RFC 2253): ZooKeeper's x509 id.

Kafka's ``MTLS`` listener maps it to ``User:alice`` (``ssl.principal.mapping.rules``)."""

WRONG_HOST = "wrong-host.invalid"
"""The only name in the ``SSL_WRONG_HOST`` listener's certificate."""

SCRAM_ITERATIONS = 4096
"""Kafka's minimum (and default) SCRAM iteration count."""

_PASSWORDS_FILE = "passwords.json"
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


@dataclasses.dataclass(frozen=True)
class ClusterSecurity:
    """The knobs of a secured :class:`~aiozkconsumer.testing.LocalCluster`.

    ``LocalCluster(security=True)`` is ``LocalCluster(security=ClusterSecurity())``.

    Attributes:
        zookeeper_tls: also give ZooKeeper a TLS port (``secureClientPort``, served by
            Netty) next to its plain one, with the x509 auth provider; see
            ``LocalCluster.zookeeper_secure_connect``. The brokers keep using the plain
            port. Off by default: the Netty connection factory is then not loaded at all.
        zookeeper_client_auth: ZooKeeper's ``ssl.clientAuth`` on the TLS port: ``"want"``
            (default: a client certificate is checked if one is sent, so both x509 and
            digest clients connect), ``"need"`` (a certificate is required) or ``"none"``.
        reauth_ms: the brokers' ``connections.max.reauth.ms`` on the SASL listeners (None:
            Kafka's default 0, no re-authentication). A SASL connection then lives at most
            this long (or as long as its token) unless the client re-authenticates.
        request_log: log every request's principal and listener (``kafka.request.logger``
            at DEBUG, into ``logs/broker-<id>-requests.log``), which
            ``LocalCluster.principals_seen`` reads. On by default.
        key_type: ``"ecdsa"`` (default, P-256 keys: fast to make) or ``"rsa"`` (2048 bits)
            for every certificate.

    Raises:
        ValueError: if ``zookeeper_client_auth``, ``reauth_ms`` or ``key_type`` is not one
            of the above.
    """

    zookeeper_tls: bool = False
    zookeeper_client_auth: str = "want"
    reauth_ms: int | None = None
    request_log: bool = True
    key_type: str = "ecdsa"

    def __post_init__(self) -> None:
        if self.zookeeper_client_auth not in ("need", "want", "none"):
            raise ValueError(
                "zookeeper_client_auth must be 'need', 'want' or 'none', "
                f"got {self.zookeeper_client_auth!r}"
            )
        if self.reauth_ms is not None and self.reauth_ms < 0:
            raise ValueError(f"reauth_ms must be >= 0, got {self.reauth_ms}")
        if self.key_type not in ("ecdsa", "rsa"):
            raise ValueError(f"key_type must be 'ecdsa' or 'rsa', got {self.key_type!r}")


@dataclasses.dataclass(frozen=True)
class SecurityMaterial:
    """The files and secrets of a secured cluster, made at start-up (:func:`create_material`).

    All files are PEM; keys are unencrypted PKCS#8.

    Attributes:
        directory: ``<work_dir>/security``, where the files are.
        ca_file: the CA certificate every server certificate is signed by (what a client
            trusts: ``ssl.cafile``).
        client_cert_file: the client certificate (subject :data:`CLIENT_DN`), signed by
            the CA: for the ``MTLS`` listener and ZooKeeper's TLS port.
        client_key_file: its private key.
        server_keystore_file: the brokers' (and ZooKeeper's) private key followed by their
            certificate, valid for ``127.0.0.1`` and ``localhost``.
        wrong_ca_file: an unrelated CA: a client trusting only it must fail every TLS
            handshake with the cluster.
        wrong_host_keystore_file: key and certificate (signed by the CA, so trusted) for
            :data:`WRONG_HOST` only, served by the ``SSL_WRONG_HOST`` listener.
        passwords: user name -> password, ``{"alice": ..., "admin": ...}``, random per
            cluster (kept across restarts of a reused ``work_dir``).
        zookeeper_super_user: ZooKeeper's digest super user (``superDigest``), who may do
            anything whatever the ACLs (cleaning up after ACL tests):
            ``addauth digest <user>:<zookeeper_super_password>``.
        zookeeper_super_password: its password.
    """

    directory: Path
    ca_file: Path
    client_cert_file: Path
    client_key_file: Path
    server_keystore_file: Path
    wrong_ca_file: Path
    wrong_host_keystore_file: Path
    passwords: Mapping[str, str]
    zookeeper_super_user: str
    zookeeper_super_password: str

    @property
    def users(self) -> tuple[str, ...]:
        """The user names, ``("alice", "admin")``."""
        return tuple(self.passwords)

    def password(self, user: str = TEST_USER) -> str:
        """A user's password (PLAIN and SCRAM alike).

        Raises:
            KeyError: if there is no such user.
        """
        try:
            return self.passwords[user]
        except KeyError:
            raise KeyError(f"no user {user!r}; the users are {', '.join(self.passwords)}") from None

    @property
    def mtls_principal(self) -> str:
        """The principal a connection with the client certificate gets on ``MTLS``:
        ``"User:alice"``."""
        return f"User:{TEST_USER}"

    def client_ssl_context(
        self, *, client_cert: bool = False, wrong_ca: bool = False
    ) -> ssl.SSLContext:
        """A client-side TLS context for the cluster (aiokafka's ``ssl_context``, say).

        Hostnames are checked (the server certificate names ``127.0.0.1`` and
        ``localhost``), as ``ssl.create_default_context`` does.

        Args:
            client_cert: present the client certificate (needed on ``MTLS``, and on
                ZooKeeper's TLS port when its client auth is ``"need"``).
            wrong_ca: trust :attr:`wrong_ca_file` instead of the cluster's CA (every
                handshake then fails).

        Returns:
            A new context.
        """
        context = ssl.create_default_context(
            cafile=str(self.wrong_ca_file if wrong_ca else self.ca_file)
        )
        if client_cert:
            context.load_cert_chain(str(self.client_cert_file), str(self.client_key_file))
        return context


def unsecured_jwt(
    subject: str,
    lifetime_s: float = 3600.0,
    *,
    issued_at: float | None = None,
    scope: str | None = None,
) -> str:
    """An unsigned JWT the brokers' default OAUTHBEARER validator accepts.

    Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler`` (what a broker uses unless it
    is given a real validator) takes an unsecured JWS (RFC 7515 appendix A.5): header
    ``{"alg":"none"}``, the claims, and an empty signature, joined by dots. It requires
    ``sub`` (the principal: ``User:<subject>``) and ``exp`` in the future; ``iat`` is checked
    when present.

    Args:
        subject: the ``sub`` claim.
        lifetime_s: seconds until ``exp``; 0 or negative makes an expired token (for
            "expired token is refused" tests).
        issued_at: the ``iat`` claim, in seconds since the epoch (default: now).
        scope: an optional space-separated ``scope`` claim.

    Returns:
        The compact serialization, ``"<header>.<claims>."`` (base64url, no padding).
    """
    now = time.time() if issued_at is None else issued_at
    claims: dict[str, object] = {"sub": subject, "iat": int(now), "exp": int(now + lifetime_s)}
    if scope is not None:
        claims["scope"] = scope
    header = _b64url(json.dumps({"alg": "none"}, separators=(",", ":")).encode())
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    return f"{header}.{payload}."


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def scram_credential(
    password: str,
    mechanism: str,
    *,
    salt: bytes | None = None,
    iterations: int = SCRAM_ITERATIONS,
) -> str:
    """A SCRAM credential as Kafka stores it in ZooKeeper (``/config/users/<name>``).

    Kafka's ``ScramCredentialUtils.credentialToString`` form,
    ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``, derived as RFC 5802
    says: ``SaltedPassword = PBKDF2(password, salt, iterations)``, ``StoredKey =
    H(HMAC(SaltedPassword, "Client Key"))``, ``ServerKey = HMAC(SaltedPassword, "Server
    Key")``.

    Args:
        password: the user's password.
        mechanism: ``"SCRAM-SHA-256"`` or ``"SCRAM-SHA-512"``.
        salt: the salt (default: 32 random bytes).
        iterations: PBKDF2 iterations; Kafka refuses fewer than 4096.

    Returns:
        The credential text.

    Raises:
        ValueError: if the mechanism is not a SCRAM one.
    """
    try:
        hash_name = _HASHES[mechanism]
    except KeyError:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r}") from None
    salt = os.urandom(32) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", hash_name)

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return (
        f"salt={b64(salt)},stored_key={b64(stored_key)},server_key={b64(server_key)},"
        f"iterations={iterations}"
    )


def scram_user_node(password: str) -> bytes:
    """The data of a ZooKeeper-mode ``/config/users/<name>`` node holding both SCRAM
    credentials of a user (``{"version":1,"config":{"SCRAM-SHA-256":...,...}}``)."""
    config = {mechanism: scram_credential(password, mechanism) for mechanism in SCRAM_MECHANISMS}
    return json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()


def zookeeper_digest(user: str, password: str) -> str:
    """ZooKeeper's digest id of a user, ``"<user>:<base64 sha1(user:password)>"``.

    What ``DigestAuthenticationProvider.superDigest`` and ``digest`` ACL ids hold.
    """
    digest = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return f"{user}:{base64.b64encode(digest).decode('ascii')}"


def _load_passwords(path: Path) -> dict[str, str] | None:
    """The passwords of an earlier run in a reused work directory (None if absent)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not all(
        isinstance(data.get(u), str) for u in (TEST_USER, ADMIN_USER)
    ):
        return None
    return {str(k): str(v) for k, v in data.items()}


def create_material(directory: Path, options: ClusterSecurity) -> SecurityMaterial:
    """Make the certificates and passwords of a secured cluster, as files in ``directory``.

    Takes about 15 ms with ECDSA keys. Passwords found in ``directory`` (a reused work
    directory) are kept, since a formatted KRaft log keeps the SCRAM credentials it was
    formatted with; the certificates are made afresh.

    Args:
        directory: created if needed.
        options: the cluster's security options (``key_type``).

    Returns:
        The files and secrets.
    """
    # Imported here: trustme and cryptography are test extras, needed by secured clusters
    # only (a plain LocalCluster must work without them).
    import trustme
    from cryptography.hazmat.primitives import serialization

    directory.mkdir(parents=True, exist_ok=True)
    key_type = trustme.KeyType.ECDSA if options.key_type == "ecdsa" else trustme.KeyType.RSA
    ca = trustme.CA(organization_name="aiozkconsumer test CA", key_type=key_type)
    wrong_ca = trustme.CA(organization_name="aiozkconsumer wrong CA", key_type=key_type)
    server = ca.issue_cert(
        "127.0.0.1",
        "localhost",
        common_name="localhost",
        organization_name="aiozkconsumer",
        key_type=key_type,
    )
    client = ca.issue_cert(
        f"{TEST_USER}.client.invalid",
        common_name=TEST_USER,
        organization_name="aiozkconsumer",
        organization_unit_name="tests",
        key_type=key_type,
    )
    wrong_host = ca.issue_cert(WRONG_HOST, common_name=WRONG_HOST, key_type=key_type)

    def pkcs8(leaf: trustme.LeafCert) -> bytes:
        # trustme writes "traditional" OpenSSL keys (BEGIN EC/RSA PRIVATE KEY); Kafka's and
        # ZooKeeper's PEM stores read PKCS#8 (BEGIN PRIVATE KEY) only.
        key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def keystore(leaf: trustme.LeafCert) -> bytes:
        return pkcs8(leaf) + b"".join(pem.bytes() for pem in leaf.cert_chain_pems)

    def write(name: str, data: bytes) -> Path:
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    passwords_file = directory / _PASSWORDS_FILE
    passwords = _load_passwords(passwords_file) or {
        TEST_USER: secrets.token_urlsafe(18),
        ADMIN_USER: secrets.token_urlsafe(18),
    }
    write(_PASSWORDS_FILE, json.dumps(passwords, indent=2).encode())
    return SecurityMaterial(
        directory=directory,
        ca_file=write("ca.pem", ca.cert_pem.bytes()),
        client_cert_file=write(
            "client-cert.pem", b"".join(pem.bytes() for pem in client.cert_chain_pems)
        ),
        client_key_file=write("client-key.pem", pkcs8(client)),
        server_keystore_file=write("server.pem", keystore(server)),
        wrong_ca_file=write("wrong-ca.pem", wrong_ca.cert_pem.bytes()),
        wrong_host_keystore_file=write("wrong-host.pem", keystore(wrong_host)),
        passwords=MappingProxyType(dict(passwords)),
        zookeeper_super_user=ADMIN_USER,
        zookeeper_super_password=passwords[ADMIN_USER],
    )
