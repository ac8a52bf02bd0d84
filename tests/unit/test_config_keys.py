"""The property keys on their own: dotted keys to constructor keywords and back, the Java
client's aliases and stores, typed values, unknown keys and their suggestions (no servers)."""

from __future__ import annotations

import dataclasses
import inspect
import ssl
import warnings
from pathlib import Path
from typing import Any

import pytest

from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.config_keys import (
    SECRET_FIELDS,
    SECRET_KEYS,
    UnknownConfigWarning,
    closest_key,
    field_kinds,
    kwargs_from_properties,
    parse_value,
    properties_of,
    reject_unknown_keywords,
)
from aiozkconsumer.errors import InvalidConfigError

KINDS = {
    "group_id": (str, False),
    "zookeeper_connect": (str, True),
    "group_coordinator": (str, False),
    "auto_commit_enable": (bool, False),
    "fetch_min_bytes": (int, False),
    "client_id": (str, True),
    "ssl_cafile": (str, True),
}
REQUIRED = {"group.id": "g", "zookeeper.connect": "h:1"}


def kwargs(props: dict[str, Any]) -> dict[str, Any]:
    return kwargs_from_properties({**REQUIRED, **props}, KINDS)


def test_field_kinds_are_the_base_type_and_whether_none_is_allowed() -> None:
    kinds = field_kinds(ConsumerConfig)
    assert kinds["group_id"] == (str, False)
    assert kinds["zookeeper_connect"] == (str, True)
    assert kinds["fetch_min_bytes"] == (int, False)
    assert kinds["dual_commit_enabled"] == (bool, True)
    # objects given from code have no properties key
    assert "ssl_context" not in kinds and "sasl_oauthbearer_token_provider" not in kinds
    assert SECRET_FIELDS == {key.replace(".", "_") for key in SECRET_KEYS}
    assert SECRET_FIELDS <= set(kinds)


def test_strings_are_parsed_as_the_attributes_kind() -> None:
    got = kwargs({"auto.commit.enable": " TRUE ", "fetch.min.bytes": "+42", "client.id": " c "})
    assert got == {
        "group_id": "g",
        "zookeeper_connect": "h:1",
        "auto_commit_enable": True,
        "fetch_min_bytes": 42,
        "client_id": " c ",  # strings are kept as given
    }
    # typed values pass through; None counts as absent
    assert kwargs({"fetch.min.bytes": 7, "client.id": None})["fetch_min_bytes"] == 7
    assert "client_id" not in kwargs({"client.id": None})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("auto.commit.enable", "yes", "boolean values must be either 'true' or 'false'"),
        ("fetch.min.bytes", "1.5", "must be an integer, got '1.5'"),
        ("fetch.min.bytes", "0x10", "must be an integer"),
    ],
)
def test_a_value_that_does_not_parse_names_its_key(key: str, value: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message) as info:
        kwargs({key: value})
    assert info.value.key == key


def test_parse_value_reads_only_strings_and_never_a_str_kind() -> None:
    assert parse_value("k", "-3", int) == -3
    assert parse_value("k", "false", bool) is False
    assert parse_value("k", " 5 ", str) == " 5 "
    assert parse_value("k", 5, bool) == 5  # not a string: left to the type check


def test_the_java_clients_enable_auto_commit_is_auto_commit_enable() -> None:
    assert kwargs({"enable.auto.commit": "false"})["auto_commit_enable"] is False


def test_a_pem_store_location_is_read_as_the_ca_file(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    got = kwargs({"ssl.truststore.location": str(pem), "ssl.truststore.type": "PEM"})
    assert got["ssl_cafile"] == str(pem)
    assert "ssl_truststore_type" not in got
    with pytest.raises(InvalidConfigError, match="a JKS store cannot be read here") as info:
        kwargs({"ssl.truststore.location": str(pem), "ssl.truststore.type": "JKS"})
    assert info.value.key == "ssl.truststore.location"


def test_required_keys_depend_on_the_coordinator() -> None:
    with pytest.raises(InvalidConfigError, match="missing required property") as info:
        kwargs_from_properties({"zookeeper.connect": "h:1"}, KINDS)
    assert info.value.key == "group.id"
    with pytest.raises(InvalidConfigError) as info:
        kwargs_from_properties({"group.id": "g"}, KINDS)
    assert info.value.key == "zookeeper.connect"
    kafka = kwargs_from_properties({"group.id": "g", "group.coordinator": "kafka"}, KINDS)
    assert kafka == {"group_id": "g", "group_coordinator": "kafka"}


def test_unknown_keys_are_warned_about_once_with_suggestions_at_the_callers_line() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = kwargs({"fetch.min.byte": "1", "group_id": "x", "no.such.key": "1", 3: "x"})
    (warning,) = caught
    assert warning.category is UnknownConfigWarning
    assert str(warning.message) == (
        "unknown consumer properties ignored: 3, fetch.min.byte (did you mean fetch.min.bytes?), "
        "group_id (did you mean group.id?), no.such.key"
    )
    assert got == {"group_id": "g", "zookeeper_connect": "h:1"}
    # the default stacklevel points at the caller's line; from_properties passes 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        kwargs_from_properties({**REQUIRED, "x.y": "1"}, KINDS)
        ConsumerConfig.from_properties({**REQUIRED, "x.y": "1"})
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line), (__file__, line + 1)]


def test_closest_key_suggests_a_near_dotted_key_or_nothing() -> None:
    assert closest_key("zookeeper.conect", KINDS) == "zookeeper.connect"
    assert closest_key("zookeeper_conect", KINDS) == "zookeeper.connect"
    assert closest_key("bootstrap.servers", KINDS) is None


def test_unknown_keywords_are_refused_naming_the_first_and_a_suggestion() -> None:
    fields = frozenset(KINDS) | {"ssl_context"}
    reject_unknown_keywords({"group_id": "g", "ssl_context": object()}, fields, KINDS)
    with pytest.raises(InvalidConfigError) as info:
        reject_unknown_keywords({"zz": 1, "fetch_min_byte": 1}, fields, KINDS)
    assert info.value.key == "fetch.min.byte"
    assert "unknown consumer property 'fetch_min_byte'; did you mean fetch_min_bytes?" in str(
        info.value
    )


def test_properties_of_a_config_are_strings_without_unset_keys_or_objects() -> None:
    config = ConsumerConfig(
        group_id="g",
        zookeeper_connect="h:1",
        auto_commit_enable=False,
        security_protocol="SSL",
        ssl_context=ssl.create_default_context(),
    )
    props = properties_of(config)
    assert props["group.id"] == "g"
    assert props["auto.commit.enable"] == "false"
    assert props["fetch.min.bytes"] == "1"
    assert "client.id" not in props  # unset: follows group.id
    assert "ssl.context" not in props
    assert props["security.protocol"] == "SSL"
    assert list(props)[:2] == ["group.id", "zookeeper.connect"]  # attribute order
    assert set(props) <= {f.name.replace("_", ".") for f in dataclasses.fields(config)}
