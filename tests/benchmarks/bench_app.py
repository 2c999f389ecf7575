"""Desktop app benchmarks, in one run (issue 4):

(a) launch → first paint: `python -m app` in a fresh process (offscreen), from just before the process starts
    to the main window's first paint event; goal <= 1.0 s. Also reports launch → runtime ready, and which
    heavy modules were already imported at first paint (should be none);
(b) event-loop lag while 20,000 text deltas stream at full speed into an open task panel: the worst and
    99th-percentile lag of a 5 ms ticker, batches handed to the panel vs frames elapsed, Markdown renders.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/benchmarks/bench_app.py [--rounds 5] [--deltas 20000]
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
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def bench_launch(rounds: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("HEARTH_HOME", None)
    paints, readies, heavy = [], [], set()
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as home:
            t0 = time.time()
            done = subprocess.run(
                [sys.executable, "-m", "app", "--home", home, "--no-tray", "--report-startup", "exit"],
                capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
            )
            if done.returncode != 0:
                raise SystemExit(f"app failed: {done.stderr[-2000:]}")
            report = json.loads(done.stdout.strip().splitlines()[-1])
            paints.append(report["first_paint"] - t0)
            readies.append(report["ready"] - t0)
            heavy.update(report["heavy_at_paint"])
    med = statistics.median(paints)
    print(f"(a) launch → first paint: median {med:.3f} s (min {min(paints):.3f}, max {max(paints):.3f}) over "
          f"{rounds} launches; goal <= 1.0 s: {'OK' if med <= 1.0 else 'MISSED'}")
    print(f"    launch → runtime ready: median {statistics.median(readies):.3f} s; heavy modules at first paint: "
          f"{sorted(heavy) or 'none'}")


async def _stream(deltas: int) -> dict:
    from app.bridge import FRAME
    from app.controller import HearthApp
    from tests.support.fast_model import FastModel

    fast = FastModel(deltas)
    with tempfile.TemporaryDirectory() as home:
        ctl = HearthApp(home, providers={"fast": fast}, use_tray=False)
        await ctl.start()
        try:
            task = await ctl.bridge.create_task(title="Firehose", model="fast/x")
            await ctl.window.reload_tasks()
            panel = ctl.window.open_task(task.id)
            await panel.loaded.wait()
            lags: list[float] = []
            running = True

            async def ticker():
                while running:
                    t = time.perf_counter()
                    await asyncio.sleep(0.005)
                    lags.append(time.perf_counter() - t - 0.005)

            tick = asyncio.ensure_future(ticker())
            t0 = time.perf_counter()
            await ctl.bridge.send(task.id, "go")
            await panel.sync()
            observer = panel.observer
            await ctl.rt.wait_idle(task.id)
            elapsed = time.perf_counter() - t0
            running = False
            await tick
            messages = await ctl.rt.messages(task.id)
            turn_id = next(m.turn_id for m in messages if m.role == "assistant")
            while panel.turn_text(turn_id) != "".join(fast.chunks):
                await asyncio.sleep(0.01)
            view = panel.conversation.turn_entry(turn_id).block.parts[0]
            lags.sort()
            return {
                "elapsed": elapsed, "worst": lags[-1], "p99": lags[int(len(lags) * 0.99)],
                "median": lags[len(lags) // 2], "batches": observer.flushes if observer else 0,
                "events": observer.events if observer else 0, "frames": elapsed / FRAME, "renders": view.renders,
            }
        finally:
            await ctl.shutdown()


def bench_stream(deltas: int) -> None:
    import qasync
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)
    r = qasync.run(_stream(deltas))
    print(f"(b) {deltas:,} deltas streamed into an open panel in {r['elapsed']:.2f} s: loop lag median "
          f"{r['median'] * 1000:.1f} ms, p99 {r['p99'] * 1000:.1f} ms, worst {r['worst'] * 1000:.1f} ms; "
          f"{r['events']:,} coalesced events → {r['batches']} batches in {r['frames']:.0f} frames "
          f"(<= 1 per frame: {'OK' if r['batches'] <= r['frames'] + 2 else 'MISSED'}), {r['renders']} renders")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--deltas", type=int, default=20_000)
    args = parser.parse_args()
    bench_launch(args.rounds)
    bench_stream(args.deltas)


if __name__ == "__main__":
    main()
