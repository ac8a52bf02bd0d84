"""Compiling the kit's small Java programs against a provisioned ``kafka-clients`` jar (cached).

The Java test programs (:mod:`~aiozkconsumer.testing.java_member`,
:mod:`~aiozkconsumer.testing.java_producer`) are one source file each, compiled once per
``kafka-clients`` version and source digest into ``<cache>/<kind>/<jar>-<digest>/``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from .provision import default_cache_dir, require_tools

__all__ = ["compile_java_class"]


def compile_java_class(
    libs: Path,
    cache_dir: Path | None,
    *,
    kind: str,
    class_name: str,
    source: str,
    error: type[Exception],
) -> Path:
    """Compile ``source`` (class ``class_name``) against ``libs``' ``kafka-clients`` jar.

    The classes go to ``<cache>/<kind>/<kafka-clients jar name>-<digest>/`` (the digest of
    ``source``); an existing directory is reused as is. It is renamed into place only once
    complete, so concurrent builds are safe. Blocking (javac takes ~2 s).

    Args:
        libs: a provisioned ``libs`` directory (``provision_kafka(...) / "libs"``).
        cache_dir: the kit's cache; default ``$AIOZKCONSUMER_CACHE`` or
            ``~/.cache/aiozkconsumer``.
        kind: the cache subdirectory (``"java-member"``).
        class_name: the public class ``source`` declares.
        source: the Java source.
        error: the exception class to raise for a missing jar or a failed compile.

    Returns:
        The class directory, to put on the class path before ``<libs>/*``.

    Raises:
        ProvisioningError: if ``javac`` is not on ``PATH``.
        error: if ``libs`` holds no single ``kafka-clients-*.jar`` or javac fails (the message
            carries javac's output).
    """
    jars = sorted(libs.glob("kafka-clients-*.jar"))
    if len(jars) != 1:
        raise error(f"expected one kafka-clients jar in {libs}, found {len(jars)}")
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = cache / kind / f"{jars[0].stem}-{digest}"
    if (target / f"{class_name}.class").is_file():
        return target
    javac = require_tools(("javac",))["javac"]
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        path = staging / f"{class_name}.java"
        path.write_text(source)
        done = subprocess.run(
            [javac, "-nowarn", "--release", "17", "-cp", str(jars[0]), "-d", str(staging), path],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise error(
                f"javac failed ({done.returncode}) for {class_name} against {jars[0].name}:\n"
                f"{done.stdout}{done.stderr}"
            )
        try:
            staging.rename(target)
        except OSError:  # another process built it meanwhile
            if not (target / f"{class_name}.class").is_file():
                raise
        return target
    finally:
        shutil.rmtree(staging, ignore_errors=True)
