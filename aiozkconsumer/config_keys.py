"""The property keys of ``ConsumerConfig``: dotted key <-> attribute, the Java client's aliases,
the secrets, and reading a ``.properties`` mapping into typed values (pure; no I/O but reading
the head of a PEM store the properties name).

An attribute is its dotted key with dots turned into underscores (``zookeeper.connect`` <->
``zookeeper_connect``; no original key has an underscore). :func:`kwargs_from_properties` is
the body of :meth:`~aiozkconsumer.config.ConsumerConfig.from_properties` and
:func:`properties_of` that of :meth:`~aiozkconsumer.config.ConsumerConfig.to_properties`; the
checks of the values themselves are in :mod:`aiozkconsumer.config_rules` and
:mod:`aiozkconsumer.config_security`. The attributes and their kinds are
``ConsumerConfig``'s, handed in as ``kinds`` (:func:`field_kinds`), so this module does not
import the dataclass.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from aiozkconsumer.config_security import pem_store
from aiozkconsumer.errors import InvalidConfigError

if typing.TYPE_CHECKING:
    from aiozkconsumer.config import ConsumerConfig

__all__ = [
    "OBJECT_FIELDS",
    "REDACTED",
    "SECRET_FIELDS",
    "SECRET_KEYS",
    "FieldKinds",
    "UnknownConfigWarning",
    "closest_key",
    "field_kinds",
    "kwargs_from_properties",
    "parse_value",
    "properties_of",
    "reject_unknown_keywords",
]

FieldKinds = Mapping[str, tuple[type, bool]]
"""Attribute -> (its base type: ``int``, ``bool`` or ``str``; whether ``None`` is allowed)."""

# Keys of the Java KafkaConsumer that name an existing property of this consumer.
_KEY_ALIASES = {
    "enable.auto.commit": "auto.commit.enable",
    # The Java client's PEM spellings (ssl.truststore.type=PEM, ssl.keystore.type=PEM) and
    # KIP-1139's names of the OAuth client credentials.
    "ssl.key.password": "ssl.password",
    "sasl.oauthbearer.client.credentials.client.id": "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.credentials.client.secret": "sasl.oauthbearer.client.secret",
}
# Java client keys whose value is a file in a format named by a *.type key: PEM files are read
# here as they are (ssl.cafile / ssl.certfile); JKS and PKCS12 stores are refused with advice.
_STORE_KEYS = {
    "ssl.truststore.location": ("ssl.truststore.type", "ssl_cafile"),
    "ssl.keystore.location": ("ssl.keystore.type", "ssl_certfile"),
    "zookeeper.ssl.truststore.location": ("zookeeper.ssl.truststore.type", "zookeeper_ssl_cafile"),
    "zookeeper.ssl.keystore.location": ("zookeeper.ssl.keystore.type", "zookeeper_ssl_certfile"),
}
_STORE_TYPE_KEYS = {
    "ssl.truststore.type",
    "ssl.keystore.type",
    "zookeeper.ssl.truststore.type",
    "zookeeper.ssl.keystore.type",
}
SECRET_KEYS = frozenset(
    {
        "ssl.password",
        "sasl.password",
        "sasl.jaas.config",
        "sasl.oauthbearer.client.secret",
        "zookeeper.auth",
        "zookeeper.ssl.password",
    }
)
"""Dotted keys whose values are secrets: never in ``repr``, errors, logs or ``describe``."""
SECRET_FIELDS = frozenset(key.replace(".", "_") for key in SECRET_KEYS)
"""The attributes of :data:`SECRET_KEYS`."""
REDACTED = "[hidden]"
"""What stands in for a secret's value wherever a config is shown."""
OBJECT_FIELDS = ("ssl_context", "sasl_oauthbearer_token_provider")
"""Attributes that hold objects given from code, never read from a properties file."""


class UnknownConfigWarning(UserWarning):
    """:meth:`ConsumerConfig.from_properties` was given keys it does not know; they are ignored.

    As the original's ``VerifiableProperties.verify()``, which only logged
    "Property X is not valid" and went on.
    """


def field_kinds(cls: type[ConsumerConfig]) -> dict[str, tuple[type, bool]]:
    """Map each attribute to its base type (int, bool or str) and whether ``None`` is allowed."""
    kinds: dict[str, tuple[type, bool]] = {}
    for name, hint in typing.get_type_hints(cls).items():
        if name in OBJECT_FIELDS:
            continue  # objects from code (an SSLContext, a token provider): no properties key
        if isinstance(hint, types.UnionType):
            (base,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
            kinds[name] = (base, True)
        else:
            kinds[name] = (hint, False)
    return kinds


def kwargs_from_properties(
    props: Mapping[str, object], kinds: FieldKinds, *, stacklevel: int = 1
) -> dict[str, Any]:
    """The constructor keywords that dotted keys with (string) values give.

    The rules are :meth:`~aiozkconsumer.config.ConsumerConfig.from_properties`'s: aliases
    resolved, PEM store locations read as ``ssl.cafile``/``ssl.certfile``, strings parsed as
    the attribute's kind (:func:`parse_value`), ``None`` values skipped, unknown keys warned
    about once.

    Args:
        props: dotted key to value.
        kinds: the attributes and their kinds (:func:`field_kinds`).
        stacklevel: where the :class:`UnknownConfigWarning` points, as :func:`warnings.warn`
            would count it in the caller: 1 (default) the caller's line, 2 its caller's.

    Returns:
        Attribute name to value, not yet checked beyond its syntax.

    Raises:
        InvalidConfigError: ``group.id``, or ``zookeeper.connect`` unless
            ``group.coordinator=kafka``, is missing; a string does not parse as its key's kind;
            a store location is not a PEM file.

    Warns:
        UnknownConfigWarning: once, naming every key that is not a consumer property.
    """
    kwargs: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in props.items():
        if isinstance(key, str):
            key = _KEY_ALIASES.get(key, key)
        if key in _STORE_TYPE_KEYS:
            continue  # read with its store's location below
        if key == "sasl.oauthbearer.token.provider":
            if value is not None:
                kwargs["sasl_oauthbearer_token_provider"] = str(value).strip()
            continue
        if key in _STORE_KEYS:
            if value is not None:
                type_key, name = _STORE_KEYS[key]
                kwargs[name] = pem_store(key, str(value).strip(), props.get(type_key))
            continue
        name = key.replace(".", "_") if isinstance(key, str) else ""
        if not isinstance(key, str) or "_" in key or name not in kinds:
            unknown.append(_describe_unknown(key, kinds))
            continue
        if value is None:
            continue
        kind, _ = kinds[name]
        kwargs[name] = parse_value(key, value, kind)
    if unknown:
        warnings.warn(
            "unknown consumer properties ignored: " + ", ".join(sorted(unknown)),
            UnknownConfigWarning,
            stacklevel=stacklevel + 1,
        )
    required = ["group.id"]
    if kwargs.get("group_coordinator", "zookeeper") == "zookeeper":
        required.append("zookeeper.connect")
    for key in required:
        if key.replace(".", "_") not in kwargs:
            raise InvalidConfigError(key, "missing required property")
    return kwargs


def properties_of(config: ConsumerConfig) -> dict[str, str]:
    """The dotted keys and string values of a config (the body of ``to_properties``).

    Returns:
        Dotted key to value, in the order of the attributes: ints in decimal, booleans as
        ``"true"``/``"false"``; unset (``None``) keys and objects from code left out.
    """
    out: dict[str, str] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if value is None or (f.name in OBJECT_FIELDS and not isinstance(value, str)):
            continue
        key = f.name.replace("_", ".")
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    return out


def _describe_unknown(key: object, kinds: FieldKinds) -> str:
    text = key if isinstance(key, str) else repr(key)
    if isinstance(key, str) and "_" in key and key in kinds:
        return f"{text} (did you mean {key.replace('_', '.')}?)"
    near = closest_key(key, kinds) if isinstance(key, str) else None
    return f"{text} (did you mean {near}?)" if near else text


def closest_key(key: str, attributes: Iterable[str]) -> str | None:
    """The dotted key among ``attributes`` closest to a misspelt one (``difflib``), or ``None``.

    Args:
        key: a dotted (``zookeeper.conect``) or attribute (``zookeeper_conect``) spelling.
        attributes: the known attribute names.

    Returns:
        The dotted key it most likely means, when one is close enough (ratio >= 0.75).
    """
    dotted = key.replace("_", ".")
    known = [name.replace("_", ".") for name in attributes]
    found = difflib.get_close_matches(dotted, known, n=1, cutoff=0.75)
    return found[0] if found else None


def reject_unknown_keywords(
    kwargs: Mapping[str, object], fields: frozenset[str], kinds: FieldKinds
) -> None:
    """Refuse constructor keywords that are not attributes, naming the nearest known one.

    Args:
        kwargs: the keywords given.
        fields: every attribute name.
        kinds: the attributes with a properties key (for the suggestion).

    Raises:
        InvalidConfigError: ``key`` the first unknown keyword, dotted.
    """
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        name = unknown[0]
        near = closest_key(name, kinds)
        hint = f"; did you mean {near.replace('.', '_')}?" if near else ""
        raise InvalidConfigError(
            name.replace("_", "."), f"unknown consumer property {name!r}{hint}"
        )


_INT_TEXT = re.compile(r"[+-]?[0-9]+")


def parse_value(key: str, value: object, kind: type) -> object:
    """Read one property value as ``kind``; values that are not strings pass through.

    Strings are stripped first; booleans are ``true`` or ``false`` in any letter case (as the
    original's ``VerifiableProperties``), ints decimal with an optional sign.

    Raises:
        InvalidConfigError: ``key``: the string is not a boolean or an integer as ``kind``
            wants.
    """
    if not isinstance(value, str) or kind is str:
        return value
    text = value.strip()
    if kind is bool:
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise InvalidConfigError(
                key, f"boolean values must be either 'true' or 'false', got {value!r}"
            )
        return lowered == "true"
    if not _INT_TEXT.fullmatch(text):
        raise InvalidConfigError(key, f"must be an integer, got {value!r}")
    return int(text)
