"""Turn-runtime benchmarks, side by side in one run (issue 2).

(a) a 20,000-chunk stream from the loopback server: bare `openai` client loop vs a full Hearth turn
    (send → stream → checkpoints → finalize), alternating rounds; goal: ratio of medians <= 0.5 since the
    provider reads the stream raw (issue 12; bench_provider_overhead.py has it beside the previous typed path);
(b) time from `send()` to the first request byte at the server; goal <= 15 ms;
(c) replay of a finished 20,000-delta turn to a new subscriber; goal <= 100 ms.

    .venv/bin/python tests/benchmarks/bench_turn.py [--chunks 20000] [--rounds 5]
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

from runtime.api import Runtime  # noqa: E402

MSGS = [{"role": "user", "content": "count"}]


def _settings(home: Path, url: str) -> None:
    (home / "settings.json").write_text(
        json.dumps({"providers": [{"id": "local", "kind": "openai", "base_url": url}], "default_model": "local/m"})
    )


async def bare_loop(client) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    stream = await client.chat.completions.create(
        model="m", messages=MSGS, stream=True, stream_options={"include_usage": True}
    )
    async with stream:
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pass
    return time.perf_counter() - t0, time.process_time() - c0


async def hearth_turn(rt: Runtime) -> tuple[tuple[float, float], str]:
    task = await rt.create_task()
    t0, c0 = time.perf_counter(), time.process_time()
    await rt.send(task.id, "count")
    await rt.wait_idle(task.id)
    elapsed = time.perf_counter() - t0, time.process_time() - c0
    info = await rt.get_task(task.id)
    assert info.last_reason == "completed", info.last_error
    return elapsed, task.id


async def bench_stream(url: str, rounds: int, chunks: int) -> None:
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        _settings(home, url)
        rt = await Runtime.open(home)
        await bare_loop(client)
        await hearth_turn(rt)
        bare, turn = [], []
        for _ in range(rounds):
            bare.append(await bare_loop(client))
            turn.append((await hearth_turn(rt))[0])
        _, task_id = await hearth_turn(rt)
        replays = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            events = [ev async for ev in rt.subscribe(task_id)]
            replays.append(time.perf_counter() - t0)
        text = "".join(e.text for e in events if e.type == "text_delta")
        persisted = (await rt.messages(task_id))[-1].text
        assert text == persisted and len(text) == chunks * len("tok ")
        await rt.aclose()
        await client.close()  # left to the garbage collector, it closes on a loop that has ended
    for i, what in ((0, "wall"), (1, "CPU ")):
        b, t = statistics.median(x[i] for x in bare), statistics.median(x[i] for x in turn)
        print(f"(a) {chunks:,}-chunk stream, {what}: bare openai loop {b * 1000:8.1f} ms   Hearth turn "
              f"{t * 1000:8.1f} ms   ratio {t / b:.3f}   (goal <= 0.5; medians of {rounds})")
    r = statistics.median(replays)
    print(f"(c) replay of a finished {chunks:,}-delta turn: {r * 1000:.2f} ms, {len(events)} events (goal <= 100 ms)")


async def bench_first_byte(url: str, samples: int) -> None:
    """The server runs in its own process (a thread would add GIL hand-off delays to the figure)."""
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        _settings(home, url)
        rt = await Runtime.open(home)
        starts = []
        for _ in range(samples + 2):
            task = await rt.create_task()
            starts.append(time.perf_counter())
            await rt.send(task.id, "hi")
            await rt.wait_idle(task.id)
        await rt.aclose()
    async with httpx.AsyncClient() as client:
        seen = (await client.get(url.removesuffix("/v1") + "/_stats")).json()["first_byte_times"]
    # The first two turns warm up imports and the HTTP client.
    delays = [b - a for a, b in zip(starts, seen[-len(starts):], strict=True)][2:]
    delays.sort()
    print(f"(b) send() -> first request byte: median {statistics.median(delays) * 1000:.2f} ms, "
          f"p90 {delays[int(len(delays) * 0.9)] * 1000:.2f} ms over {samples} turns (goal <= 15 ms)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--chunks", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    servers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.openai_server", "--chunks", str(n)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )
        for n in (args.chunks, 1)
    ]
    try:
        big, small = (s.stdout.readline().split()[1] for s in servers)
        asyncio.run(bench_stream(big, args.rounds, args.chunks))
        asyncio.run(bench_first_byte(small, 30))
    finally:
        for s in servers:
            s.terminate()
            s.wait()


if __name__ == "__main__":
    main()
