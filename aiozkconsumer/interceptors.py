"""Consumer interceptors (``interceptor.classes``), as the Java client's ``ConsumerInterceptor``.

An interceptor sees the records before the application does (``on_consume``, which may filter
or transform them), the offsets after each successful commit (``on_commit``) and the
connector's shutdown (``close``). ``Interceptors`` is the chain a connector builds from
``interceptor.classes``; as the Java client's ``ConsumerInterceptors`` (kafka-clients 0.10+),
an interceptor that raises is logged and skipped, so a faulty interceptor never loses records
nor stops the consumer.

Beyond the Java interface, an interceptor may have any of three optional hooks, found by name
when the chain is built: ``configure(config)`` (the Java client's ``Configurable``: the
connector's ``ConsumerConfig``, once), ``on_poll()`` (the reader asks for its next record or
batch: what it was handed before is done with) and ``on_rebalance(record)`` (a rebalance
ended, its ``RebalanceRecord``). The tracing of ``aiozkconsumer.tracing`` is built on them.

Pure: no I/O and no asyncio; the methods are synchronous because they run on the record hot
path.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from .errors import InvalidConfigError
from .records import MessageAndMetadata, RebalanceRecord, TopicPartition

if TYPE_CHECKING:
    from .config import ConsumerConfig

__all__ = ["ConsumerInterceptor", "Interceptors"]

log = logging.getLogger(__name__)

_CONFIG_KEY = "interceptor.classes"
_METHODS = ("on_consume", "on_commit", "close")
_OPTIONAL = ("configure", "on_poll", "on_rebalance")


@runtime_checkable
class ConsumerInterceptor(Protocol):
    """What ``interceptor.classes`` names (Java: ``o.a.k.clients.consumer.ConsumerInterceptor``).

    A class named in ``interceptor.classes`` is built with no arguments, once per connector.
    All three methods are synchronous and run on the consumer's event loop, ``on_consume``
    once per record or batch handed out: they must not block (no network or disk waits, no
    ``time.sleep``). An exception from any of them is logged and otherwise ignored.

    Optional hooks, called when the interceptor has them (synchronous too, and never
    required):

    - ``configure(config: ConsumerConfig) -> None``: once, when the connector builds its
      chain, with the connector's configuration (the Java client's ``Configurable``). An
      exception fails the connector's construction (``InvalidConfigError``).
    - ``on_poll() -> None``: each time the reader asks for its next record or batch
      (``__anext__``, ``next_batch``), before it waits: the records handed out before are
      done with. Not called while records an interceptor added are still being handed out.
      Called only by streams that run interceptors.
    - ``on_rebalance(record: RebalanceRecord) -> None``: after each rebalance, succeeded or
      failed, with what it did; runs in the task that rebalanced.
    """

    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        """Called with records just before they are handed to the application.

        The records' offsets already count as consumed: a record removed here is never seen
        by the application but is committed all the same (as the Java client).

        Args:
            records: the records about to be handed out, in offset order per partition; a
                list of one when the application iterates record by record. The list is the
                interceptor's own copy and may be changed in place.

        Returns:
            The records to hand out instead: the same list, a filtered one, transformed
            records (``msg._replace(value=...)``), or several per input record. An empty list
            hands out nothing (the reader keeps waiting for the next record).
        """
        ...

    def on_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Called after offsets were committed successfully.

        Args:
            offsets: the committed offsets (the next offset to read) per partition, read-only.
        """
        ...

    def close(self) -> None:
        """Called once when the connector shuts down."""
        ...


def _qualified_name(obj: object) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _fault(interceptor: object) -> str | None:
    """What keeps ``interceptor`` from being a ``ConsumerInterceptor``, or ``None``."""
    missing = [m for m in _METHODS if not callable(getattr(interceptor, m, None))]
    if missing:
        return "lacks " + ", ".join(missing)
    asynchronous = [
        m
        for m in (*_METHODS, *_OPTIONAL)
        if inspect.iscoroutinefunction(getattr(interceptor, m, None))
    ]
    if asynchronous:
        return "has async " + ", ".join(asynchronous) + " (interceptor methods must be sync)"
    return None


class Interceptors:
    """The interceptor chain of one connector (the Java client's ``ConsumerInterceptors``).

    Interceptors run in order; each ``on_consume`` gets the records the previous one returned.
    One that raises (or, in ``on_consume``, returns something other than a list) is logged at
    WARNING with its traceback and skipped for that call: the records it was given pass on
    unchanged, so no record is lost to a faulty interceptor. Logged every time, as the Java
    client does.

    Args:
        items: the interceptors, in the order they run.

    Raises:
        TypeError: an item lacks ``on_consume``, ``on_commit`` or ``close``, or one of them
            (or an optional hook it has) is a coroutine function.
    """

    __slots__ = ("_closed", "_items", "_named", "_pollers", "_rebalance_observers")

    def __init__(self, items: Sequence[ConsumerInterceptor] = ()) -> None:
        for item in items:
            fault = _fault(item)
            if fault is not None:
                raise TypeError(f"{_qualified_name(item)} is not a ConsumerInterceptor: {fault}")
        self._items: tuple[ConsumerInterceptor, ...] = tuple(items)
        self._named = tuple((item, _qualified_name(item)) for item in self._items)
        self._pollers = _having(self._named, "on_poll")
        self._rebalance_observers = _having(self._named, "on_rebalance")
        self._closed = False

    @classmethod
    def from_config(
        cls,
        spec: str | None,
        extra: Sequence[ConsumerInterceptor] = (),
        *,
        config: ConsumerConfig | None = None,
    ) -> Interceptors:
        """Build the chain ``interceptor.classes`` names, followed by ``extra``.

        Each comma-separated name is ``module:Class`` or ``module.Class`` (``Class`` may be
        dotted after a colon, for a nested class); the module is imported and the class built
        with no arguments, as the Java client's ``getConfiguredInstances``. Then, given
        ``config``, every interceptor of the chain that has a ``configure`` method is
        configured with it (the Java client configures what it builds). If one fails, those
        already built are closed before the error is raised.

        Args:
            spec: ``interceptor.classes``; ``None`` or blank for none.
            extra: interceptors given in code, run after the configured ones.
            config: the connector's configuration, for the interceptors' ``configure``;
                ``None``: ``configure`` is not called.

        Returns:
            The chain; falsy when there is no interceptor at all.

        Raises:
            InvalidConfigError: (key ``interceptor.classes``) a name is empty or malformed,
                its module cannot be imported, it names no attribute of the module or
                something other than a class, building it with no arguments raised, the
                instance is not a ``ConsumerInterceptor`` (lacks a method or has an async one),
                or an interceptor's ``configure`` raised.
            TypeError: an item of ``extra`` is not a ``ConsumerInterceptor``.
        """
        chain = cls(extra)  # checks extra before anything is built
        names = [] if spec is None or not spec.strip() else [n.strip() for n in spec.split(",")]
        built: list[ConsumerInterceptor] = []
        try:
            built.extend(_build(name) for name in names)
            if config is not None:
                for item in (*built, *chain._items):
                    _configure(item, config)
        except InvalidConfigError:
            cls(built).close()
            raise
        return cls([*built, *chain._items])

    def __bool__(self) -> bool:
        """Whether any interceptor is configured."""
        return bool(self._items)

    @property
    def items(self) -> tuple[ConsumerInterceptor, ...]:
        """The interceptors, in the order they run."""
        return self._items

    @property
    def polls(self) -> bool:
        """Whether some interceptor has an ``on_poll`` hook."""
        return bool(self._pollers)

    @property
    def observes_rebalances(self) -> bool:
        """Whether some interceptor has an ``on_rebalance`` hook."""
        return bool(self._rebalance_observers)

    def on_poll(self) -> None:
        """Tell the interceptors with an ``on_poll`` hook that the reader asks for records.

        Errors are logged at WARNING (with the traceback) and otherwise ignored.
        """
        for item, name in self._pollers:
            try:
                item.on_poll()
            except Exception:
                log.warning("interceptor %s failed in on_poll", name, exc_info=True)

    def on_rebalance(self, record: RebalanceRecord) -> None:
        """Tell the interceptors with an ``on_rebalance`` hook that a rebalance ended.

        Args:
            record: what the rebalance did (the coordinator's newest history entry).
        """
        for item, name in self._rebalance_observers:
            try:
                item.on_rebalance(record)
            except Exception:
                log.warning("interceptor %s failed in on_rebalance", name, exc_info=True)

    def on_consume(self, records: list[MessageAndMetadata]) -> list[MessageAndMetadata]:
        """Pass ``records`` through every interceptor's ``on_consume``, in order.

        Args:
            records: the records about to be handed out; not changed.

        Returns:
            What the last interceptor returned (``records`` itself when every interceptor
            failed or there is none); possibly empty.
        """
        for item, name in self._named:
            try:
                # A copy each, so one that changes its list and then raises loses nothing.
                result = item.on_consume(list(records))
            except Exception:
                log.warning(
                    "interceptor %s failed in on_consume; its records pass on unchanged",
                    name,
                    exc_info=True,
                )
                continue
            if not isinstance(result, list):
                if inspect.iscoroutine(result):
                    result.close()  # an async on_consume set after construction
                log.warning(
                    "interceptor %s returned %s from on_consume, not a list; its records "
                    "pass on unchanged",
                    name,
                    type(result).__name__,
                )
                continue
            records = result
        return records

    def on_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Tell every interceptor that ``offsets`` were committed; errors are logged.

        Args:
            offsets: the committed offsets (next offset to read) per partition. Each
                interceptor gets a read-only view of a copy.
        """
        if not self._items:
            return
        view = MappingProxyType(dict(offsets))
        for item, name in self._named:
            try:
                item.on_commit(view)
            except Exception:
                log.warning("interceptor %s failed in on_commit", name, exc_info=True)

    def close(self) -> None:
        """Close every interceptor, in order; errors are logged. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for item, name in self._named:
            try:
                item.close()
            except Exception:
                log.warning("interceptor %s failed in close", name, exc_info=True)

    def __repr__(self) -> str:
        names = ", ".join(name for _, name in self._named)
        return f"<Interceptors [{names}]{' closed' if self._closed else ''}>"


def _having(named: tuple[tuple[Any, str], ...], hook: str) -> tuple[tuple[Any, str], ...]:
    """The ``(interceptor, name)`` pairs of ``named`` that have the optional ``hook``."""
    return tuple((item, name) for item, name in named if callable(getattr(item, hook, None)))


def _configure(interceptor: object, config: ConsumerConfig) -> None:
    """Call ``interceptor.configure(config)`` if it has the hook.

    Raises:
        InvalidConfigError: (key ``interceptor.classes``) ``configure`` raised.
    """
    configure = getattr(interceptor, "configure", None)
    if not callable(configure):
        return
    try:
        configure(config)
    except Exception as e:
        raise InvalidConfigError(
            _CONFIG_KEY,
            f"interceptor {_qualified_name(interceptor)} failed in configure: "
            f"{type(e).__name__}: {e}",
        ) from e


def _hidden_import_error(name: str) -> ImportError | None:
    """The ``ImportError`` of the module part of a ``module.Class`` name, if it has one.

    ``pkgutil.resolve_name`` imports a dotted name's module part by part and turns a part
    that fails to import into an ``AttributeError``, hiding why (e.g. an optional extra that
    is not installed, whose module names it).
    """
    if ":" in name:
        return None
    try:
        importlib.import_module(name.rpartition(".")[0])
    except ImportError as e:
        return e
    except Exception:
        return None
    return None


def _build(name: str) -> ConsumerInterceptor:
    """Import and build the interceptor class ``name`` (``module:Class`` or ``module.Class``).

    Raises:
        InvalidConfigError: as ``Interceptors.from_config``.
    """
    if not name:
        raise InvalidConfigError(_CONFIG_KEY, "empty class name in the list")
    if ":" not in name and "." not in name:
        raise InvalidConfigError(
            _CONFIG_KEY, f"{name!r} is not a module:Class or module.Class name"
        )
    try:
        target = pkgutil.resolve_name(name)
    except Exception as e:
        # Covers a missing module or attribute, a malformed name, and errors the module
        # raises while being imported.
        hidden = _hidden_import_error(name) if isinstance(e, AttributeError) else None
        cause: Exception = hidden or e
        raise InvalidConfigError(
            _CONFIG_KEY,
            f"cannot load interceptor class {name!r}: {type(cause).__name__}: {cause}",
        ) from cause
    if not isinstance(target, type):
        raise InvalidConfigError(
            _CONFIG_KEY,
            f"{name!r} names a {type(target).__name__}, not a class",
        )
    try:
        instance: object = target()
    except Exception as e:
        raise InvalidConfigError(
            _CONFIG_KEY,
            f"cannot build interceptor class {name!r} with no arguments: {type(e).__name__}: {e}",
        ) from e
    fault = _fault(instance)
    if fault is not None:
        close = getattr(instance, "close", None)
        if callable(close) and not inspect.iscoroutinefunction(close):
            try:
                close()
            except Exception:
                log.warning("interceptor %s failed in close", name, exc_info=True)
        raise InvalidConfigError(_CONFIG_KEY, f"{name!r} is not a ConsumerInterceptor: it {fault}")
    return cast(ConsumerInterceptor, instance)
