"""A real Schema Registry for tests: Apicurio Registry's Confluent-compatible API, local.

Apicurio Registry 2.4.2.Final (Apache-2.0) answers the Confluent Schema Registry REST API at
``/apis/ccompat/v7``: what Confluent's serializers and :mod:`aiozkconsumer.schema_registry`
speak. Maven Central has the registry's application jar but no runnable form of it, so
:func:`provision_schema_registry` builds one, once, into the jar cache: a pinned pom
(``apicurio-registry-pom.xml`` next to this module) unpacks the application jar and runs
``quarkus-maven-plugin:build`` on it (about two minutes on a first download, then nothing).
:class:`LocalSchemaRegistry` runs it with its in-memory H2 storage on a free loopback port::

    with LocalSchemaRegistry() as registry:
        registry.url  # "http://127.0.0.1:<port>/apis/ccompat/v7"

Every start is an empty registry (schema ids count from 1); start-up takes 10-20 s on two
cores, so share one per test module or session.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from ._errors import ClusterStartError, LocalClusterError
from ._processes import HOST, Server, free_ports, tail
from .provision import ProvisioningError, _locked, default_cache_dir, require_tools

__all__ = [
    "APICURIO_VERSION",
    "POM_PATH",
    "LocalSchemaRegistry",
    "main",
    "provision_schema_registry",
]

log = logging.getLogger(__name__)

APICURIO_VERSION = "2.4.2.Final"
"""The Apicurio Registry release the pinned pom builds."""

POM_PATH = Path(__file__).with_name("apicurio-registry-pom.xml")
"""The pinned pom (see its header comment for why this version and the two stand-ins)."""

CCOMPAT_PATH = "/apis/ccompat/v7"
"""Where Apicurio serves the Confluent Schema Registry API."""

# Stands in for the build step of apicurio-common-app-components-config-index-deployment,
# which Maven Central does not have: the registry then lists no dynamic property.
_PRODUCER_SOURCE = """\
package aiozkconsumer.testing.registry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.List;
import javax.enterprise.inject.Produces;
import javax.inject.Singleton;

public class DynamicConfigPropertyListProducer {
    @Produces
    @Singleton
    DynamicConfigPropertyList dynamicConfigPropertyList() {
        return new DynamicConfigPropertyList(List.of());
    }
}
"""
_PRODUCER_PATH = (
    "src/main/java/aiozkconsumer/testing/registry/DynamicConfigPropertyListProducer.java"
)
_RUNNER = "apicurio-registry-runner-1-runner.jar"
_MARKER = ".complete"
_MVN_TIMEOUT_S = 1200.0
_START_TIMEOUT_S = 120.0


def _digest() -> str:
    h = hashlib.sha256(POM_PATH.read_bytes())
    h.update(_PRODUCER_SOURCE.encode())
    return h.hexdigest()


def _is_complete(target: Path, digest: str) -> bool:
    try:
        marker = (target / _MARKER).read_text(encoding="ascii").strip()
    except OSError:
        return False
    return marker == digest and (target / _RUNNER).is_file()


def provision_schema_registry(cache_dir: Path | None = None, *, quiet: bool = True) -> Path:
    """Build the runnable registry into the jar cache, unless it is there already.

    Idempotent and safe from concurrent processes (a file lock; the build happens in a
    temporary directory renamed into place). Blocks for the Maven build on a first call.

    Args:
        cache_dir: the jar cache. Default: ``$AIOZKCONSUMER_CACHE`` if set, else
            ``~/.cache/aiozkconsumer``.
        quiet: if True Maven runs with ``-q`` (its output is shown only on failure).

    Returns:
        The directory holding ``apicurio-registry-runner-1-runner.jar`` and its ``lib/``.

    Raises:
        ProvisioningError: ``java`` or ``mvn`` is missing, Maven failed or timed out (the
            message ends with its output's tail), or the cache cannot be written.
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = cache / f"apicurio-registry-{APICURIO_VERSION}"
    digest = _digest()
    if _is_complete(target, digest):
        return target
    tools = require_tools(("java", "mvn"))
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with _locked(cache / f".apicurio-registry-{APICURIO_VERSION}.lock"):
            if _is_complete(target, digest):
                return target
            work = Path(tempfile.mkdtemp(prefix=".apicurio-build-", dir=cache))
            try:
                shutil.copy(POM_PATH, work / "pom.xml")
                source = work / _PRODUCER_PATH
                source.parent.mkdir(parents=True)
                source.write_text(_PRODUCER_SOURCE, encoding="utf-8")
                cmd = [tools["mvn"], "-B", "package", "-DskipTests"]
                if quiet:
                    cmd.insert(1, "-q")
                try:
                    done = subprocess.run(
                        cmd,
                        cwd=work,
                        stdin=subprocess.DEVNULL,
                        capture_output=True,
                        timeout=_MVN_TIMEOUT_S,
                        check=False,
                    )
                except subprocess.TimeoutExpired as exc:
                    raise ProvisioningError(
                        f"Maven did not build the schema registry within {_MVN_TIMEOUT_S:.0f} s"
                    ) from exc
                built = work / "target"
                if done.returncode != 0 or not (built / _RUNNER).is_file():
                    output = (done.stdout + done.stderr).decode(errors="replace").splitlines()
                    raise ProvisioningError(
                        f"Maven failed (exit code {done.returncode}) building Apicurio Registry "
                        f"{APICURIO_VERSION} from {POM_PATH}; is Maven Central reachable? "
                        "Last output:\n" + "\n".join(output[-40:])
                    )
                staging = Path(tempfile.mkdtemp(prefix=".apicurio-registry-", dir=cache))
                (built / _RUNNER).rename(staging / _RUNNER)
                (built / "lib").rename(staging / "lib")
                (staging / _MARKER).write_text(digest + "\n", encoding="ascii")
                if target.exists():
                    shutil.rmtree(target)
                staging.rename(target)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    except OSError as exc:
        raise ProvisioningError(f"cannot write the registry build in {cache}: {exc}") from exc
    log.info("Apicurio Registry %s built in %s", APICURIO_VERSION, target)
    return target


class LocalSchemaRegistry:
    """One Apicurio Registry process with in-memory storage on a free loopback port.

    A context manager (``with``) or :meth:`start` / :meth:`stop`. The log is kept in
    ``log_dir`` (a temporary directory by default) and its tail is in the error when the
    registry does not start.

    Args:
        cache_dir: the jar cache (see :func:`provision_schema_registry`).
        log_dir: where ``schema-registry.log`` goes. Default: a new temporary directory.
        heap: the JVM's maximum heap (``-Xmx``), default ``"384m"``.
    """

    def __init__(
        self, cache_dir: Path | None = None, *, log_dir: Path | None = None, heap: str = "384m"
    ) -> None:
        self._cache_dir = cache_dir
        self._log_dir = log_dir
        self._heap = heap
        self._server: Server | None = None

    def __repr__(self) -> str:
        state = self._server.status() if self._server is not None else "not started"
        return f"<LocalSchemaRegistry Apicurio {APICURIO_VERSION} [{state}]>"

    @property
    def url(self) -> str:
        """The Confluent-compatible base URL, ``http://127.0.0.1:<port>/apis/ccompat/v7``.

        Raises:
            LocalClusterError: if the registry was not started.
        """
        if self._server is None:
            raise LocalClusterError("the schema registry is not started")
        return f"http://{HOST}:{self._server.port}{CCOMPAT_PATH}"

    @property
    def log_file(self) -> Path | None:
        """The registry's log, once started."""
        return self._server.log_file if self._server is not None else None

    def start(self) -> None:
        """Provision if needed, start the process and wait until the API answers.

        Raises:
            ProvisioningError: the registry could not be built.
            ClusterStartError: it exited or did not answer within 120 s (the message ends
                with its log's tail).
        """
        home = provision_schema_registry(self._cache_dir)
        java = require_tools(("java",))["java"]
        log_dir = self._log_dir or Path(tempfile.mkdtemp(prefix="aiozk-registry-"))
        (port,) = free_ports(1)
        cmd = [
            java,
            "-Xms128m",
            f"-Xmx{self._heap}",
            f"-Dquarkus.http.port={port}",
            f"-Dquarkus.http.host={HOST}",
            "-Dquarkus.log.console.format=%d{HH:mm:ss,SSS} %-5p [%c{2.}] %s%e%n",
            "-jar",
            str(home / _RUNNER),
        ]
        server = Server("schema-registry", port, cmd, log_dir / "schema-registry.log")
        self._server = server
        server.spawn()
        deadline = time.monotonic() + _START_TIMEOUT_S
        probe = f"{self.url}/subjects"
        while True:
            if not server.alive():
                raise ClusterStartError(
                    "schema-registry", server.status(), tail(server.log_file, 40), log_dir
                )
            try:
                with urllib.request.urlopen(probe, timeout=2) as response:
                    json.loads(response.read())
                    return
            except (OSError, urllib.error.URLError, ValueError):
                pass
            if time.monotonic() > deadline:
                server.kill_now()
                raise ClusterStartError(
                    "schema-registry",
                    f"no answer from {probe} within {_START_TIMEOUT_S:.0f} s",
                    tail(server.log_file, 40),
                    log_dir,
                )
            time.sleep(0.2)  # polling a process start: no event to wait for

    def stop(self) -> None:
        """Stop the process (SIGTERM, SIGKILL after 10 s). Idempotent."""
        server = self._server
        if server is None:
            return
        if server.alive():
            server.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            while not server.reaped() and time.monotonic() < deadline:
                time.sleep(0.05)
        server.kill_now()

    def __enter__(self) -> LocalSchemaRegistry:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main() -> int:
    """``python -m aiozkconsumer.testing.schema_registry``: build the registry, print where.

    Returns:
        0 on success, 1 on a provisioning error (its message on stderr).
    """
    try:
        home = provision_schema_registry(quiet=True)
    except ProvisioningError as e:
        sys.stderr.write(f"{e}\n")
        return 1
    sys.stdout.write(f"{home}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
