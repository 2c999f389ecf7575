"""Context building at the sizes a person reaches, in one run (load average printed):

(a) a task's model input built from scratch (no checkpoint yet) at 2,000 and 10,000 messages: reading the rows,
    building and compacting (linear: 10,000 should cost about 5x 2,000), all off the event loop;
(b) the rebuild of a later turn once a checkpoint summarizes the older history (goal <= 50 ms at 2,000);
(c) the request's tool schemas with a 200-tool MCP loadout, with and without tool discovery, beside a 40-tool
    loadout (the most that is sent whole).

    .venv/bin/python tests/benchmarks/bench_context.py [--reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def spread(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"{min(ms):.1f} / {statistics.median(ms):.1f} / {max(ms):.1f} ms"


async def _builds(size: int, reps: int) -> str:
    from runtime.api import Runtime
    from runtime.engine.agent.context import build_context, compact
    from runtime.engine.agent.prompt import SYSTEM_PROMPT
    from tests.support.seed import seed_long_task

    with tempfile.TemporaryDirectory() as home:
        rt = await Runtime.open(home)
        try:
            task_id = await seed_long_task(rt, size)
            reads, builds, compacts = [], [], []
            for _ in range(reps):
                t = time.perf_counter()
                inputs = await rt.core.store.context_inputs(task_id)
                reads.append(time.perf_counter() - t)
                last = inputs.messages[-2]["id"]
                t = time.perf_counter()
                chat, _ = await asyncio.to_thread(build_context, SYSTEM_PROMPT, inputs.messages, last, 10**9, None)
                builds.append(time.perf_counter() - t)
                t = time.perf_counter()
                compact(chat, 8000)
                compacts.append(time.perf_counter() - t)
            await rt.core.store.add_checkpoint(task_id, None, inputs.messages[-40]["id"], "A summary. " * 200)
            rebuilds = []
            for _ in range(reps):
                t = time.perf_counter()
                inputs = await rt.core.store.context_inputs(task_id)
                await asyncio.to_thread(build_context, SYSTEM_PROMPT, inputs.messages, inputs.messages[-2]["id"],
                                        16_000, None, inputs.checkpoint["summary"])
                rebuilds.append(time.perf_counter() - t)
        finally:
            await rt.aclose()
    return (f"(a) {size:>6,} messages: read {spread(reads)}, build {spread(builds)}, compact {spread(compacts)}\n"
            f"(b) {size:>6,} messages, rebuild after a checkpoint (read + build): {spread(rebuilds)}"
            + (" (goal <= 50 ms)" if size == 2000 else ""))


def _tools() -> str:
    from runtime.tools.base import Effect, FunctionTool, tool_spec
    from runtime.tools.builtin import builtin_tools
    from runtime.tools.discovery import LIMIT, offered
    from runtime.tools.interactive import interactive_tools

    async def nothing(args, ctx):
        return ""

    builtins = {t.name: t for t in [*builtin_tools(), *interactive_tools()]}
    mcp = {f"srv__tool_{i:03d}": FunctionTool(
        f"srv__tool_{i:03d}", f"Does thing number {i} with a record: looks it up, checks it, reports back.",
        {"type": "object", "properties": {"record": {"type": "string", "description": "The record's id."},
                                          "verbose": {"type": "boolean"}}, "required": ["record"]},
        Effect.external, nothing) for i in range(200)}
    tools = {**builtins, **mcp}
    every = len(json.dumps([tool_spec(t) for t in tools.values()]))
    names, finder = offered(tools, set(builtins))
    shown = [tool_spec(tools[n]) for n in names] + [tool_spec(finder)]
    small = len(json.dumps(shown))
    # The most a loadout sends whole (discovery starts past LIMIT tools): what 200 tools must not cost more than.
    forty = dict(list(tools.items())[:LIMIT])
    names, _ = offered(forty, set(builtins))
    whole = len(json.dumps([tool_spec(forty[n]) for n in names]))
    return (f"(c) 200 MCP tools + {len(builtins)} built-ins: {every:,} characters of schemas sent without "
            f"discovery, {small:,} with it ({len(shown)} schemas, {small / every:.0%}); a {LIMIT}-tool loadout, "
            f"sent whole: {whole:,}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for size in (2000, 10_000):
        print(asyncio.run(_builds(size, args.reps)))
    print(_tools())
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
