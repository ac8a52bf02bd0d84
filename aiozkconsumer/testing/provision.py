"""Fetch the jars of a local Kafka cluster: Kafka 3.9 (ZooKeeper mode) or Kafka 4.x (KRaft).

The project never ships Kafka: the jars come from Maven Central, resolved by
``mvn dependency:copy-dependencies`` from a pinned pom next to this module, into a cache
directory shared by every test run. Two flavours are known:

- ``"zookeeper"`` (the default): ``kafka-3.9-pom.xml``, Kafka 3.9.1 in ZooKeeper mode and the
  ZooKeeper 3.8 server it depends on (slf4j + reload4j logging). Every :class:`LocalCluster`
  runs its ZooKeeper server from these jars.
- ``"kraft"``: ``kafka-4-pom.xml``, Kafka 4.3.1 (KRaft only, no ZooKeeper classes; log4j2
  logging through ``log4j-slf4j-impl``).

Each lands in its own directory::

    <cache>/kafka-<version>/libs/*.jar      the runtime class path
    <cache>/kafka-<version>/.complete       sha256 of the pom, written after a successful copy

Provisioning is idempotent: when the marker matches the pom, nothing runs (not even Maven).
Otherwise the jars are copied into a temporary directory next to the target and renamed
into place, under a file lock, so that concurrent test processes (pytest-xdist workers)
neither run Maven twice nor see a half-filled ``libs`` directory.

Command line (what the Makefile calls; prints the ``libs`` directory, one per flavour)::

    python -m aiozkconsumer.testing.provision [--flavour zk|kraft|all] [--cache-dir DIR] [--quiet]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from aiozkconsumer.errors import ConsumerError

__all__ = [
    "DISTRIBUTIONS",
    "FLAVOURS",
    "KAFKA_VERSION",
    "KRAFT",
    "KRAFT_KAFKA_VERSION",
    "KRAFT_POM_PATH",
    "POM_PATH",
    "ZOOKEEPER_MODE",
    "KafkaDistribution",
    "ProvisioningError",
    "default_cache_dir",
    "distribution",
    "main",
    "provision_kafka",
    "require_tools",
]

log = logging.getLogger(__name__)

KAFKA_VERSION = "3.9.1"
"""The Kafka release the pinned pom resolves (the last line with ZooKeeper mode)."""

POM_PATH = Path(__file__).with_name("kafka-3.9-pom.xml")
"""The pinned pom: ``org.apache.kafka:kafka_2.13`` plus ``org.slf4j:slf4j-reload4j``."""

KRAFT_KAFKA_VERSION = "4.3.1"
"""The Kafka 4.x release of the KRaft flavour: the newest whose runtime fully resolves from
Maven Central when it was pinned (4.4.0's ``kafka-tools-api`` was not published there)."""

KRAFT_POM_PATH = Path(__file__).with_name("kafka-4-pom.xml")
"""The pinned KRaft pom: ``org.apache.kafka:kafka_2.13`` 4.x plus
``org.apache.logging.log4j:log4j-slf4j-impl`` (Kafka 4 logs through slf4j 1.7 into log4j2) and
``org.apache.kafka:kafka-tools`` (Kafka's command-line tools, for tests to compare with)."""

CACHE_ENV = "AIOZKCONSUMER_CACHE"
"""Environment variable that overrides the default cache directory."""

INSTALL_HINT = "install a JDK 17 and Maven, e.g. `apt-get install openjdk-17-jdk-headless maven`"

_MARKER = ".complete"
_MVN_TIMEOUT_S = 900.0
_TAIL_LINES = 40


@dataclasses.dataclass(frozen=True)
class KafkaDistribution:
    """One pinned Kafka runtime that :func:`provision_kafka` can fetch.

    Attributes:
        flavour: ``"zookeeper"`` (Kafka 3.9, ZooKeeper mode) or ``"kraft"`` (Kafka 4.x).
        version: the Kafka release, e.g. ``"3.9.1"``; the cache directory is
            ``<cache>/kafka-<version>``.
        pom: the pinned pom Maven resolves.
        required_jars: glob patterns that must each match a jar in ``libs`` for a cached copy
            to count as complete.
        description: a short human description, used in messages.
    """

    flavour: str
    version: str
    pom: Path
    required_jars: tuple[str, ...]
    description: str


ZOOKEEPER_MODE = KafkaDistribution(
    flavour="zookeeper",
    version=KAFKA_VERSION,
    pom=POM_PATH,
    required_jars=(f"kafka_2.13-{KAFKA_VERSION}.jar", "zookeeper-*.jar"),
    description=f"Kafka {KAFKA_VERSION} (ZooKeeper mode) and ZooKeeper",
)
"""Kafka 3.9.1 in ZooKeeper mode, with the ZooKeeper 3.8 server (the default flavour)."""

KRAFT = KafkaDistribution(
    flavour="kraft",
    version=KRAFT_KAFKA_VERSION,
    pom=KRAFT_POM_PATH,
    required_jars=(
        f"kafka_2.13-{KRAFT_KAFKA_VERSION}.jar",
        "log4j-slf4j-impl-*.jar",
        f"kafka-tools-{KRAFT_KAFKA_VERSION}.jar",
    ),
    description=f"Kafka {KRAFT_KAFKA_VERSION} (KRaft)",
)
"""Kafka 4.x in KRaft mode (no ZooKeeper classes at all)."""

DISTRIBUTIONS: dict[str, KafkaDistribution] = {"zookeeper": ZOOKEEPER_MODE, "kraft": KRAFT}
"""Flavour name -> its pinned distribution."""

FLAVOURS: tuple[str, ...] = tuple(DISTRIBUTIONS)
"""The known flavours, ``("zookeeper", "kraft")``."""


def distribution(flavour: str) -> KafkaDistribution:
    """Look up the pinned distribution of a flavour.

    Args:
        flavour: ``"zookeeper"`` or ``"kraft"``.

    Returns:
        Its :class:`KafkaDistribution`.

    Raises:
        ValueError: if the flavour is not one of :data:`FLAVOURS`.
    """
    try:
        return DISTRIBUTIONS[flavour]
    except KeyError:
        raise ValueError(
            f"unknown Kafka flavour {flavour!r}; expected one of {', '.join(FLAVOURS)}"
        ) from None


class ProvisioningError(ConsumerError):
    """The Kafka/ZooKeeper jars could not be provisioned.

    Raised when ``java`` or ``mvn`` is not on ``PATH``, when Maven fails or times out, or
    when the cache directory cannot be written. The message says what to do about it and,
    for a Maven failure, ends with the tail of Maven's output.
    """


def default_cache_dir() -> Path:
    """Return the cache directory used when none is given.

    Returns:
        ``$AIOZKCONSUMER_CACHE`` when that variable is set and not empty, else
        ``~/.cache/aiozkconsumer``.
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "aiozkconsumer"


def require_tools(tools: Sequence[str]) -> dict[str, str]:
    """Check that command line tools are on ``PATH``.

    Args:
        tools: executable names, e.g. ``("java", "mvn")``.

    Returns:
        ``{name: absolute path}`` for every tool.

    Raises:
        ProvisioningError: if any tool is missing; the message names the missing tools and
            how to install them.
    """
    found: dict[str, str] = {}
    missing: list[str] = []
    for tool in tools:
        path = shutil.which(tool)
        if path is None:
            missing.append(tool)
        else:
            found[tool] = path
    if missing:
        names = " and ".join(f"`{name}`" for name in missing)
        raise ProvisioningError(
            f"{names} not found on PATH: the local Kafka/ZooKeeper test cluster needs Java 17 "
            f"(and Maven to fetch the jars); {INSTALL_HINT}"
        )
    return found


def _pom_digest(dist: KafkaDistribution) -> str:
    return hashlib.sha256(dist.pom.read_bytes()).hexdigest()


def _is_complete(dist: KafkaDistribution, target: Path, digest: str) -> bool:
    marker = target / _MARKER
    try:
        recorded = marker.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False
    if recorded != digest:
        return False
    return _is_complete_libs(dist, target / "libs")


def _is_complete_libs(dist: KafkaDistribution, libs: Path) -> bool:
    return all(any(libs.glob(pattern)) for pattern in dist.required_jars)


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created if missing)."""
    with lock_path.open("a") as lock_file:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)


def _run_maven(mvn: str, dist: KafkaDistribution, output_dir: Path, *, quiet: bool) -> None:
    """Run ``mvn dependency:copy-dependencies`` into ``output_dir``.

    Maven's output is always kept (its tail goes into the error message); unless ``quiet``
    it is also forwarded to our stderr as it arrives, since a first resolution downloads
    about 60 jars.
    """
    cmd = [
        mvn,
        "-B",
        "-Dstyle.color=never",
        "-q" if quiet else "-ntp",
        "-f",
        str(dist.pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={output_dir}",
    ]
    log.info("resolving Kafka %s jars with Maven: %s", dist.version, " ".join(cmd))
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise ProvisioningError(f"could not run Maven ({mvn}): {exc}; {INSTALL_HINT}") from exc
    timed_out = threading.Event()

    def _kill_on_timeout() -> None:
        timed_out.set()
        proc.kill()

    # A watchdog rather than wait(timeout=...): a hung Maven may print nothing, and the
    # read loop below would block forever.
    watchdog = threading.Timer(_MVN_TIMEOUT_S, _kill_on_timeout)
    watchdog.daemon = True
    watchdog.start()
    try:
        with proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                tail.append(line.rstrip("\n"))
                if not quiet:
                    sys.stderr.write(line)
            returncode = proc.wait()
    finally:
        watchdog.cancel()
    if timed_out.is_set():
        raise ProvisioningError(
            f"Maven did not finish within {_MVN_TIMEOUT_S:.0f} s; last output:\n" + "\n".join(tail)
        )
    if returncode != 0:
        raise ProvisioningError(
            f"Maven failed (exit code {returncode}) resolving Kafka {dist.version} from "
            f"{dist.pom}; is Maven Central reachable? Last output:\n" + "\n".join(tail)
        )


def provision_kafka(
    cache_dir: Path | None = None, *, flavour: str = "zookeeper", quiet: bool = False
) -> Path:
    """Make sure the jars of a Kafka flavour are in the cache.

    Idempotent and safe to call from concurrent processes: if
    ``<cache>/kafka-<version>/.complete`` holds the sha256 of the flavour's pinned pom, it
    returns at once without running Maven (or even looking for it). Otherwise it runs
    ``mvn dependency:copy-dependencies`` into a temporary directory next to the target,
    writes the marker there and renames it into place.

    This call blocks (Maven takes ~10 s with a warm ``~/.m2``, longer on a first download);
    from async code run it in a worker thread.

    Args:
        cache_dir: where the jars are kept. Default: ``$AIOZKCONSUMER_CACHE`` if set, else
            ``~/.cache/aiozkconsumer``.
        flavour: ``"zookeeper"`` (default: Kafka 3.9.1 in ZooKeeper mode plus the ZooKeeper
            3.8 server) or ``"kraft"`` (Kafka 4.3.1, KRaft only; no ZooKeeper jars).
        quiet: if True, Maven runs with ``-q`` and its output is shown only in the error on
            failure; if False, Maven's output is forwarded to stderr as it runs.

    Returns:
        The directory holding ``libs/*.jar`` (``<cache>/kafka-3.9.1`` or
        ``<cache>/kafka-4.3.1``); the class path is ``<returned>/libs/*``.

    Raises:
        ValueError: if ``flavour`` is not one of :data:`FLAVOURS`.
        ProvisioningError: if ``java`` or ``mvn`` is not on ``PATH``, if Maven fails or
            times out (the message ends with the tail of its output), or if the cache
            directory cannot be written.
    """
    dist = distribution(flavour)
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = cache / f"kafka-{dist.version}"
    digest = _pom_digest(dist)
    if _is_complete(dist, target, digest):
        log.debug("Kafka %s jars already provisioned in %s", dist.version, target)
        return target

    tools = require_tools(("java", "mvn"))
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with _locked(cache / f".kafka-{dist.version}.lock"):
            # Another process may have finished while we waited for the lock.
            if _is_complete(dist, target, digest):
                return target
            staging = Path(tempfile.mkdtemp(prefix=f".kafka-{dist.version}-", dir=cache))
            try:
                _run_maven(tools["mvn"], dist, staging / "libs", quiet=quiet)
                if not any((staging / "libs").glob("*.jar")):
                    raise ProvisioningError(
                        f"Maven succeeded but copied no jars into {staging / 'libs'}"
                    )
                if not _is_complete_libs(dist, staging / "libs"):
                    raise ProvisioningError(
                        f"Maven copied the jars of {dist.pom} but not all of "
                        f"{', '.join(dist.required_jars)}; is the pom right?"
                    )
                (staging / _MARKER).write_text(digest + "\n", encoding="ascii")
                if target.exists():
                    # A stale or partial copy (other pom, deleted jars): move it aside
                    # first, so the rename below stays a single atomic step.
                    trash = Path(tempfile.mkdtemp(prefix=".trash-", dir=cache))
                    target.rename(trash / target.name)
                    shutil.rmtree(trash, ignore_errors=True)
                staging.rename(target)
            finally:
                if staging.exists():
                    shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        raise ProvisioningError(f"cannot write the jar cache in {cache}: {exc}") from exc
    log.info("Kafka %s jars provisioned in %s", dist.version, target)
    return target


_CLI_FLAVOURS: dict[str, tuple[str, ...]] = {
    "zk": ("zookeeper",),
    "zookeeper": ("zookeeper",),
    "kraft": ("kraft",),
    "all": FLAVOURS,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point: provision the jars and print the ``libs`` directories.

    ``--flavour`` picks what to fetch: ``zk`` (default; ``zookeeper`` is a synonym),
    ``kraft``, or ``all``. One ``libs`` directory is printed per flavour, in that order.

    Args:
        argv: arguments without the program name; default ``sys.argv[1:]``.

    Returns:
        The process exit code: 0 on success, 1 on a provisioning error.
    """
    parser = argparse.ArgumentParser(
        prog="python -m aiozkconsumer.testing.provision",
        description=(
            "Fetch the jars of a local Kafka cluster from Maven Central into the cache and "
            f"print the libs directory: Kafka {KAFKA_VERSION} (ZooKeeper mode) with "
            f"ZooKeeper (--flavour zk, the default) or Kafka {KRAFT_KAFKA_VERSION} "
            "(--flavour kraft), or both (--flavour all)."
        ),
    )
    parser.add_argument(
        "--flavour",
        "--flavor",
        choices=sorted(_CLI_FLAVOURS),
        default="zk",
        help="which Kafka to fetch (default: %(default)s)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"cache directory (default: ${CACHE_ENV} or ~/.cache/aiozkconsumer)",
    )
    parser.add_argument(
        "--quiet", "-q", action="store_true", help="run Maven quietly (output only on failure)"
    )
    args = parser.parse_args(argv)
    try:
        homes = [
            provision_kafka(args.cache_dir, flavour=flavour, quiet=args.quiet)
            for flavour in _CLI_FLAVOURS[args.flavour]
        ]
    except ProvisioningError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    for home in homes:
        print(home / "libs")  # noqa: T201 - the CLI's output, read by the Makefile
    return 0


if __name__ == "__main__":
    sys.exit(main())
