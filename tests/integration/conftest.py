"""Integration tests: a leak fails the test that leaked it.

A connection, transport or socket left open is usually part of a reference cycle, so it is
freed (and its ``ResourceWarning`` raised, an error in this suite) whenever the cyclic
collector next runs: often during a later test, which then fails for the earlier one's leak.
Collecting at each test's teardown, after its event loop closed, puts the failure on the test
that leaked.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _collect_leaks_at_teardown() -> Iterator[None]:
    yield
    gc.collect()
