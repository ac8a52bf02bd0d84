"""An async client of the Confluent Schema Registry REST API that caches schemas by id.

It reads only: ``GET /schemas/ids/{id}`` (a schema by the id records carry),
``GET /subjects/{subject}/versions[/{version}]`` (references and prefetching). Every Schema
Registry-compatible server answers these (Confluent's, Apicurio's ``/apis/ccompat/v7``,
Karapace, Redpanda). A schema id never changes meaning, so what was fetched is kept for the
client's life; concurrent requests for one id share one HTTP request.

Credentials follow Confluent's client properties: ``basic.auth.credentials.source``
``USER_INFO`` takes ``basic.auth.user.info`` (``user:password``), ``URL`` takes them from the
URL's ``user:password@``. They are sent as HTTP basic auth and never appear in a ``repr``,
a log line or an error (the URL is shown without them).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import ssl
import urllib.parse
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from ..errors import InvalidConfigError, SchemaRegistryError, UnknownSchemaError

__all__ = ["RegisteredSchema", "SchemaReference", "SchemaRegistryClient"]

log = logging.getLogger(__name__)

_NOT_FOUND = {40401, 40402, 40403}  # subject, version, schema not found
_SOURCES = ("USER_INFO", "URL")


@dataclasses.dataclass(frozen=True)
class SchemaReference:
    """A schema another schema refers to (an Avro named type, a Protobuf import).

    Attributes:
        name: the name the referring schema uses (the Avro full name, the import path).
        subject: the subject the referenced schema is registered under.
        version: its version in that subject.
    """

    name: str
    subject: str
    version: int


@dataclasses.dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry returns it.

    Attributes:
        schema_id: its id, as records carry it.
        schema_type: ``"AVRO"``, ``"PROTOBUF"`` or ``"JSON"``.
        schema: the schema text (Avro or JSON Schema JSON, .proto text, or for Protobuf the
            base64 of a serialized ``FileDescriptorProto``).
        references: the schemas it refers to, in the registry's order.
    """

    schema_id: int
    schema_type: str
    schema: str
    references: tuple[SchemaReference, ...] = ()


def _parse_schema(schema_id: int, body: Mapping[str, Any]) -> RegisteredSchema:
    refs = tuple(
        SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"]))
        for r in body.get("references") or ()
    )
    return RegisteredSchema(
        schema_id, str(body.get("schemaType") or "AVRO").upper(), str(body["schema"]), refs
    )


class SchemaRegistryClient:
    """Reads schemas from a Schema Registry over HTTP(S), caching them by id.

    Use it as an async context manager (or call :meth:`close`); one client serves any
    number of decoders.

    Args:
        url: the registry's base URL, e.g. ``http://registry:8081`` (Apicurio:
            ``.../apis/ccompat/v7``). May carry ``user:password@`` (see
            ``basic_auth_credentials_source``).
        basic_auth_user_info: ``user:password`` for HTTP basic auth
            (``basic.auth.user.info``).
        basic_auth_credentials_source: ``"USER_INFO"`` (the default when
            ``basic_auth_user_info`` is given) or ``"URL"``
            (``basic.auth.credentials.source``).
        ssl_ca_location: a PEM file of the CAs to trust for ``https`` URLs
            (``ssl.ca.location``); default: the system's.
        ssl_certificate_location: a client certificate (PEM) for mutual TLS
            (``ssl.certificate.location``).
        ssl_key_location: its private key (``ssl.key.location``).
        request_timeout_ms: the limit of one HTTP request, milliseconds (default 30 000).

    Raises:
        InvalidConfigError: an unknown credentials source, user info without a colon, or
            TLS files that cannot be loaded.
    """

    def __init__(
        self,
        url: str,
        *,
        basic_auth_user_info: str | None = None,
        basic_auth_credentials_source: str | None = None,
        ssl_ca_location: str | None = None,
        ssl_certificate_location: str | None = None,
        ssl_key_location: str | None = None,
        request_timeout_ms: int = 30_000,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidConfigError("url", f"not an http(s) URL: {_safe_url(url)}")
        default_source = "USER_INFO" if basic_auth_user_info else ""
        source = (basic_auth_credentials_source or default_source).upper()
        user_info: str | None = None
        if source == "USER_INFO":
            if not basic_auth_user_info or ":" not in basic_auth_user_info:
                raise InvalidConfigError(
                    "basic.auth.user.info", "must be user:password for source USER_INFO"
                )
            user_info = basic_auth_user_info
        elif source == "URL":
            if parts.username is None:
                raise InvalidConfigError(
                    "basic.auth.credentials.source", "URL, but the url has no user:password@"
                )
            user_info = (
                f"{urllib.parse.unquote(parts.username)}:"
                f"{urllib.parse.unquote(parts.password or '')}"
            )
        elif source:
            raise InvalidConfigError(
                "basic.auth.credentials.source", f"{source!r} is not one of {', '.join(_SOURCES)}"
            )
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        self._base = urllib.parse.urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))
        self._authorization = (
            "Basic " + base64.b64encode(user_info.encode()).decode() if user_info else None
        )
        self._ssl: ssl.SSLContext | None = None
        if parts.scheme == "https" or ssl_ca_location or ssl_certificate_location:
            try:
                self._ssl = ssl.create_default_context(cafile=ssl_ca_location)
                if ssl_certificate_location:
                    self._ssl.load_cert_chain(ssl_certificate_location, ssl_key_location)
            except (OSError, ssl.SSLError) as e:
                raise InvalidConfigError("ssl.ca.location", f"cannot load: {e}") from None
        self._timeout_s = request_timeout_ms / 1000
        self._session: Any = None
        self._schemas: dict[int, RegisteredSchema] = {}
        self._pending: dict[int, asyncio.Future[RegisteredSchema]] = {}
        self._requests = 0

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> SchemaRegistryClient:
        """A client from Confluent's dotted client properties.

        Args:
            properties: ``url`` (or ``schema.registry.url``), ``basic.auth.user.info``,
                ``basic.auth.credentials.source``, ``ssl.ca.location``,
                ``ssl.certificate.location``, ``ssl.key.location``,
                ``request.timeout.ms``.

        Returns:
            The client (not yet connected: the first request connects).

        Raises:
            InvalidConfigError: ``url`` missing, or as the constructor.
        """
        url = properties.get("url") or properties.get("schema.registry.url")
        if not url:
            raise InvalidConfigError("url", "the Schema Registry URL is required")
        return cls(
            url,
            basic_auth_user_info=properties.get("basic.auth.user.info"),
            basic_auth_credentials_source=properties.get("basic.auth.credentials.source"),
            ssl_ca_location=properties.get("ssl.ca.location"),
            ssl_certificate_location=properties.get("ssl.certificate.location"),
            ssl_key_location=properties.get("ssl.key.location"),
            request_timeout_ms=int(properties.get("request.timeout.ms", 30_000)),
        )

    @property
    def url(self) -> str:
        """The base URL, without credentials."""
        return self._base

    def __repr__(self) -> str:
        auth = ", basic auth" if self._authorization else ""
        return (
            f"<SchemaRegistryClient {self._base}{auth} [schemas cached: {len(self._schemas)}, "
            f"requests: {self._requests}]>"
        )

    async def __aenter__(self) -> SchemaRegistryClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP connections (the cache stays usable). Idempotent."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def cached(self, schema_id: int) -> RegisteredSchema | None:
        """The schema with ``schema_id`` if it was fetched already; never does I/O."""
        return self._schemas.get(schema_id)

    async def get_schema(self, schema_id: int) -> RegisteredSchema:
        """The schema with ``schema_id``, from the cache or the registry.

        Protobuf schemas are asked for as serialized descriptors (``format=serialized``,
        Confluent's); a registry that ignores that answers with .proto text.

        Args:
            schema_id: the id a record carries.

        Returns:
            The schema.

        Raises:
            UnknownSchemaError: the registry has no schema with this id.
            SchemaRegistryError: the registry could not be asked or answered an error.
        """
        schema = self._schemas.get(schema_id)
        if schema is not None:
            return schema
        pending = self._pending.get(schema_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[RegisteredSchema] = asyncio.get_running_loop().create_future()
        self._pending[schema_id] = future
        try:
            body = await self._get(f"/schemas/ids/{schema_id}", {"format": "serialized"})
            if body is None:
                raise UnknownSchemaError(
                    f"the schema registry {self._base} has no schema with this id",
                    schema_id=schema_id,
                )
            schema = _parse_schema(schema_id, body)
            self._schemas[schema_id] = schema
            future.set_result(schema)
            return schema
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: waiters, if any, get it raised
            raise
        finally:
            del self._pending[schema_id]

    async def get_version(self, subject: str, version: int | str) -> RegisteredSchema:
        """A subject's version (``"latest"`` for the newest), cached by its id.

        Args:
            subject: e.g. ``"payments-value"`` (Confluent's TopicNameStrategy).
            version: the version number or ``"latest"``.

        Returns:
            The schema.

        Raises:
            SchemaRegistryError: the subject or version does not exist, or the registry
                could not be asked.
        """
        quoted = urllib.parse.quote(subject, safe="")
        body = await self._get(f"/subjects/{quoted}/versions/{version}", None)
        if body is None:
            raise SchemaRegistryError(self._base, f"no version {version} of subject {subject!r}")
        schema = _parse_schema(int(body["id"]), body)
        return self._schemas.setdefault(schema.schema_id, schema)

    async def get_versions(self, subject: str) -> list[int]:
        """The version numbers of ``subject``, oldest first; empty when it does not exist.

        Raises:
            SchemaRegistryError: the registry could not be asked.
        """
        quoted = urllib.parse.quote(subject, safe="")
        body = await self._get(f"/subjects/{quoted}/versions", None)
        return [int(v) for v in body or ()]

    async def _get(self, path: str, params: Mapping[str, str] | None) -> Any:
        """GET ``path`` as JSON; ``None`` for a "not found" answer."""
        import aiohttp

        if self._session is None:
            headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
            if self._authorization:
                headers["Authorization"] = self._authorization
            self._session = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                connector=aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True),
            )
        self._requests += 1
        try:
            async with self._session.get(self._base + path, params=params) as response:
                if response.status == 200:
                    return await response.json(content_type=None)
                text = await response.text()
                code = None
                try:
                    code = json.loads(text).get("error_code")
                except (ValueError, AttributeError):
                    pass
                if response.status == 404 and (code is None or code in _NOT_FOUND):
                    return None
                raise SchemaRegistryError(
                    self._base, f"GET {path}: {text[:200]}", status=response.status
                )
        except aiohttp.ClientError as e:
            raise SchemaRegistryError(self._base, f"GET {path}: {e}") from None
        except TimeoutError:
            raise SchemaRegistryError(
                self._base, f"GET {path}: no answer within {self._timeout_s:g} s"
            ) from None


def _safe_url(url: str) -> str:
    """``url`` without its ``user:password@``."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
