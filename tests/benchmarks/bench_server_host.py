"""Server host benchmarks through the real processes (issue 30): `hearth serve` instances and `hearth worker`s on
a private redis-server and PostgreSQL (tests/support/services.py, cluster.py), a loopback model server in a process
of its own that answers every request with the same paced reply.

(a) turns per second, 2 workers against 1: `--tasks` tasks each send one input at once through the API and read
    their turn's stream to `turn_ended`; the wall time from the first send to the last end, rounds alternating
    between a cluster with one worker and one with two. Each worker runs `--concurrency` turns at once, and the
    model writes 100 chunks 30 ms apart (about 33 tokens a second, a local model's pace): the turns wait on the
    model, as real ones do, so a worker's slots are what a second worker adds; goal >= 1.8x. (With chunks 10 ms
    apart on this shared 2-core machine, the turns' own CPU competes too: 1.5x measured.);
(b) 100 clients reading one turn's stream at once through two API instances (50 on each, in `--client-processes`
    processes, with a real SSE reader): the delay of each event from the moment it is in the task's Redis stream
    (seen by a reader blocked on the stream in Redis itself, XREAD BLOCK: Redis wakes it as the entry is added) to
    the moment a client reads it through an instance; goal: p99 <= 100 ms, none missing.

    .venv/bin/python tests/benchmarks/bench_server_host.py [--tasks 16] [--concurrency 2] [--rounds 3] [--readers 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import redis.asyncio as aioredis  # noqa: E402

from tests.support.cluster import Cluster, read_sse  # noqa: E402
from tests.support.services import PostgresCluster, RedisServer  # noqa: E402


def model_server(chunks: int, delay: float) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-m", "tests.support.openai_server", "--chunks", str(chunks),
                                "--delay", str(delay)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("READY "), line
    return process, line.split()[1]


async def _cluster(folder: Path, model_url: str, pg: PostgresCluster, redis_url: str, workers: int,
                   concurrency: int) -> tuple[Cluster, list]:
    cluster = Cluster(folder, model_url, database=pg.url(pg.create_database()), redis=redis_url)
    apis = [cluster.launch_api() for _ in range(2)]
    for _ in range(workers):
        cluster.launch_worker(concurrency=concurrency)
    await asyncio.gather(*(child.started() for child in cluster.children))
    return cluster, apis


async def turns_wall(cluster: Cluster, apis: list, tasks: int) -> float:
    """Seconds from the first send to the last turn's end, `tasks` turns at once through both instances."""
    token = await cluster.user(f"b{time.monotonic_ns()}")
    async with apis[0].client(token) as a, apis[1].client(token) as b:
        ids = [(await a.post("/api/tasks", json={"goal": f"t{i}"})).json()["id"] for i in range(tasks)]
        t0 = time.perf_counter()
        reads = await asyncio.gather(*(read_sse((a, b)[i % 2], "POST", f"/api/tasks/{task}/messages",
                                                json={"text": "count"}) for i, task in enumerate(ids)))
        wall = time.perf_counter() - t0
    assert all(r.status == 200 and r.events[-1]["reason"] == "completed" for r in reads), reads[0]
    return wall


async def bench_workers(args: argparse.Namespace, pg: PostgresCluster, redis: RedisServer, folder: Path) -> None:
    model, url = model_server(args.chunks, args.delay)
    try:
        walls: dict[int, list[float]] = {1: [], 2: []}
        for round_ in range(args.rounds):
            for workers in (1, 2) if round_ % 2 == 0 else (2, 1):
                redis.flush()
                cluster, apis = await _cluster(folder / f"w{workers}-{round_}", url, pg, redis.url, workers,
                                               args.concurrency)
                try:
                    walls[workers].append(await turns_wall(cluster, apis, args.tasks))
                finally:
                    cluster.stop()
        one, two = statistics.median(walls[1]), statistics.median(walls[2])
        print(f"(a) {args.tasks} turns at once ({args.chunks} chunks, {args.delay * 1000:.0f} ms apart; "
              f"{args.concurrency} turns at once per worker), median of {args.rounds}:")
        print(f"    1 worker: {one:.2f} s = {args.tasks / one:.2f} turns/s   2 workers: {two:.2f} s = "
              f"{args.tasks / two:.2f} turns/s   -> {one / two:.2f}x (goal >= 1.8x)")
        print(f"    walls 1 worker {[round(w, 2) for w in walls[1]]}, 2 workers {[round(w, 2) for w in walls[2]]}")
    finally:
        model.terminate()
        model.wait()


READER = """
import asyncio, json, sys, time
import httpx, httpx_sse
sys.path.insert(0, {root!r})
from tests.support.cluster import events_of

async def one(client, path, got):
    async with httpx_sse.aconnect_sse(client, "GET", path) as source:
        async for event in events_of(source):
            now = time.time()
            if not got:
                got.append(now)  # connected: what was produced before this came as replay, and is not counted
            got.append((event["seq"], now))
            if event["type"] == "turn_ended":
                return

async def main():
    url, token, path, count = {url!r}, {token!r}, {path!r}, {count}
    limits = httpx.Limits(max_connections=count + 5)
    async with httpx.AsyncClient(base_url=url, headers={{"Authorization": "Bearer " + token}}, limits=limits,
                                 timeout=httpx.Timeout(30, read=120)) as client:
        results = [[] for _ in range(count)]
        print("READY", flush=True)
        sys.stdin.readline()
        await asyncio.gather(*(one(client, path, got) for got in results))
    print(json.dumps(results))

asyncio.run(main())
"""


def reader_process(url: str, token: str, path: str, count: int) -> subprocess.Popen:
    code = READER.format(root=str(ROOT), url=url, token=token, path=path, count=count)
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


async def bench_readers(args: argparse.Namespace, pg: PostgresCluster, redis: RedisServer, folder: Path) -> None:
    redis.flush()
    model, url = model_server(args.read_chunks, args.read_delay)
    cluster, apis = await _cluster(folder / "readers", url, pg, redis.url, 1, 4)
    client = aioredis.from_url(redis.url)
    try:
        token = await cluster.user("reader")
        async with apis[0].client(token) as a:
            task = (await a.post("/api/tasks", json={"goal": "read me"})).json()["id"]
            path = f"/api/tasks/{task}/stream"
            readers = []
            for i in range(args.client_processes):
                readers.append(reader_process(apis[i % 2].base_url, token, path, args.readers // args.client_processes))
            for reader in readers:
                assert reader.stdout is not None and reader.stdout.readline().strip() == "READY"
            sending = asyncio.ensure_future(read_sse(a, "POST", f"/api/tasks/{task}/messages", json={"text": "go"}))
            seen = await _in_redis(client, task)  # seq -> when Redis had it
            for reader in readers:
                assert reader.stdin is not None
                reader.stdin.write("\n")  # the turn is streaming: every client connects now, from seq 0
                reader.stdin.flush()
            produced = await sending
            await seen_all(seen, produced.events[-1]["seq"])
            outs = [json.loads(reader.communicate(timeout=300)[0]) for reader in readers]
        expected = {e["seq"] for e in produced.events}
        delays, missing = [], 0
        for asked, *result in (r for out in outs for r in out):
            got = dict(result)
            missing += len(expected - set(got))
            delays += [(when - seen[seq]) * 1000 for seq, when in got.items() if seen.get(seq, 0) >= asked]
        delays.sort()
        p50, p99 = delays[len(delays) // 2], delays[int(len(delays) * 0.99)]
        pct = {q: delays[int(len(delays) * q)] for q in (0.9, 0.95)}
        print(f"(b) {args.readers} clients in {args.client_processes} processes on one turn through 2 instances "
              f"({len(expected)} events each; p90 {pct[0.9]:.1f} ms, p95 {pct[0.95]:.1f} ms): "
              f"delay from Redis to client p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {delays[-1]:.1f} ms "
              f"(goal p99 <= 100 ms); events missing: {missing} (goal 0)")
        print(f"    ({len(delays)} live reads: the clients connect once the turn streams; what was in Redis before "
              "a client's first event came to it as replay, and is not counted)")
    finally:
        await client.aclose()
        cluster.stop()
        model.terminate()
        model.wait()


_SEEN_TASKS: set[asyncio.Task] = set()


async def _in_redis(client: aioredis.Redis, task: str) -> dict[int, float]:
    """Follow the task's Redis stream with XREAD BLOCK in the background: seq -> time.time() when it was added.
    Starts from the beginning so nothing is missed whenever the turn's stream appears."""
    seen: dict[int, float] = {}

    async def follow() -> None:
        last = "0-0"
        stream = f"hearth:stream:{task}"
        while True:
            found = await client.xread({stream: last}, block=1000, count=1000)
            now = time.time()
            for _, entries in found or []:
                for entry_id, fields in entries:
                    last = entry_id.decode()
                    seq = int(last.split("-")[0])
                    seen.setdefault(seq, now)
                    event = json.loads(fields[b"e"])
                    if event["type"] == "turn_ended":
                        return

    following = asyncio.ensure_future(follow())
    _SEEN_TASKS.add(following)
    following.add_done_callback(_SEEN_TASKS.discard)
    while not seen:
        await asyncio.sleep(0.002)
    return seen


async def seen_all(seen: dict[int, float], last: int) -> None:
    while last not in seen:
        await asyncio.sleep(0.01)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--chunks", type=int, default=100)
    p.add_argument("--delay", type=float, default=0.03)
    p.add_argument("--readers", type=int, default=100)
    p.add_argument("--read-chunks", type=int, default=2000)
    p.add_argument("--read-delay", type=float, default=0.002)
    p.add_argument("--client-processes", type=int, default=2, help="processes the clients are spread over")
    p.add_argument("--only", choices=["workers", "readers"])
    args = p.parse_args()
    with RedisServer.start() as redis, PostgresCluster.start() as pg, tempfile.TemporaryDirectory() as tmp:
        if args.only != "readers":
            await bench_workers(args, pg, redis, Path(tmp))
        if args.only != "workers":
            await bench_readers(args, pg, redis, Path(tmp))


if __name__ == "__main__":
    asyncio.run(main())
