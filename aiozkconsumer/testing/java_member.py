"""A real Java ``KafkaConsumer`` as a member of a Kafka-coordinated consumer group, for tests.

Interop tests need the reference implementation in the group: :class:`JavaConsumerMember`
runs one ``org.apache.kafka.clients.consumer.KafkaConsumer`` (from the jars the kit already
provisions, :func:`~aiozkconsumer.testing.provision_kafka`) in a ``java`` child process,
subscribed to topics with a group id, and reports every record it consumes, every
assignment it is given and every offset it commits::

    async with JavaConsumerMember(cluster, group, ["payments"]) as member:
        await member.wait_for(lambda records: len(records) >= 100, timeout_s=60)
        assert member.assigned_partitions() == {TopicPartition("payments", 0), ...}

Why a class of our own rather than Kafka's console consumer: neither provisioned runtime
holds it (``kafka.tools.ConsoleConsumer`` / ``org.apache.kafka.tools.consumer.
ConsoleConsumer`` live in the ``kafka-tools`` artifact, which the pinned poms do not pull
in), and the console consumer reports neither its assignment nor its commits, and could not
be relied on to leave the group cleanly on SIGTERM. The class, :data:`JAVA_SOURCE`, is
compiled once per ``kafka-clients`` version with ``javac`` into
``<cache>/java-member/<kafka-clients jar>-<source digest>/`` (:func:`build_java_member`).

The process's inputs (a properties file, its arguments) and its output, one tab-separated line
per event that the member parses as it arrives, are the contract in
:mod:`aiozkconsumer.testing._java_member_protocol` (pure, with the Java program's source in
:mod:`aiozkconsumer.testing._java_member_source`); this module runs the process.

SIGTERM wakes the consumer's ``poll`` (a JVM shutdown hook calls ``wakeup()``), commits what
was consumed (mode ``"sync"``), closes the consumer, which sends ``LeaveGroup`` (so the
group rebalances at once rather than after the session timeout) and writes ``CLOSED``.
The process is always reaped: :meth:`JavaConsumerMember.stop` SIGKILLs it after a time
limit, and like the cluster's servers it gets SIGKILL when the test process dies
(``PR_SET_PDEATHSIG`` and the kit's ``atexit`` hook, :mod:`aiozkconsumer.testing._processes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from aiozkconsumer._resource import AsyncService
from aiozkconsumer.records import TopicPartition
from aiozkconsumer.testing._errors import LocalClusterError
from aiozkconsumer.testing._java_member_protocol import (
    ASSIGNORS,
    COMMIT_MODES,
    GROUP_PROTOCOLS,
    REMOTE_ASSIGNORS,
    Closed,
    Committed,
    Failed,
    JavaAssignment,
    JavaRecord,
    MemberSettings,
    OutputParser,
    Started,
    subscription_of,
)
from aiozkconsumer.testing._java_member_source import JAVA_CLASS, JAVA_SOURCE
from aiozkconsumer.testing._javac import compile_java_class
from aiozkconsumer.testing._processes import _live_lock, _live_processes, make_preexec, tail
from aiozkconsumer.testing.provision import (
    FLAVOURS,
    provision_kafka,
    require_tools,
)

if TYPE_CHECKING:
    from aiozkconsumer.testing.cluster import LocalCluster

__all__ = [
    "ASSIGNORS",
    "COMMIT_MODES",
    "GROUP_PROTOCOLS",
    "JAVA_CLASS",
    "JAVA_SOURCE",
    "REMOTE_ASSIGNORS",
    "JavaAssignment",
    "JavaConsumerMember",
    "JavaMemberError",
    "JavaMemberState",
    "JavaRecord",
    "build_java_member",
]

log = logging.getLogger(__name__)

_STOP_GRACE_S = 20.0
_EXIT_AFTER_EOF_S = 2.0
_KILL_WAIT_S = 10.0
_LINE_LIMIT = 64 * 1024 * 1024
_TAIL_LINES = 60


class JavaMemberError(LocalClusterError):
    """The Java member could not be built or started, or its process exited unexpectedly.

    The message ends with the tail of the member's log when there is one.
    """


class JavaMemberState(enum.Enum):
    """Lifecycle of a :class:`JavaConsumerMember`.

    - ``NEW``: built; only :meth:`~JavaConsumerMember.start` is allowed.
    - ``RUNNING``: the process runs and has subscribed; records and assignments arrive.
    - ``EXITED``: the process ended on its own (an error, or killed from outside); what it
      reported is kept. :meth:`~JavaConsumerMember.stop` still reaps and cleans up.
    - ``STOPPED``: :meth:`~JavaConsumerMember.stop` is done; no process is left.
    """

    NEW = "new"
    RUNNING = "running"
    EXITED = "exited"
    STOPPED = "stopped"


def build_java_member(libs: Path, cache_dir: Path | None = None) -> Path:
    """Compile the member class against the ``kafka-clients`` jar in ``libs`` (cached).

    The classes go to ``<cache>/java-member/<kafka-clients jar name>-<digest>/``, where the
    digest is that of :data:`JAVA_SOURCE`; an existing directory is reused as is (it is
    renamed into place only once complete, so concurrent builds are safe). Blocking (javac
    takes ~2 s); from async code run it in a worker thread.

    Args:
        libs: a provisioned ``libs`` directory (``provision_kafka(...) / "libs"``).
        cache_dir: the kit's cache; default ``$AIOZKCONSUMER_CACHE`` or
            ``~/.cache/aiozkconsumer``.

    Returns:
        The class directory, to put on the class path before ``<libs>/*``.

    Raises:
        ProvisioningError: if ``javac`` is not on ``PATH``.
        JavaMemberError: if ``libs`` holds no single ``kafka-clients-*.jar`` or javac fails
            (the message carries javac's output).
    """
    return compile_java_class(
        libs,
        cache_dir,
        kind="java-member",
        class_name=JAVA_CLASS,
        source=JAVA_SOURCE,
        error=JavaMemberError,
    )


class JavaConsumerMember(AsyncService):
    """A real Java ``KafkaConsumer`` in a consumer group, in a child process (see the module
    docstring).

    Usage::

        async with JavaConsumerMember(cluster, group, [topic], assignor="range") as member:
            await member.wait_for_assignment(lambda tps: len(tps) == 4, timeout_s=60)
            await member.wait_for(lambda records: len(records) >= 1000, timeout_s=60)

    Records start from the earliest offset when the group has no committed offset
    (``auto.offset.reset=earliest``). Every wait is bounded and event-driven (woken by the
    process's output, no polling), and raises at once if the process exits.

    Args:
        cluster_or_bootstrap: a running :class:`~aiozkconsumer.testing.LocalCluster` (its
            :attr:`~aiozkconsumer.testing.LocalCluster.bootstrap_servers` are used), or a
            ``bootstrap.servers`` string.
        group: ``group.id``.
        topics: a topic name, a sequence of them, or a compiled regular expression
            (a pattern subscription; the pattern text is handed to Java's ``Pattern``).
        flavour: whose jars run the consumer: ``"zookeeper"`` (kafka-clients 3.9.1) or
            ``"kraft"`` (kafka-clients 4.3.1). Default: the cluster's flavour, or
            ``"zookeeper"`` with a bootstrap string.
        libs: a ``libs`` directory to run from instead (overrides ``flavour``).
        cache_dir: the kit's jar cache (:func:`~aiozkconsumer.testing.provision_kafka`), also
            where the compiled class is kept.
        assignor: classic protocol: ``"range"`` (default), ``"roundrobin"``, ``"sticky"`` or
            ``"cooperative-sticky"`` (``partition.assignment.strategy``, see
            :data:`ASSIGNORS`); ``consumer`` protocol: ``"range"`` or ``"uniform"``
            (``group.remote.assignor``).
        group_protocol: ``"classic"`` (default; JoinGroup/SyncGroup, protocol type
            ``consumer``) or ``"consumer"`` (KIP-848 ``ConsumerGroupHeartbeat``; Kafka 4.x
            brokers, ``flavour="kraft"``).
        commit: ``"auto"`` (default: ``enable.auto.commit=true``, Kafka's own interval
            commits and a commit on revocation and close), ``"sync"`` (``commitSync`` of the
            consumed offsets after every poll that returned records, on revocation and at
            close, each reported in :attr:`committed`) or ``"none"``.
        auto_commit_interval_ms: ``auto.commit.interval.ms`` for ``commit="auto"`` (default
            1000).
        session_timeout_ms: classic protocol: ``session.timeout.ms`` (default 10000; the
            broker allows 6000 to 1800000); ``heartbeat.interval.ms`` is a third of it, at
            most 1000. Not sent with the ``consumer`` protocol (a broker setting there).
        client_id: ``client.id``; default ``java-member-<group>-<n>``.
        extra_properties: further consumer properties; they override everything above.
        work_dir: where the properties file, log configuration and log go; default a fresh
            temporary directory. A directory given here is never deleted.
        keep_work_dir: keep the work directory after :meth:`stop` (it is kept anyway when
            the ``async with`` body or a wait failed).
        close_timeout_s: how long ``KafkaConsumer.close`` may take at stop (default 10 s).
        start_timeout_s: how long :meth:`start` waits for the process to subscribe
            (default 60 s; the JVM starts in about a second).
        poll_timeout_ms: the timeout of each ``KafkaConsumer.poll`` (default 1000); the
            rebalance listener runs within ``poll``.
        on_event: called with each :class:`JavaRecord` and :class:`JavaAssignment` as it is
            parsed, in the order of the process's output, in the task reading it (so it
            must not block; an exception it raises is logged and ignored). Default None.
        keep_records: keep every record in :attr:`records` (default True); False for long
            runs that take records through ``on_event`` (then :attr:`records` stays empty
            and :meth:`wait_for` sees no records).

    Raises:
        ValueError: if no topic is given, or ``flavour``, ``group_protocol``, ``assignor``
            or ``commit`` is not one of the values above.
    """

    _instances = 0

    def __init__(
        self,
        cluster_or_bootstrap: LocalCluster | str,
        group: str,
        topics: str | Sequence[str] | re.Pattern[str],
        *,
        flavour: str | None = None,
        libs: Path | None = None,
        cache_dir: Path | None = None,
        assignor: str = "range",
        group_protocol: str = "classic",
        commit: str = "auto",
        auto_commit_interval_ms: int = 1000,
        session_timeout_ms: int = 10_000,
        client_id: str | None = None,
        extra_properties: Mapping[str, str] | None = None,
        work_dir: Path | None = None,
        keep_work_dir: bool = False,
        close_timeout_s: float = 10.0,
        start_timeout_s: float = 60.0,
        on_event: Callable[[JavaRecord | JavaAssignment], None] | None = None,
        keep_records: bool = True,
        poll_timeout_ms: int = 1000,
    ) -> None:
        if isinstance(cluster_or_bootstrap, str):
            bootstrap = cluster_or_bootstrap
            default_flavour = "zookeeper"
        else:
            bootstrap = cluster_or_bootstrap.bootstrap_servers
            default_flavour = cluster_or_bootstrap.flavour
        self._flavour = flavour or default_flavour
        if self._flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {', '.join(FLAVOURS)}, got {flavour!r}")
        self._settings = MemberSettings(
            bootstrap=bootstrap,
            group=group,
            client_id=client_id or f"java-member-{group}-{JavaConsumerMember._instances + 1}",
            subscription=subscription_of(topics),
            assignor=assignor,
            group_protocol=group_protocol,
            commit=commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            session_timeout_ms=session_timeout_ms,
            extra_properties=dict(extra_properties or {}),
            close_timeout_s=close_timeout_s,
            poll_timeout_ms=poll_timeout_ms,
        )
        JavaConsumerMember._instances += 1
        self.group = group
        self.client_id = self._settings.client_id
        self._libs = libs
        self._cache_dir = cache_dir
        self._given_work_dir = Path(work_dir) if work_dir is not None else None
        self._work_dir: Path | None = None
        self._keep_work_dir = keep_work_dir
        self._start_timeout_s = start_timeout_s
        self._on_event = on_event
        self._keep_records = keep_records
        self._failed = False

        self._state = JavaMemberState.NEW
        self._proc: subprocess.Popen[bytes] | None = None
        self._transport: asyncio.ReadTransport | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._eof = False
        self._started = False
        self.started_at: float | None = None
        """When the ``STARTED`` line was read (``time.time()``): the consumer was built and
        subscribed. None before."""
        self._parser = OutputParser()

        self.records: list[JavaRecord] = []
        """Every record consumed, in arrival order (none kept with ``keep_records=False``)."""
        self.assignments: list[JavaAssignment] = []
        """Every assignment change reported, in order."""
        self.committed: dict[TopicPartition, int] = {}
        """``commit="sync"``: the last committed offset (next to read) per partition."""
        self.errors: list[str] = []
        """``ERROR`` lines: exceptions the consumer died of."""
        self.closed_cleanly = False
        """True once ``KafkaConsumer.close`` returned (the member left the group)."""

    # ---- description -----------------------------------------------------------------

    def __repr__(self) -> str:
        parts = [
            self._state.name,
            f"group={self.group}",
            self._flavour,
            self._settings.group_protocol,
        ]
        if self._proc is not None:
            parts.append(f"pid {self._proc.pid}")
            if self._proc.returncode is not None:
                parts.append(f"exited {self._proc.returncode}")
        parts.append(f"{len(self.records)} records")
        parts.append(f"assigned {sorted(str(tp) for tp in self.assigned_partitions())}")
        if self.errors:
            parts.append(f"error {self.errors[-1]!r}")
        return f"<JavaConsumerMember [{', '.join(parts)}]>"

    @property
    def state(self) -> JavaMemberState:
        """The lifecycle state (see :class:`JavaMemberState`)."""
        return self._state

    @property
    def pid(self) -> int | None:
        """The process id, once started."""
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        """The exit status once the process ended (143 after SIGTERM, -9 after SIGKILL)."""
        return self._proc.returncode if self._proc is not None else None

    @property
    def work_dir(self) -> Path:
        """The work directory (properties, log configuration, log).

        Raises:
            JavaMemberError: if the member was never started.
        """
        if self._work_dir is None:
            raise JavaMemberError("the Java member was not started")
        return self._work_dir

    @property
    def log_file(self) -> Path:
        """The process's stderr: the Java client's log (consumer at INFO) and stack traces.

        Raises:
            JavaMemberError: if the member was never started.
        """
        return self.work_dir / "member.log"

    def log_tail(self, lines: int = _TAIL_LINES) -> str:
        """The last ``lines`` lines of :attr:`log_file` ("" before start)."""
        return tail(self.log_file, lines) if self._work_dir is not None else ""

    def assigned_partitions(self) -> frozenset[TopicPartition]:
        """The partitions owned now, as the last rebalance listener call left them."""
        return self.assignments[-1].partitions if self.assignments else frozenset()

    @property
    def generation(self) -> int:
        """The generation of the last assignment change (-1 before any)."""
        return self.assignments[-1].generation if self.assignments else -1

    @property
    def member_id(self) -> str:
        """The member id the coordinator gave (as of the last assignment change; "" before)."""
        return self.assignments[-1].member_id if self.assignments else ""

    def mark_failed(self) -> None:
        """Keep the work directory (the log) after :meth:`stop`."""
        self._failed = True

    # ---- lifecycle -------------------------------------------------------------------

    def _block_failed(self, exc: BaseException) -> None:
        self._failed = True

    async def aclose(self) -> None:
        """Leaving ``async with``: :meth:`stop`."""
        await self.stop()

    async def start(self) -> None:
        """Provision and build if needed, start the process and wait until it subscribed.

        Raises:
            JavaMemberError: if it was already started, the class cannot be built, or the
                process exits (e.g. the consumer rejected its configuration) or does not
                subscribe within ``start_timeout_s``; everything started is cleaned up.
            ProvisioningError: if ``java``/``javac`` is missing or the jars cannot be fetched.
        """
        if self._state is not JavaMemberState.NEW:
            raise JavaMemberError(f"the Java member was already started: {self!r}")
        java = require_tools(("java",))["java"]
        libs = self._libs
        if libs is None:
            home = await asyncio.to_thread(
                provision_kafka, self._cache_dir, flavour=self._flavour, quiet=True
            )
            libs = home / "libs"
        classes = await asyncio.to_thread(build_java_member, libs, self._cache_dir)
        work = self._make_work_dir()
        for name, text in self._settings.work_files().items():
            (work / name).write_text(text)
        self._spawn(self._settings.command(java, classes, libs, work), work)
        try:
            await self._wait(lambda: self._started, self._start_timeout_s, "subscribed")
        except BaseException:
            self._failed = True
            await self.stop()
            raise

    async def stop(self, grace_s: float = _STOP_GRACE_S) -> int | None:
        """Stop the member: SIGTERM, so it commits (mode ``"sync"``), closes the consumer and
        leaves the group; SIGKILL if it has not exited within ``grace_s``. Idempotent.

        The process is reaped and the work directory removed (unless kept) whatever happens,
        also if this call is cancelled (then by SIGKILL).

        Args:
            grace_s: seconds the process may take to exit after SIGTERM (default 20).

        Returns:
            The process's exit status (None if it was never started). :attr:`closed_cleanly`
            says whether the consumer was closed.
        """
        proc = self._proc
        if proc is None or self._state is JavaMemberState.STOPPED:
            self._state = JavaMemberState.STOPPED
            return proc.returncode if proc is not None else None
        try:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
            # Its stdout reaches EOF when the process exits, once the reader has taken the
            # last lines (CLOSED).
            if self._reader_task is not None:
                await asyncio.wait({self._reader_task}, timeout=grace_s)
            if not self._eof:
                log.warning("%r did not stop within %.0f s; killing it", self, grace_s)
        finally:
            self._cleanup()
        return proc.returncode

    # ---- waiting ---------------------------------------------------------------------

    async def wait_for(
        self, predicate: Callable[[Sequence[JavaRecord]], bool], timeout_s: float = 60.0
    ) -> None:
        """Wait until ``predicate(self.records)`` holds (checked at once and after each event).

        Args:
            predicate: called with :attr:`records` (do not keep or change the list).
            timeout_s: the time limit, seconds.

        Raises:
            TimeoutError: if it does not hold within ``timeout_s``; the message shows the
                member and the tail of its log.
            JavaMemberError: if the process exited, or the member is not running, before it
                held.
        """
        await self._wait(lambda: predicate(self.records), timeout_s, "the records predicate")

    async def wait_for_assignment(
        self,
        predicate: Callable[[frozenset[TopicPartition]], bool],
        timeout_s: float = 60.0,
    ) -> frozenset[TopicPartition]:
        """Wait until ``predicate(self.assigned_partitions())`` holds.

        Args:
            predicate: called with the partitions owned now.
            timeout_s: the time limit, seconds.

        Returns:
            The partitions owned when it held.

        Raises:
            TimeoutError: if it does not hold within ``timeout_s``.
            JavaMemberError: if the process exited, or the member is not running, before it
                held.
        """
        await self._wait(
            lambda: predicate(self.assigned_partitions()), timeout_s, "the assignment predicate"
        )
        return self.assigned_partitions()

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
        """Wait until ``condition()`` holds, re-checked after each event of this member.

        Raises:
            TimeoutError: if it does not hold within ``timeout_s``.
            JavaMemberError: if the process exited, or the member is not running, before it
                held.
        """
        await self._wait(condition, timeout_s, "the condition")

    async def _wait(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        if self._state is JavaMemberState.NEW:
            raise JavaMemberError(f"the Java member is not started: {self!r}")
        try:
            async with asyncio.timeout(timeout_s):
                while not condition():
                    if self._eof or self._state is not JavaMemberState.RUNNING:
                        self._failed = True
                        raise JavaMemberError(
                            f"{what} did not hold and the Java member is not running: "
                            f"{self!r}\n--- last lines of {self.log_file} ---\n"
                            f"{self.log_tail()}"
                        )
                    await self._changed.wait()
        except TimeoutError:
            self._failed = True
            raise TimeoutError(
                f"{what} did not hold within {timeout_s:.0f} s: {self!r}\n"
                f"--- last lines of {self.log_file} ---\n{self.log_tail()}"
            ) from None

    # ---- internals -------------------------------------------------------------------

    def consumer_properties(self) -> dict[str, str]:
        """The consumer configuration the process gets (``extra_properties`` applied last)."""
        return self._settings.consumer_properties()

    def _make_work_dir(self) -> Path:
        if self._given_work_dir is not None:
            work = self._given_work_dir
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(tempfile.mkdtemp(prefix="aiozkconsumer-java-member-"))
        self._work_dir = work.resolve()
        return self._work_dir

    def _spawn(self, cmd: list[str], work: Path) -> None:
        """Start the process and the task reading its stdout."""
        loop = asyncio.get_running_loop()
        with (work / "member.log").open("ab") as err:
            err.write(f"==== {time.strftime('%H:%M:%S')} starting {' '.join(cmd)}\n".encode())
            err.flush()
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=work,
                start_new_session=True,
                preexec_fn=make_preexec(),
            )
        with _live_lock:
            _live_processes.add(proc)
        self._proc = proc
        self._state = JavaMemberState.RUNNING
        log.debug("started %s (pid %d)", self.client_id, proc.pid)
        self._reader_task = loop.create_task(self._read(proc), name=f"{self.client_id} stdout")

    async def _read(self, proc: subprocess.Popen[bytes]) -> None:
        """Parse the process's stdout until EOF (the process exited)."""
        assert proc.stdout is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_LINE_LIMIT)
        try:
            self._transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), proc.stdout
            )
            while line := await reader.readline():
                self._on_line(line.decode("utf-8", "replace").rstrip("\n"))
        finally:
            self._eof = True
            if self._state is JavaMemberState.RUNNING:
                self._state = JavaMemberState.EXITED
            self._notify()

    def _on_line(self, line: str) -> None:
        now = time.time()
        try:
            event = self._parser.parse(line, now)
        except ValueError:
            log.warning("%s: cannot parse %r", self.client_id, line)
            return
        match event:
            case None:
                log.debug("%s: unexpected output %r", self.client_id, line)
                return
            case JavaRecord():
                if self._keep_records:
                    self.records.append(event)
            case JavaAssignment():
                self.assignments.append(event)
            case Committed():
                self.committed.update(event.offsets)
            case Started():
                self._started = True
                self.started_at = now
            case Closed():
                self.closed_cleanly = True
            case Failed():
                self.errors.append(event.error)
                log.warning("%s: %s", self.client_id, event.error)
        if isinstance(event, JavaRecord | JavaAssignment) and self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:
                log.exception("%s: on_event failed", self.client_id)
        self._notify()

    def _notify(self) -> None:
        """Wake every waiter (they re-check their condition and wait on a fresh event)."""
        self._changed.set()
        self._changed = asyncio.Event()

    def _cleanup(self) -> None:
        """Kill and reap the process, stop reading, remove the work directory (never raises;
        synchronous, so that it also runs when :meth:`stop` is cancelled)."""
        proc = self._proc
        if proc is not None:
            if proc.poll() is None and self._eof:  # exiting: its stdout is closed
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=_EXIT_AFTER_EOF_S)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=_KILL_WAIT_S)
            with _live_lock:
                _live_processes.discard(proc)
        task = self._reader_task
        if task is not None and not task.done():
            task.cancel()
        elif task is not None and not task.cancelled() and task.exception() is not None:
            self.errors.append(f"reading the output failed: {task.exception()!r}")
            self._failed = True
        if self._transport is not None:
            self._transport.close()
        elif proc is not None and proc.stdout is not None:
            proc.stdout.close()
        self._state = JavaMemberState.STOPPED
        self._notify()
        work = self._work_dir
        if work is None or self._given_work_dir is not None:
            return
        if self._failed:
            log.warning(
                "Java member %s failed; work directory kept: %s\n--- last lines of its log ---\n%s",
                self.client_id,
                work,
                self.log_tail(),
            )
            return
        if self._keep_work_dir:
            log.info("Java member %s: work directory kept: %s", self.client_id, work)
            return
        shutil.rmtree(work, ignore_errors=True)
