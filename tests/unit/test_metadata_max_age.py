"""``metadata.max.age.ms``: read from a Java client's properties, checked, and the fetcher's
preferred-read-replica expiry."""

from __future__ import annotations

import pytest

from aiozkconsumer.config import ConsumerConfig
from aiozkconsumer.errors import InvalidConfigError
from aiozkconsumer.fetcher import FetcherManager


def test_read_from_properties_and_used_as_the_read_replica_expiry() -> None:
    config = ConsumerConfig.from_properties(
        {"group.id": "g", "zookeeper.connect": "h:1", "metadata.max.age.ms": "1000"}
    )
    assert config.metadata_max_age_ms == 1000
    manager = FetcherManager(None, config)  # type: ignore[arg-type]
    assert manager.read_replicas.expiry_ms == 1000


@pytest.mark.parametrize("bad", [0, -5])
def test_must_be_positive(bad: int) -> None:
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(group_id="g", zookeeper_connect="h:1", metadata_max_age_ms=bad)
    assert info.value.key == "metadata.max.age.ms"
