"""``aiozkconsumer.cluster.metadata_source``: the one rule for where metadata comes from (pure)."""

from __future__ import annotations

import pytest

from aiozkconsumer.cluster import metadata_source

BOOTSTRAP = "127.0.0.1:9092"

# (cluster.metadata.source, /brokers/ids exists, bootstrap.servers) -> source. Every combination.
CASES = [
    # A configured source is used as it is, whatever the cluster looks like.
    ("zookeeper", True, None, "zookeeper"),
    ("zookeeper", True, "", "zookeeper"),
    ("zookeeper", True, BOOTSTRAP, "zookeeper"),
    ("zookeeper", False, None, "zookeeper"),
    ("zookeeper", False, "", "zookeeper"),
    ("zookeeper", False, BOOTSTRAP, "zookeeper"),
    ("kafka", True, None, "kafka"),
    ("kafka", True, "", "kafka"),
    ("kafka", True, BOOTSTRAP, "kafka"),
    ("kafka", False, None, "kafka"),
    ("kafka", False, "", "kafka"),
    ("kafka", False, BOOTSTRAP, "kafka"),
    # auto, a ZooKeeper-mode cluster (/brokers/ids exists, with or without children: its
    # brokers may be restarting): ZooKeeper, even when bootstrap servers are known.
    ("auto", True, None, "zookeeper"),
    ("auto", True, "", "zookeeper"),
    ("auto", True, BOOTSTRAP, "zookeeper"),
    # auto, a KRaft cluster (no /brokers/ids): Kafka, if it can be reached.
    ("auto", False, None, "zookeeper"),
    ("auto", False, "", "zookeeper"),
    ("auto", False, BOOTSTRAP, "kafka"),
]


@pytest.mark.parametrize(("configured", "broker_ids_exists", "bootstrap", "expected"), CASES)
def test_metadata_source(
    configured: str, broker_ids_exists: bool, bootstrap: str | None, expected: str
) -> None:
    assert metadata_source(configured, broker_ids_exists, bootstrap) == expected


def test_every_combination_is_covered() -> None:
    combinations = {
        (configured, exists, bootstrap)
        for configured in ("zookeeper", "kafka", "auto")
        for exists in (True, False)
        for bootstrap in (None, "", BOOTSTRAP)
    }
    assert {case[:3] for case in CASES} == combinations
    assert len(CASES) == len(combinations)
