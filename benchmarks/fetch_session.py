"""Fetch sessions (KIP-227) at 2,000 partitions: request bytes and CPU per fetch, before and after.

One consumer owns every partition of a 2,000-partition topic on one broker (Kafka 4.3, KRaft,
unless ``--zookeeper``/``--bootstrap-server`` name a cluster) and fetches them all, as a fetch
loop does, through ``FetchChannel.fetch_partitions``. Three contenders, interleaved round by
round (the order rotates) so load changes hit each alike:

- ``v11 full (before)``: aiokafka's FetchRequest v11, what the fetch loops sent until now:
  every partition in every request, no session;
- ``v18 full``: our FetchRequest at the broker's newest version (topic ids), still full and
  sessionless;
- ``v18 session``: the same in an incremental fetch session: only the partitions whose
  position moved.

Two workloads:

- ``idle``: nothing new arrives (``max_wait_ms=0``): the steady state of a member whose
  partitions are quiet. A full request names 2,000 partitions and its answer holds 2,000 empty
  ones; in a session both are nearly empty.
- ``busy``: before each round one record goes to each of ``--hot`` random partitions (not
  measured); each contender then fetches them (``min_bytes=1``).

Per fetch: the request's bytes on the wire (size prefix included), the response's bytes, the
client's CPU time inside ``fetch_partitions`` (``time.process_time``: building and encoding the
request, the session's bookkeeping, receiving and parsing the response; the broker is another
process) and the wall time. Positions advance from the record batches' headers outside the
measured span. Nothing is asserted: numbers go to ``benchmarks/results/fetch_session.{json,md}``.

Usage::

    .venv/bin/python benchmarks/fetch_session.py [--partitions 2000] [--fetches 200] [--hot 20]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    RESULTS_DIR,
    ClusterInfo,
    add_cluster_args,
    cluster_from_args,
    fmt,
    machine,
    md_table,
    say,
    uptime,
    versions,
    write_results,
)

from aiozkconsumer.errors import ConsumerError
from aiozkconsumer.kafka.client import FetchChannel, KafkaClient
from aiozkconsumer.kafka.fetch_request import FetchPartition
from aiozkconsumer.records import TopicPartition

_BATCH = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = struct.Struct(">i")  # at byte 23 of a v2 batch


def next_offset(records: Any, position: int) -> int:
    """The offset after the last record of a record set (from batch headers only)."""
    view = memoryview(records)
    pos = 0
    while pos + 27 <= len(view):
        base, length = _BATCH.unpack_from(view, pos)
        if pos + 12 + length > len(view):
            break  # a partial batch at the end (max bytes)
        (delta,) = _LAST_DELTA.unpack_from(view, pos + 23)
        position = max(position, base + delta + 1)
        pos += 12 + length
    return position


class Contender:
    """One way of fetching, with its own channel and positions."""

    def __init__(self, name: str, channel: FetchChannel, topic: str, partitions: int) -> None:
        self.name = name
        self.channel = channel
        self.topic = topic
        self.positions = dict.fromkeys(range(partitions), 0)
        self.samples: dict[str, list[tuple[int, int, float, float, int]]] = {}
        self.records = 0

    async def fetch(self, workload: str | None, max_wait_ms: int, min_bytes: int) -> None:
        """One fetch of every partition; measured when ``workload`` is given."""
        wanted = [FetchPartition(self.topic, p, o, 1 << 20) for p, o in self.positions.items()]
        connection = self.channel.connection
        sent = connection.bytes_sent
        cpu, wall = time.process_time(), time.perf_counter()
        response = await self.channel.fetch_partitions(
            wanted, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=50 << 20
        )
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        request_bytes = connection.bytes_sent - sent
        answered = 0
        for _, parts in response.topics:
            for part in parts:
                answered += 1
                if part[1] == 0 and part[-1]:
                    before = self.positions[part[0]]
                    self.positions[part[0]] = next_offset(part[-1], before)
                    self.records += self.positions[part[0]] - before
        if workload is not None:
            self.samples.setdefault(workload, []).append(
                (request_bytes, response.size + 4, cpu * 1e6, wall * 1e3, answered)
            )


async def create_topic(info: ClusterInfo, topic: str, partitions: int) -> None:
    """Create ``topic`` unless it exists, wait until its leader serves every partition, and
    write one record into each."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=info.bootstrap_servers)
    await admin.start()
    try:
        if topic not in await admin.list_topics():
            await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    kafka = KafkaClient(info.bootstrap_servers, client_id="bench-fetch-session-setup")
    await kafka.start()
    try:
        # A partition is served once ListOffsets answers for it (its leader took over).
        deadline = time.monotonic() + 600
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        while True:
            try:
                if len(await kafka.log_end_offsets(tps)) == partitions:
                    break
            except ConsumerError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{topic}: not every partition has a leader after 600 s")
            await asyncio.sleep(1)
    finally:
        await kafka.close()
    await _produce(info.bootstrap_servers, topic, list(range(partitions)))


async def _produce(bootstrap: str, topic: str, partitions: list[int]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        futures = [await producer.send(topic, b"x" * 100, partition=p) for p in partitions]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def run(info: ClusterInfo, args: argparse.Namespace, topic: str) -> dict[str, Any]:
    kafka = KafkaClient(info.bootstrap_servers, client_id="bench-fetch-session")
    await kafka.start()
    try:
        assert await kafka.refresh_metadata([topic])
        leaders = {kafka.leader_for(TopicPartition(topic, p)) for p in range(args.partitions)}
        if len(leaders) != 1 or None in leaders:
            raise SystemExit(f"expected one leader for every partition, got {leaders}")
        node = leaders.pop()
        assert node is not None
        contenders = [
            Contender(
                "v11 full (before)",
                FetchChannel(kafka, node, max_version=11),
                topic,
                args.partitions,
            ),
            Contender(
                "v18 full", FetchChannel(kafka, node, sessions=False), topic, args.partitions
            ),
            Contender("v18 session", FetchChannel(kafka, node), topic, args.partitions),
        ]
        newest = await contenders[2].channel.flexible_version()
        contenders[1].name = f"v{newest} full"
        contenders[2].name = f"v{newest} session"
        say(f"broker {node}: newest Fetch version v{newest}")
        # Read what is there, open the session, settle (the first session request carries
        # every moved position).
        for contender in contenders:
            for _ in range(3):
                await contender.fetch(None, 0, 0)
        rng = random.Random(7)
        for rnd in range(args.fetches):
            order = contenders[rnd % 3 :] + contenders[: rnd % 3]
            for contender in order:
                await contender.fetch("idle", 0, 0)
        load_idle = uptime()
        for rnd in range(args.fetches):
            hot = rng.sample(range(args.partitions), args.hot)
            await _produce(info.bootstrap_servers, topic, hot)
            order = contenders[rnd % 3 :] + contenders[: rnd % 3]
            for contender in order:
                await contender.fetch("busy", 500, 1)
        for contender in contenders:
            if contender.records != contenders[0].records:
                raise SystemExit(
                    f"{contender.name} read {contender.records} records, not "
                    f"{contenders[0].records}"
                )
        stats = contenders[2].channel.session.statistics()
        for contender in contenders:
            contender.channel.close()
        results: dict[str, Any] = {}
        for contender in contenders:
            results[contender.name] = {}
            for workload, samples in contender.samples.items():
                req, resp, cpu, wall, answered = zip(*samples, strict=True)
                results[contender.name][workload] = {
                    "fetches": len(samples),
                    "request_bytes_median": statistics.median(req),
                    "request_bytes_mean": statistics.fmean(req),
                    "response_bytes_median": statistics.median(resp),
                    "cpu_us_median": statistics.median(cpu),
                    "cpu_us_mean": statistics.fmean(cpu),
                    "wall_ms_median": statistics.median(wall),
                    "partitions_answered_median": statistics.median(answered),
                }
        return {
            "results": results,
            "session": {
                "full_requests": stats.full_requests,
                "incremental_requests": stats.incremental_requests,
                "session_errors": stats.session_errors,
            },
            "records_read": contenders[0].records,
            "load_after_idle": load_idle,
        }
    finally:
        await kafka.close()


def report(data: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"# Fetch sessions: one member, {args.partitions:,} partitions on one broker",
        "",
        f"{args.fetches} measured fetches per contender and workload; busy: one 100 B record "
        f"into each of {args.hot} random partitions before each round. CPU: the client's, "
        "inside `fetch_partitions`.",
        "",
    ]
    results = data["results"]
    before = next(iter(results))
    for workload in ("idle", "busy"):
        rows = []
        base = results[before][workload]
        for name, by_workload in results.items():
            r = by_workload[workload]
            rows.append(
                [
                    name,
                    fmt(r["request_bytes_median"]),
                    fmt(r["response_bytes_median"]),
                    fmt(r["partitions_answered_median"]),
                    fmt(r["cpu_us_median"]),
                    fmt(r["cpu_us_mean"]),
                    f"{r['cpu_us_median'] / base['cpu_us_median']:.2f}",
                    fmt(r["wall_ms_median"], 2),
                ]
            )
        lines += [
            f"## {workload}",
            "",
            md_table(
                [
                    "contender",
                    "request B",
                    "response B",
                    "partitions in response",
                    "CPU µs/fetch (median)",
                    "CPU µs/fetch (mean)",
                    "CPU vs before",
                    "wall ms (median)",
                ],
                rows,
            ),
            "",
        ]
    s = data["session"]
    lines.append(
        f"Session: {s['full_requests']} full request(s), {s['incremental_requests']} "
        f"incremental, {s['session_errors']} session error(s); every contender read "
        f"{data['records_read']:,} records."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_cluster_args(parser)
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--fetches", type=int, default=200, help="measured fetches per workload")
    parser.add_argument("--hot", type=int, default=20, help="partitions written per busy round")
    parser.add_argument("--topic", help="an existing topic to use (default: a new one)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()
    with cluster_from_args(args, flavour="kraft") as info:
        topic = args.topic or f"bench-fetch-session-{uuid.uuid4().hex[:8]}"
        t0 = time.monotonic()
        asyncio.run(create_topic(info, topic, args.partitions))
        say(f"topic {topic}: {args.partitions:,} partitions ready in {time.monotonic() - t0:.1f} s")
        data = asyncio.run(run(info, args, topic))
    data.update(
        {
            "settings": vars(args) | {"out": str(args.out)},
            "machine": machine(),
            "versions": versions("aiokafka", "aiozkconsumer"),
        }
    )
    markdown = report(data, args)
    print(markdown)
    write_results(args.out, "fetch_session", data, markdown)


if __name__ == "__main__":
    main()
