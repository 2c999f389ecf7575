"""How much does OpenAICompatProvider.stream() cost over a bare AsyncOpenAI loop?

1. End to end: starts tests/support/openai_server in a separate process (so the server does not share the
   GIL), then iterates an N-chunk stream alternately with a bare SDK loop and through the provider, several
   rounds, and prints wall and CPU times and the ratio of medians. Target: ratio <= 1.05. CPU time (of
   this process) is the steadier number on a busy machine.
2. Loop only: the same two loops over N chunk objects the SDK already built (a fake stream, no HTTP, no
   parsing), which isolates the provider's own per-chunk cost in microseconds.

    python tests/benchmarks/bench_provider_overhead.py [--chunks 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runtime.providers.base import TEXT, ModelRequest  # noqa: E402
from runtime.providers.openai_compat import OpenAICompatProvider  # noqa: E402

MSGS = [{"role": "user", "content": "count"}]


async def bare(client) -> int:
    n = 0
    stream = await client.chat.completions.create(
        model="bench", messages=MSGS, stream=True, stream_options={"include_usage": True}
    )
    async with stream:
        async for chunk in stream:
            if chunk.choices:
                if chunk.choices[0].delta.content:
                    n += 1
    return n


async def via_provider(provider: OpenAICompatProvider) -> int:
    n = 0
    async for ev in provider.stream(ModelRequest(model="bench", messages=MSGS)):
        if ev[0] == TEXT:
            n += 1
    return n


async def main(chunks: int, rounds: int, url: str) -> None:
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=openai.Timeout(120.0, connect=5.0))
    provider = OpenAICompatProvider("bench", url)
    # warm up both (connection, imports, caches)
    assert await bare(client) == chunks
    assert await via_provider(provider) == chunks
    wall: dict[str, list[float]] = {"bare": [], "provider": []}
    cpu: dict[str, list[float]] = {"bare": [], "provider": []}
    for i in range(rounds):
        order = [("bare", bare, client), ("provider", via_provider, provider)]
        if i % 2:
            order.reverse()
        for name, fn, arg in order:
            c0, t0 = time.process_time(), time.perf_counter()
            n = await fn(arg)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            assert n == chunks, (name, n)
        print(
            f"round {i + 1}: bare {wall['bare'][-1]:.3f} s (cpu {cpu['bare'][-1]:.3f})   "
            f"provider {wall['provider'][-1]:.3f} s (cpu {cpu['provider'][-1]:.3f})"
        )
    print(f"\nend to end, {chunks} chunks, {rounds} rounds (medians):")
    for label, d in (("wall", wall), ("cpu ", cpu)):
        mb, mp = statistics.median(d["bare"]), statistics.median(d["provider"])
        print(
            f"  {label}: bare {mb:.3f} s ({mb / chunks * 1e6:.1f} µs/chunk)   provider {mp:.3f} s "
            f"({mp / chunks * 1e6:.1f} µs/chunk)   ratio {mp / mb:.3f}   "
            f"ratio of minimums {min(d['provider']) / min(d['bare']):.3f}"
        )
    await client.close()
    await provider.aclose()
    await loop_only(chunks, rounds, statistics.median(cpu["bare"]) / chunks)


class _FakeStream:
    """Yields chunk objects the SDK built beforehand: no HTTP, no parsing."""

    def __init__(self, items):
        self.items = items

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return None

    async def __aiter__(self):
        for item in self.items:
            yield item


class _FakeCompletions:
    def __init__(self, items):
        self.items = items

    async def create(self, **kw):
        return _FakeStream(self.items)


class _FakeClient:
    def __init__(self, items):
        self.chat = type("Chat", (), {})()
        self.chat.completions = _FakeCompletions(items)

    async def close(self):
        return None


async def loop_only(chunks: int, rounds: int, sdk_per_chunk: float) -> None:
    from openai.types.chat import ChatCompletionChunk

    def chunk(delta, finish=None, choices=True, usage=None):
        return ChatCompletionChunk.model_validate(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else [],
                "usage": usage,
            }
        )

    items = [chunk({"role": "assistant", "content": ""})]
    items += [chunk({"content": "tok "}) for _ in range(chunks)]
    items += [
        chunk({}, "stop"),
        chunk({}, choices=False, usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}),
    ]
    client = _FakeClient(items)
    provider = OpenAICompatProvider("bench", "http://unused/v1")
    provider._client = client
    t_bare, t_prov = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        assert await bare(client) == chunks
        t1 = time.perf_counter()
        assert await via_provider(provider) == chunks
        t2 = time.perf_counter()
        t_bare.append(t1 - t0)
        t_prov.append(t2 - t1)
    mb, mp = min(t_bare), min(t_prov)
    extra = (mp - mb) / chunks
    print(
        f"\nloop only (chunk objects prebuilt), best of {rounds}: bare {mb / chunks * 1e6:.2f} µs/chunk, "
        f"provider {mp / chunks * 1e6:.2f} µs/chunk -> the provider adds {extra * 1e6:.2f} µs/chunk, "
        f"{extra / sdk_per_chunk * 100:.1f}% of the SDK's measured {sdk_per_chunk * 1e6:.1f} µs/chunk"
    )


def run() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--chunks", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.support.openai_server", "--chunks", str(args.chunks)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()
        if not line.startswith("READY "):
            raise SystemExit(f"server did not start: {line!r}")
        asyncio.run(main(args.chunks, args.rounds, line.split()[1]))
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    run()
