"""Without the native decoder (``AIOZKCONSUMER_NATIVE=0``, as on a machine without a C compiler)
every path runs on aiokafka's parser: the fetch connection copies record sets to ``bytes``,
the fetcher parses them with ``MemoryRecords`` and the column builder gathers lists. The unit
tests of those paths run again in a process of their own with the decoder turned off.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_the_unit_tests_of_the_fetch_paths_pass_without_the_native_decoder() -> None:
    env = {**os.environ, "AIOZKCONSUMER_NATIVE": "0"}
    off = (
        "from aiozkconsumer.kafka import native; assert not native.AVAILABLE; "
        "from aiozkconsumer import iterator; assert not iterator.NATIVE_HAND_OUT"
    )
    subprocess.run([sys.executable, "-c", off], env=env, check=True, timeout=60)
    files = [
        "test_fetch_connection.py",
        "test_crc_unit.py",
        "test_fetcher.py",
        "test_stream.py",
        "test_interceptors.py",
    ]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-m",
            "not integration",
            "-p",
            "no:cacheprovider",
            "-k",
            "aiokafka or not native",  # the native-parametrized cases need the decoder
            *[str(next(TESTS.rglob(f))) for f in files],
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=TESTS.parent,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
