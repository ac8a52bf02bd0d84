"""The one place aiozk's exceptions become the package's ZooKeeper errors (``map_zk_errors``).

The adapter's boundary (STYLE: exceptions from libraries are translated once): every call of
``ZkClient`` and the transaction answers read in ``transactions.py`` raise through it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from aiozk import exc as zk_exc

from ..errors import (
    ZookeeperAuthError,
    ZookeeperBadVersionError,
    ZookeeperConnectionError,
    ZookeeperError,
    ZookeeperNodeExistsError,
    ZookeeperNoNodeError,
    ZookeeperSessionExpiredError,
)

__all__ = ["map_zk_errors"]


@contextlib.contextmanager
def map_zk_errors(
    path: str | None = None, *, op: str = "operation", auth_scheme: str | None = None
) -> Iterator[None]:
    """Translate aiozk exceptions raised inside the block into ``ZookeeperError``s.

    ``NoNode``, ``NodeExists`` and ``BadVersion`` become their own classes, as kazoo's
    ``NoNodeError`` / ``NodeExistsError`` / ``BadVersionError``: callers catch the class.
    ``NoAuth`` (the node's ACL), ``InvalidACL`` (an ACL the client cannot set) and
    ``AuthFailed`` (the credentials) become :class:`~aiozkconsumer.errors.ZookeeperAuthError`.

    Args:
        path: the node the block works on (named in every message).
        op: what the block does to it (``"create"``, ``"delete"`` ...), for ``NoAuth``.
        auth_scheme: the scheme of the client's ``zookeeper.auth`` (never the
            credentials), or ``None`` without one, for the auth messages.
    """
    try:
        yield
    except zk_exc.NodeExists as e:
        raise ZookeeperNodeExistsError(path or "?") from e
    except zk_exc.NoNode as e:
        raise ZookeeperNoNodeError(path or "?") from e
    except zk_exc.BadVersion as e:
        raise ZookeeperBadVersionError(path or "?") from e
    except zk_exc.NoAuth as e:
        who = f"zookeeper.auth scheme {auth_scheme}" if auth_scheme else "no zookeeper.auth set"
        raise ZookeeperAuthError(
            path, f"ZooKeeper {op} not allowed on {path} by its ACL ({who})"
        ) from e
    except zk_exc.InvalidACL as e:
        raise ZookeeperAuthError(
            path,
            f"ZooKeeper refused the ACL of {path}: zookeeper.set.acl=true gives the creator "
            "every right, which needs an authenticated client (zookeeper.auth, or a TLS "
            "client certificate)",
        ) from e
    except zk_exc.AuthFailed as e:
        raise ZookeeperAuthError(
            None,
            f"ZooKeeper refused the credentials of zookeeper.auth (scheme {auth_scheme})",
        ) from e
    except (zk_exc.SessionLost, zk_exc.SessionExpired) as e:
        raise ZookeeperSessionExpiredError(
            f"ZooKeeper session expired{f' (at {path})' if path else ''}"
        ) from e
    except (zk_exc.ConnectError, zk_exc.ConnectionLoss, zk_exc.TimeoutError) as e:
        raise ZookeeperConnectionError(
            f"ZooKeeper connection lost{f' (at {path})' if path else ''}: {e!r}"
        ) from e
    except zk_exc.ZKError as e:
        raise ZookeeperError(f"ZooKeeper error {type(e).__name__} at {path}: {e}") from e
