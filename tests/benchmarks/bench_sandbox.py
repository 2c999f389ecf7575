"""The sandbox's start-up cost per command (issue 15): `run_shell` with `true`, without a sandbox and in the
bubblewrap sandbox (no network, and with the network allowed), in alternating rounds in one run.
Goal: the sandbox adds <= 30 ms to the median command on this machine.

    .venv/bin/python tests/benchmarks/bench_sandbox.py [--rounds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runtime.tools.base import ToolContext  # noqa: E402
from runtime.tools.shell.run_shell import RunShell  # noqa: E402
from runtime.tools.shell.sandbox import detect, hidden_paths  # noqa: E402

GOAL_MS = 30.0


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def _once(shell: RunShell, ctx: ToolContext) -> float:
    t0 = time.perf_counter()
    result = await shell.run({"command": "true"}, ctx)
    took = (time.perf_counter() - t0) * 1000
    assert result.output.endswith("[exit code: 0]"), result.output
    return took


async def main(rounds: int) -> None:
    status, sandbox = await detect()
    print(status.message)
    if sandbox is None:
        raise SystemExit("no sandbox can start here; nothing to compare")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        ws = data / "workspaces" / "t1"
        ws.mkdir(parents=True)
        ctx = ToolContext("t1", "u1", ws, "c1")
        hidden = hidden_paths(data)
        shells = {
            "plain": RunShell(),
            "sandbox": RunShell(sandbox=sandbox, hidden=hidden),
            "sandbox+net": RunShell(sandbox=sandbox, hidden=hidden, network=True),
        }
        times: dict[str, list[float]] = {name: [] for name in shells}
        for shell in shells.values():  # warm up: page cache, imports, the first cgroup
            await _once(shell, ctx)
        print(f"load average before: {_load()}")
        for _ in range(rounds):
            for name, shell in shells.items():
                times[name].append(await _once(shell, ctx))
        print(f"load average after:  {_load()}")
    print(f"\n`true` through run_shell, {rounds} rounds, ms     min   median      max")
    for name, values in times.items():
        print(f"  {name:<40} {min(values):7.1f} {statistics.median(values):8.1f} {max(values):8.1f}")
    base = statistics.median(times["plain"])
    for name in ("sandbox", "sandbox+net"):
        extra = statistics.median(times[name]) - base
        verdict = "ok" if extra <= GOAL_MS else "OVER THE GOAL"
        print(f"extra for {name}: {extra:.1f} ms per command (goal <= {GOAL_MS:g} ms): {verdict}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    asyncio.run(main(parser.parse_args().rounds))
