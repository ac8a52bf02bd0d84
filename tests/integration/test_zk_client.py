"""The ZooKeeper adapter's error mapping (no server) and its node idioms (real ZooKeeper)."""

from __future__ import annotations

import pytest
from aiozk import exc as zk_exc

from aiozkconsumer.errors import (
    ZookeeperBadVersionError,
    ZookeeperConnectionError,
    ZookeeperError,
    ZookeeperNodeExistsError,
    ZookeeperNoNodeError,
    ZookeeperSessionExpiredError,
)
from aiozkconsumer.zk.client import ZkClient, map_zk_errors, parse_connect_string


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (zk_exc.NoNode, ZookeeperNoNodeError),
        (zk_exc.NodeExists, ZookeeperNodeExistsError),
        (zk_exc.BadVersion, ZookeeperBadVersionError),
        (zk_exc.SessionExpired, ZookeeperSessionExpiredError),
        (zk_exc.ConnectionLoss, ZookeeperConnectionError),
        (zk_exc.NotEmpty, ZookeeperError),
    ],
)
def test_library_errors_become_our_classes(raised: type[Exception], expected: type) -> None:
    with pytest.raises(expected) as info, map_zk_errors("/consumers/g/ids/x"):
        raise raised()
    assert type(info.value) is expected
    assert "/consumers/g/ids/x" in str(info.value)
    # The node errors carry the path (callers catch them per node); the others only say it.
    node_errors = (ZookeeperNoNodeError, ZookeeperNodeExistsError, ZookeeperBadVersionError)
    if isinstance(info.value, node_errors):
        assert info.value.path == "/consumers/g/ids/x"
    else:
        assert not hasattr(info.value, "path")


def test_specific_errors_are_zookeeper_errors() -> None:
    for cls in (ZookeeperNoNodeError, ZookeeperBadVersionError, ZookeeperNodeExistsError):
        assert issubclass(cls, ZookeeperError)


def test_connect_string_with_chroot() -> None:
    assert parse_connect_string("a:1,b:2/kafka/") == ("a:1,b:2", "/kafka")
    assert parse_connect_string("a:1/") == ("a:1", None)
    assert parse_connect_string("a:1") == ("a:1", None)


@pytest.mark.integration
async def test_adapter_raises_specific_errors_against_a_real_server(
    zk_kafka_cluster: object, unique_group_id: str
) -> None:
    zk = ZkClient(zk_kafka_cluster.zookeeper_connect)  # type: ignore[attr-defined]
    await zk.start()
    try:
        path = f"/consumers/{unique_group_id}/probe"
        assert await zk.get(path) is None  # a missing node is None, not an error
        assert await zk.delete(path) is False
        with pytest.raises(ZookeeperNoNodeError):
            await zk.set_data(path, b"x")
        await zk.create(path, b"1")
        with pytest.raises(ZookeeperNodeExistsError):
            await zk.create(path, b"2")
        version = await zk.set_data(path, b"3", 0)
        assert version == 1
        with pytest.raises(ZookeeperBadVersionError):
            await zk.set_data(path, b"4", 0)
        assert await zk.get_data(path) == b"3"
    finally:
        await zk.delete_recursive(f"/consumers/{unique_group_id}")
        await zk.close()


async def test_state_listeners_run_inside_the_transition_before_any_waiter() -> None:
    """A listener sees the new state synchronously, before a ``wait_for`` waiter wakes; a
    failing listener is logged and neither stops the others nor the transition."""
    from aiozk.states import States

    from aiozkconsumer.zk.session import _ObservedStateMachine

    seen: list[str] = []

    def broken(state: str) -> None:
        raise RuntimeError("listener bug")

    machine = _ObservedStateMachine(session=None, listeners=[broken, seen.append])
    waiter = machine.wait_for(States.CONNECTED)
    machine.transition_to(States.CONNECTED)
    assert seen == [States.CONNECTED]
    assert not waiter.cancelled() and waiter.done()  # resolved, but its task has not run yet
    machine.transition_to(States.SUSPENDED)
    assert seen == [States.CONNECTED, States.SUSPENDED]
    assert machine.current_state == States.SUSPENDED


def test_zkclient_listeners_can_be_added_before_start_and_removed() -> None:
    zk = ZkClient("127.0.0.1:1")
    seen: list[str] = []
    remove = zk.add_state_listener(seen.append)
    assert zk._state_listeners == [seen.append]
    remove()
    remove()  # twice is harmless
    assert zk._state_listeners == []


async def test_a_listener_added_after_the_session_exists_is_called() -> None:
    """The connector adds its gate-closing listener once the client has started, when the
    session already holds the (then empty) listener list: that list must be the client's own,
    not a copy, or the listener is never called and records slip out after a drop."""
    from aiozk.states import States

    from aiozkconsumer.zk.client import _prompt_client

    zk = ZkClient("127.0.0.1:1")
    raw = _prompt_client("127.0.0.1:1", None, 6.0, zk.security, zk._state_listeners)
    seen: list[str] = []
    remove = zk.add_state_listener(seen.append)  # after the session was built
    raw.session.state.transition_to(States.CONNECTED)
    raw.session.state.transition_to(States.SUSPENDED)
    assert seen == [States.CONNECTED, States.SUSPENDED]
    remove()
    raw.session.state.transition_to(States.CONNECTED)
    assert seen == [States.CONNECTED, States.SUSPENDED]
