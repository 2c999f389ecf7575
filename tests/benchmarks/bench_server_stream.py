"""Server stream benchmarks (issue 30): the Redis stream buffer against the desktop's in-memory StreamBuffer, on a
private redis-server (tests/support/services.py).

(a) producer CPU per chunk: bench_turn.py's 20,000-chunk delta stream (4-character counter chunks) through
    `StreamBuffer.append_delta` and `RedisStreamWriter.append_delta` in a tight loop, then the writer's one flush;
    and the same chunks at a model's pace (5,000 a second, in bursts every 5 ms), so the writer flushes some 200
    batches: the producer process's CPU for the whole stream, flusher included;
(b) a whole turn end to end on the loopback model server, as bench_turn.py (a) runs it: the desktop turn against
    the same turn producing into Redis (the stream reset as the API does it, before the turn; the turn is over when
    its `turn_ended` is readable in Redis); goal: ratio <= 1.5. Also the time from the `turn_ended` being published
    to it being readable, and a reader rebuilding the turn's text from each buffer (checked byte-identical with the
    stored message);
(c) 100 readers in 2 processes (as through two API instances) following one paced turn through one Redis: the delay
    from a chunk's append to its reading, over every chunk and reader; goal: p99 <= 100 ms, none missing. Run twice:
    the reading processes as they are, and with `gc.freeze()` after their start-up (a full garbage collection of a
    process that imported the runtime takes 60-120 ms here, and every reader of that process waits for it).

    .venv/bin/python tests/benchmarks/bench_server_stream.py [--chunks 20000] [--rounds 5] [--readers 100]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402

from runtime.api import Runtime  # noqa: E402
from runtime.engine.stream_buffer import TEXT_KIND, BufferRegistry, StreamBuffer  # noqa: E402
from runtime.events import EndReason, TurnEnded, TurnStarted  # noqa: E402
from runtime.server.redis.stream import RedisStreamReader, RedisStreamWriter, stream_keys  # noqa: E402
from tests.support.openai_server import Reply  # noqa: E402
from tests.support.services import RedisServer  # noqa: E402

TASK = "bench"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def median_ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:8.2f} ms"


# -- (a) the producer's cost per chunk --

async def bench_producer(url: str, chunks: list[str], rounds: int, rate: float) -> None:
    client = aioredis.from_url(url)
    desktop, into_redis, flushes = [], [], []
    for _ in range(rounds):
        buffer = StreamBuffer(TASK, "t1")
        append = buffer.append_delta
        c0 = time.process_time()
        for text in chunks:
            append(TEXT_KIND, 0, text)
        desktop.append(time.process_time() - c0)

        writer = RedisStreamWriter(client, TASK, "t1")
        await writer.reset()
        append = writer.append_delta
        c0 = time.process_time()
        for text in chunks:
            append(TEXT_KIND, 0, text)
        into_redis.append(time.process_time() - c0)
        t0 = time.perf_counter()
        assert await writer.aclose()
        flushes.append(time.perf_counter() - t0)
    n = len(chunks)
    d, r = statistics.median(desktop) / n * 1e9, statistics.median(into_redis) / n * 1e9
    print(f"(a) append_delta, {n:,} chunks: StreamBuffer {d:6.1f} ns/chunk   RedisStreamWriter {r:6.1f} ns/chunk   "
          f"ratio {r / d:.2f}; the writer's one flush of them {median_ms(flushes)} (medians of {rounds})")
    c0 = time.process_time()
    await paced(StreamBuffer(TASK, "t1"), chunks, rate)
    d = time.process_time() - c0
    writer = RedisStreamWriter(client, TASK, "t1")
    await writer.reset()
    c0 = time.process_time()
    await paced(writer, chunks, rate)
    assert await writer.aclose()
    r = time.process_time() - c0
    batches = await client.xlen(stream_keys(TASK)[0])
    print(f"    at {rate:,.0f} chunks/s: producer CPU StreamBuffer {d * 1000:6.1f} ms   RedisStreamWriter "
          f"{r * 1000:6.1f} ms ({batches} batches)   extra {(r - d) / n * 1e6:.2f} us/chunk, "
          f"{(r - d) / (n / rate) * 100:.1f}% of a core while it streams")
    await client.aclose()


async def paced(buffer, chunks: list[str], rate: float, made: dict[int, float] | None = None) -> None:
    """Append the chunks at `rate` a second, in bursts every 5 ms; `made`: when each seq was appended."""
    loop = asyncio.get_running_loop()
    burst = max(1, int(rate * 0.005))
    tick = loop.time()
    for i in range(0, len(chunks), burst):
        now = time.perf_counter()
        for text in chunks[i:i + burst]:
            buffer.append_delta(TEXT_KIND, 0, text)
            if made is not None:
                made[buffer.seq] = now
        tick += 0.005
        await asyncio.sleep(max(0.0, tick - loop.time()))


# -- (b) a whole turn --

class TimedWriter(RedisStreamWriter):
    """Notes when the turn's end was published, to time how long until it is readable."""

    ended_at = 0.0

    def publish(self, event) -> None:
        if type(event) is TurnEnded:
            self.ended_at = time.perf_counter()
        super().publish(event)


class RedisStreams:
    """While active, every turn's stream is a RedisStreamWriter, which the buffer registry hands out in place of its
    own StreamBuffer (it still makes one; nothing is written into it). The stream is reset in Redis first, as the
    API does before it enqueues the run (blocking here, so the turn pays for it)."""

    def __init__(self, client, url: str):
        self.client, self.sync = client, redis.Redis.from_url(url)
        self.writers: dict[str, TimedWriter] = {}
        self._reset, self._get = BufferRegistry.reset, BufferRegistry.get

    def __enter__(self) -> RedisStreams:
        streams, reset, get = self, self._reset, self._get

        def reset_into_redis(registry, task_id: str, turn_id: str):
            reset(registry, task_id, turn_id)
            stream, meta = stream_keys(task_id)
            with streams.sync.pipeline(transaction=True) as pipe:
                pipe.delete(stream, meta).hset(meta, mapping={"turn_id": turn_id, "state": "active"}).execute()
            writer = streams.writers[task_id] = TimedWriter(streams.client, task_id, turn_id)
            return writer

        BufferRegistry.reset = reset_into_redis  # type: ignore[method-assign]
        BufferRegistry.get = lambda registry, task_id: streams.writers.get(task_id) or get(registry, task_id)
        return self

    def __exit__(self, *exc: object) -> None:
        BufferRegistry.reset, BufferRegistry.get = self._reset, self._get  # type: ignore[method-assign]


async def desktop_turn(rt: Runtime) -> tuple[float, float, str]:
    task = await rt.create_task()
    t0, c0 = time.perf_counter(), time.process_time()
    await rt.send(task.id, "count")
    await rt.wait_idle(task.id)
    elapsed = time.perf_counter() - t0, time.process_time() - c0
    assert (await rt.get_task(task.id)).last_reason == "completed"
    return *elapsed, task.id


async def redis_turn(rt: Runtime, streams: RedisStreams) -> tuple[float, float, str, float]:
    task = await rt.create_task()
    with streams:
        t0, c0 = time.perf_counter(), time.process_time()
        await rt.send(task.id, "count")
        await rt.wait_idle(task.id)
        writer = streams.writers[task.id]
        assert await writer.aclose()  # the turn_ended is readable now
        elapsed = time.perf_counter() - t0, time.process_time() - c0
        readable = time.perf_counter() - writer.ended_at
    assert (await rt.get_task(task.id)).last_reason == "completed"
    return *elapsed, task.id, readable


async def bench_turn(url: str, model_url: str, rounds: int, chunks: int) -> None:
    client = aioredis.from_url(url)
    streams = RedisStreams(client, url)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "settings.json").write_text(json.dumps({
            "providers": [{"id": "local", "kind": "openai", "base_url": model_url}], "default_model": "local/m"}))
        rt = await Runtime.open(home)
        await desktop_turn(rt)
        await redis_turn(rt, streams)
        desktop, into_redis = [], []
        for _ in range(rounds):
            desktop.append(await desktop_turn(rt))
            into_redis.append(await redis_turn(rt, streams))
        stored = (await rt.messages(desktop[-1][2]))[-1].text
        assert len(stored) == chunks * 4
        t0 = time.perf_counter()
        events = [e async for e in rt.subscribe(desktop[-1][2])]
        desktop_read = time.perf_counter() - t0
        assert "".join(e.text for e in events if e.type == "text_delta") == stored
        task_id = into_redis[-1][2]
        t0 = time.perf_counter()
        events = [e async for e in RedisStreamReader(client).subscribe(task_id)]
        redis_read = time.perf_counter() - t0
        assert "".join(e.text for e in events if e.type == "text_delta").encode() == (
            (await rt.messages(task_id))[-1].text.encode()) == stored.encode()
        await rt.aclose()
    streams.sync.close()
    for i, what in ((0, "wall"), (1, "CPU ")):
        d, r = statistics.median(x[i] for x in desktop), statistics.median(x[i] for x in into_redis)
        print(f"(b) {chunks:,}-chunk turn, {what}: desktop {d * 1000:8.1f} ms   into Redis {r * 1000:8.1f} ms   "
              f"ratio {r / d:.3f}   (goal <= 1.5; medians of {rounds})")
    print(f"    turn_ended published -> readable in Redis: {median_ms([x[3] for x in into_redis])}; "
          f"a reader rebuilding the turn: StreamBuffer {desktop_read * 1000:.2f} ms, Redis {redis_read * 1000:.2f} ms "
          f"({len(events)} events), text byte-identical to the stored message")
    await client.aclose()


# -- (c) many readers, live --

async def readers_child(url: str, count: int, freeze: bool) -> None:
    """Runs in its own process: `count` readers follow the task's stream; 'ready' once all are live; at the end,
    per reader the (seq, time) of each event and the sha256 of the text it rebuilt."""
    if freeze:
        gc.freeze()  # what start-up made is never collected: full collections skip it
    client = aioredis.from_url(url, max_connections=count + 8)
    reader = RedisStreamReader(client)
    live = 0
    ready = asyncio.Event()

    async def follow() -> dict:
        nonlocal live
        seen, text = [], []
        async for event in reader.subscribe(TASK):
            seen.append((event.seq, time.perf_counter()))
            if event.type == "turn_started":
                live += 1
                if live == count:
                    ready.set()
            elif event.type == "text_delta":
                text.append(event.text)
        return {"seen": seen, "sha": hashlib.sha256("".join(text).encode()).hexdigest()}

    followers = [asyncio.create_task(follow()) for _ in range(count)]
    await ready.wait()
    print("ready", flush=True)
    print(json.dumps(await asyncio.gather(*followers)), flush=True)
    await client.aclose()


async def bench_readers(url: str, chunks: list[str], readers: int, procs: int, rate: float, freeze: bool) -> None:
    client = aioredis.from_url(url)
    writer = RedisStreamWriter(client, TASK, "t1")
    await writer.reset(TurnStarted(task_id=TASK, turn_id="t1", input_message_id=1))
    children = [await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--readers-child", url, str(readers // procs), str(freeze),
        stdout=asyncio.subprocess.PIPE, limit=2**30) for _ in range(procs)]
    for child in children:
        assert await child.stdout.readline() == b"ready\n"
    made: dict[int, float] = {}
    c0 = time.process_time()
    await paced(writer, chunks, rate, made)
    writer.publish(TurnEnded(task_id=TASK, turn_id="t1", reason=EndReason.completed))
    assert await writer.aclose()
    producer_cpu = time.process_time() - c0
    results = []
    for child in children:
        out, _ = await child.communicate()
        results += json.loads(out.splitlines()[-1])
    sha = hashlib.sha256("".join(chunks).encode()).hexdigest()
    delays = []
    for result in results:
        assert result["sha"] == sha, "a reader rebuilt another text"
        before = 1  # turn_started
        for seq, at in result["seen"][1:]:
            delays += [at - made[s] for s in range(before + 1, seq + 1) if s in made]
            before = seq
    assert len(delays) == len(chunks) * len(results), "a chunk is missing"
    delays.sort()
    pick = lambda q: delays[min(len(delays) - 1, int(len(delays) * q))] * 1000  # noqa: E731
    entries = await client.xlen(stream_keys(TASK)[0])
    how = "gc.freeze()d" if freeze else "as they are"
    print(f"(c) {len(results)} readers in {procs} processes ({how}), {len(chunks):,} chunks at {rate:,.0f}/s "
          f"({entries} entries):"
          f" append -> read p50 {pick(0.5):.1f} ms, p90 {pick(0.9):.1f} ms, p99 {pick(0.99):.1f} ms, "
          f"max {delays[-1] * 1000:.1f} ms "
          f"(goal p99 <= 100 ms); none missing, every text byte-identical; producer CPU {producer_cpu * 1000:.0f} ms")
    await client.aclose()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--chunks", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--readers", type=int, default=100)
    p.add_argument("--reader-procs", type=int, default=2)
    p.add_argument("--rate", type=float, default=5000.0, help="chunks per second when paced")
    p.add_argument("--readers-child", nargs=3, metavar=("URL", "COUNT", "FREEZE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.readers_child:
        url, count, freeze = args.readers_child
        asyncio.run(readers_child(url, int(count), freeze == "True"))
        return
    chunks = Reply.counting(args.chunks).chunks
    print(f"load before: {load()}")
    model = subprocess.Popen([sys.executable, "-m", "tests.support.openai_server", "--chunks", str(args.chunks)],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        model_url = model.stdout.readline().split()[1]
        with RedisServer.start() as server:
            asyncio.run(bench_producer(server.url, chunks, max(args.rounds, 10), args.rate))
            server.flush()
            asyncio.run(bench_turn(server.url, model_url, args.rounds, args.chunks))
            for freeze in (False, True):
                server.flush()
                asyncio.run(bench_readers(server.url, chunks, args.readers, args.reader_procs, args.rate, freeze))
    finally:
        model.terminate()
        model.wait()
    print(f"load after: {load()}")


if __name__ == "__main__":
    main()
