"""``aiozkconsumer verify-rebalance``: VerifyConsumerRebalance (0.10.2.1)."""

from __future__ import annotations

import click

from ..tools import RebalanceVerification
from ._common import (
    NAME,
    ExitCode,
    cluster_options,
    echo_json,
    group_admin,
    output_option,
    run_async,
)
from .groups import echo_malformed

__all__ = ["verify_rebalance"]


@click.command("verify-rebalance", short_help="Check that every partition has a valid owner.")
@click.option("--group", "-g", required=True, type=NAME, help="The consumer group.")
@cluster_options
@output_option
def verify_rebalance(
    group: str,
    zookeeper: str,
    bootstrap_server: str | None,
    connect_timeout_ms: int,
    output: str,
) -> None:
    """Check that a group's last rebalance left every partition with a valid owner.

    As VerifyConsumerRebalance (0.10.2.1, with KAFKA-3952's fix): for every topic the live
    members subscribe to (wildcards evaluated against the cluster's topics), each partition
    must have an owner node under /consumers/<group>/owners/<topic>/ whose value is a thread
    id of a live member subscribed to that topic. Prints each problem, then "Rebalance
    operation successful !" (exit status 0) or "Rebalance operation failed !" (exit
    status 1). A registration or owner node that does not parse is reported ("Malformed
    node <path>: <reason>" on stderr; in JSON, "malformed") and the rest is checked; the
    rebalance then counts as failed.
    """

    async def go() -> RebalanceVerification:
        async with group_admin(zookeeper, bootstrap_server, connect_timeout_ms) as admin:
            return await admin.verify_rebalance(group)

    result = run_async(go)
    if output == "json":
        echo_json(result.to_json())
    else:
        echo_malformed(result.malformed)
        if not result.members:
            click.echo(f"Consumer group '{group}' has no live members.", err=True)
        for problem in result.problems:
            click.echo(problem)
        click.echo(
            "Rebalance operation successful !" if result.ok else "Rebalance operation failed !"
        )
    if not result.ok:
        raise click.exceptions.Exit(ExitCode.FAILED)
