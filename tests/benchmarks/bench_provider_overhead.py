"""Issue 12 (c): the OpenAI provider's raw-SSE stream path against the bare SDK loop, side by side in one run.

1. Speed. tests/support/openai_server runs in its own process (so it does not share our GIL) and serves a
   20,000-chunk stream. Each round reads it, in alternating order: with a bare `AsyncOpenAI` loop over the
   SDK's typed chunks (the reference), with Hearth's provider alone, and as a full Hearth turn (send → stream →
   checkpoints → finalize), once on the provider's raw-SSE path and once on the previous typed path
   (tests/support/sdk_typed_provider.py). Prints min / median / max of wall and CPU time over the rounds and
   the ratio of medians to the bare loop. Goal: full turn ÷ bare loop <= 0.5 (it was 1.05 on the typed path).
   The load average is printed before and after: on a shared 2-core machine CPU time is the steadier figure.
2. Same text: the bare loop's text, the provider's and each turn's saved message are identical.
3. Same faults: every case of sdk_typed_provider.FAULTS (malformed line, error event, early close, stall,
   HTML page, no finish, tool calls with and without index, reasoning fields, usage, HTTP errors) through the
   raw path and through the previous typed path: same tuples, same error text, status and retryable flag.

    python tests/benchmarks/bench_provider_overhead.py [--chunks 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
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

from runtime.api import Runtime  # noqa: E402
from runtime.providers.base import TEXT, ModelRequest  # noqa: E402
from runtime.providers.openai_compat import OpenAICompatProvider  # noqa: E402
from tests.support.openai_server import OpenAIServer  # noqa: E402
from tests.support.sdk_typed_provider import FAULTS, SdkTypedProvider, outcome  # noqa: E402

MSGS = [{"role": "user", "content": "count"}]
GOAL = 0.5
REF = "bare SDK loop (typed chunks)"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def bare(client) -> str:
    parts = []
    stream = await client.chat.completions.create(
        model="m", messages=MSGS, stream=True, stream_options={"include_usage": True}
    )
    async with stream:
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
    return "".join(parts)


async def provider_alone(provider: OpenAICompatProvider) -> str:
    return "".join([ev[1] async for ev in provider.stream(ModelRequest(model="m", messages=MSGS)) if ev[0] == TEXT])


async def turn(rt: Runtime, model: str) -> str:
    task = await rt.create_task(model=model)
    await rt.send(task.id, "count")
    await rt.wait_idle(task.id)
    info = await rt.get_task(task.id)
    assert info.last_reason == "completed", info.last_error
    return (await rt.messages(task.id))[-1].text


async def timed(fn, *args) -> tuple[str, float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    text = await fn(*args)
    return text, time.perf_counter() - t0, time.process_time() - c0


def spread(xs: list[float]) -> str:
    return f"{min(xs):6.3f} / {statistics.median(xs):6.3f} / {max(xs):6.3f}"


async def bench_speed(url: str, chunks: int, rounds: int) -> bool:
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=openai.Timeout(120.0, connect=5.0))
    provider = OpenAICompatProvider("bench", url)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        settings = {"providers": [{"id": "local", "kind": "openai", "base_url": url}], "default_model": "local/m"}
        (home / "settings.json").write_text(json.dumps(settings))
        rt = await Runtime.open(home, providers={"typed": SdkTypedProvider("typed", url)})
        runs = {
            REF: (bare, client),
            "Hearth provider alone (raw SSE)": (provider_alone, provider),
            "full Hearth turn (raw SSE)": (turn, rt, "local/m"),
            "full Hearth turn (previous typed path)": (turn, rt, "typed/m"),
        }
        # Warm up imports, connections and caches; the bare loop last, so that the provider's worker thread has
        # imported httpx before the SDK runs here (see _import_sdk in the provider).
        for name in sorted(runs, key=lambda name: name == REF):
            fn, *args = runs[name]
            await fn(*args)
        wall: dict[str, list[float]] = {name: [] for name in runs}
        cpu: dict[str, list[float]] = {name: [] for name in runs}
        texts: set[str] = set()
        for i in range(rounds):
            order = list(runs.items())
            if i % 2:
                order.reverse()
            for name, (fn, *args) in order:
                text, w, c = await timed(fn, *args)
                texts.add(text)
                wall[name].append(w)
                cpu[name].append(c)
        await rt.aclose()
    await client.close()
    await provider.aclose()

    print(f"{chunks:,}-chunk loopback stream, {rounds} rounds       wall s (min / median / max)   "
          "CPU s (min / median / max)")  # fmt: skip
    for name in runs:
        print(f"  {name:40} {spread(wall[name])}        {spread(cpu[name])}")
    for name in list(runs)[1:]:
        w = statistics.median(wall[name]) / statistics.median(wall[REF])
        c = statistics.median(cpu[name]) / statistics.median(cpu[REF])
        goal = f"   (goal <= {GOAL})" if name == "full Hearth turn (raw SSE)" else ""
        print(f"  {name} ÷ bare loop, ratio of medians: wall {w:.3f}   CPU {c:.3f}{goal}")
    per_round = [t / b for t, b in zip(cpu["full Hearth turn (raw SSE)"], cpu[REF], strict=True)]
    print(f"  full Hearth turn (raw SSE) ÷ bare loop, CPU, per round: min / median / max {spread(per_round)}")
    same = len(texts) == 1 and len(texts.pop()) == chunks * len("tok ")
    print(f"same text from all four, every round ({chunks * len('tok '):,} characters each): {'yes' if same else 'NO'}")
    return same


async def bench_faults() -> bool:
    async with OpenAIServer() as server:
        raw = OpenAICompatProvider("local", server.base_url, read_timeout=0.5)
        typed = SdkTypedProvider("local", server.base_url, read_timeout=0.5)
        print("fault cases, raw SSE path vs the previous typed path:")
        all_same = True
        for case, reply in FAULTS.items():
            new, old = await outcome(raw, server, reply), await outcome(typed, server, reply)
            all_same &= new == old
            tuples = "same tuples" if new[0] == old[0] else "TUPLES DIFFER"
            error = "same error" if new[1] == old[1] else "ERRORS DIFFER"
            said = new[1][0].replace(server.base_url, "URL") if new[1] else f"{len(new[0])} tuples, no error"
            print(f"  {case:32} {tuples:13} {error:13} {said}")
        await raw.aclose()
        await typed.aclose()
    return all_same


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--chunks", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    print(f"load average before: {load()}")
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.support.openai_server", "--chunks", str(args.chunks)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()
        if not line.startswith("READY "):
            raise SystemExit(f"server did not start: {line!r}")
        same_text = asyncio.run(bench_speed(line.split()[1], args.chunks, args.rounds))
    finally:
        server.terminate()
        server.wait(10)
    same_faults = asyncio.run(bench_faults())
    print(f"load average after: {load()}")
    if not (same_text and same_faults):
        raise SystemExit("the raw path differs from the typed path (see above)")


if __name__ == "__main__":
    main()
