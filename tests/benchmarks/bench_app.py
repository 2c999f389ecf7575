"""Desktop app benchmarks, in one run, side by side with the runtime-only figures (load average printed):

(a) launch → first paint: `python -m app` in a fresh process (offscreen), on an empty data folder and on ones
    with 20 and 1,000 tasks; goal <= 1.0 s. Also launch → runtime ready and sidebar filled, and heavy modules
    imported at first paint;
(b) event-loop lag while 20,000 text deltas stream at full speed into an open task panel;
(c) opening a long task: 250 / 1,000 / 2,000 / 10,000 messages → last page painted (goal <= 150 ms at 2,000,
    flat across sizes) and RSS added (goal <= 60 MB: each rep a fresh app process opening the task, so memory an
    earlier read freed cannot hide the cost); beside it, the runtime reading that page and the whole task;
(d) 500 short turns in one open task: the last 50 ÷ the first 50 (goal <= 1.2) and RSS growth (goal <= 30 MB),
    beside the same 500 turns without a window;
(e) event-loop lag p99 while 4 tasks stream ~500 tokens/s each, one of them visible (goal <= 16 ms);
(f) a full garbage collection with a 2,000-message task open, with and without `gc.freeze()` after start-up;
(g) the sidebar filled from nothing with 20 and with 1,000 tasks: the window's reload (the runtime's task, chat
    and team lists read, the list model reset) and the list painted, and RSS added; beside it, the runtime
    reading the task list alone. 1,000 tasks should cost no more to show than 20.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/benchmarks/bench_app.py [--reps 3] [--quick] [--only ag]

Each figure is min / median / max over the reps.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
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


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def spread(values: list[float], scale: float = 1.0, unit: str = "s", digits: int = 3) -> str:
    v = [x * scale for x in values]
    return f"{min(v):.{digits}f} / {statistics.median(v):.{digits}f} / {max(v):.{digits}f} {unit}"


def bench_launch(reps: int, tasks: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("HEARTH_HOME", None)
    for count in (0, 20, tasks):
        paints, readies, heavy = [], [], set()
        with tempfile.TemporaryDirectory() as home:
            if count:
                subprocess.run([sys.executable, "-m", "tests.support.seed", "--home", home, "--messages", "0",
                                "--tasks", str(count)], cwd=ROOT, env=env, check=True, capture_output=True)
            for _ in range(reps):
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
        print(f"(a) launch → first paint, {count:>5,} tasks: {spread(paints)} (goal <= 1.0 s); → runtime ready and "
              f"sidebar filled: {spread(readies)}; heavy modules at first paint: {sorted(heavy) or 'none'}")


async def _app(home: str, providers: dict):
    from app.shell.application import HearthApp

    ctl = HearthApp(home, providers=providers, use_tray=False, preload_model=False)  # its figures are the UI's
    await ctl.start()
    # As app/main.py does after start-up (the earlier reps' leftovers collected first, not frozen with it).
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return ctl


async def _stream(deltas: int) -> dict:
    from app.core.bridge import FRAME
    from tests.support.fast_model import FastModel

    fast = FastModel(deltas)
    with tempfile.TemporaryDirectory() as home:
        ctl = await _app(home, {"fast": fast})
        try:
            task = await ctl.bridge.create_task(title="Firehose", model="fast/x")
            await ctl.window.reload_tasks()
            panel = ctl.window.open_task(task.id)
            await panel.loaded.wait()
            lags = await _lags_while(ctl.bridge.send(task.id, "go"), lambda: ctl.rt.wait_idle(task.id))
            observer = panel.observer
            return {"lags": lags, "batches": observer.flushes, "events": observer.events,
                    "frames": lags["elapsed"] / FRAME}
        finally:
            await ctl.shutdown()


async def _lags_while(start, until_done) -> dict:
    """Loop lag of a 5 ms ticker from `start` until `until_done()` returns."""
    lags: list[float] = []
    running = True

    async def ticker():
        while running:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - t - 0.005)

    tick = asyncio.ensure_future(ticker())
    t0 = time.perf_counter()
    await start
    await until_done()
    elapsed = time.perf_counter() - t0
    running = False
    await tick
    lags.sort()
    return {"elapsed": elapsed, "worst": lags[-1], "p99": lags[int(len(lags) * 0.99)]}


async def _open_long(sizes: list[int], reps: int) -> list[str]:
    from tests.support.seed import seed_long_task

    lines = []
    for size in sizes:
        with tempfile.TemporaryDirectory() as home:
            ctl = await _app(home, {})
            try:
                task_id = await seed_long_task(ctl.rt, size, model=ctl.rt.settings.default_model)
                await ctl.window.reload_tasks()
                opens, page_reads, full_reads = [], [], []
                for _ in range(reps):
                    t = time.perf_counter()
                    await ctl.rt.messages(task_id, limit=31)
                    page_reads.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    await ctl.rt.messages(task_id)
                    full_reads.append(time.perf_counter() - t)
                    ctl.window.close_panel()
                    ctl.view_states.clear()
                    await asyncio.sleep(0.2)
                    gc.collect()
                    t = time.perf_counter()
                    panel = ctl.window.open_task(task_id)
                    await panel.loaded.wait()
                    panel.conversation.viewport().repaint()
                    opens.append(time.perf_counter() - t)
                    panel_items = len(panel.conversation.items)
                lines.append(f"(c) open {size:>6,} messages → last page painted {spread(opens, 1000, 'ms', 0)}, "
                             f"RSS added RSS_ADDED, {panel_items} messages rendered | runtime: "
                             f"page read {spread(page_reads, 1000, 'ms', 1)}, "
                             f"whole task {spread(full_reads, 1000, 'ms', 0)}")
            finally:
                await ctl.shutdown()
            rss = [await _rss_of_a_fresh_open(home, task_id) for _ in range(reps)]
            lines[-1] = lines[-1].replace("RSS_ADDED", spread(rss, 1, "MB", 1))
    return lines


async def _rss_of_a_fresh_open(home: str, task_id: str) -> float:
    (Path(home) / "app.ini").unlink(missing_ok=True)  # no last task: the window starts without it
    probe = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--rss-probe", home, task_id, stdout=asyncio.subprocess.PIPE)
    out, _ = await probe.communicate()
    return float(out.decode().split()[-1])


async def _probe_open(home: str, task_id: str) -> None:
    """In a fresh app process: the RSS that opening the task adds, printed last."""
    ctl = await _app(home, {})
    try:
        await asyncio.sleep(1.0)  # the start-up's own work (task list, database check) done
        gc.collect()
        before = rss_mb()
        panel = ctl.window.open_task(task_id)
        await panel.loaded.wait()
        panel.conversation.viewport().repaint()
        await asyncio.sleep(0.2)
        gc.collect()
        print(f"{rss_mb() - before:.3f}")
    finally:
        await ctl.shutdown()


async def _turns(n: int) -> dict:
    from runtime.api import Runtime
    from runtime.providers.scripted import ScriptedModel

    class Forgetful(ScriptedModel):
        """Keeps no requests: a ScriptedModel keeps each one's whole message list, which over 500 turns is
        ~70 MB of the test's own making that would be counted as the app's growth."""

        async def stream(self, request, *, on_queued=None):
            async for item in super().stream(request, on_queued=on_queued):
                yield item
            self.requests.clear()

    def model():
        return Forgetful([[f"Answer {i}: fine, **done**."] for i in range(n)])

    async def run(send, idle) -> tuple[list[float], float]:
        gc.collect()
        before = rss_mb()
        times = []
        for i in range(n):
            t = time.perf_counter()
            await send(f"question {i}")
            await idle()
            times.append(time.perf_counter() - t)
        gc.collect()
        return times, rss_mb() - before

    with tempfile.TemporaryDirectory() as home:
        rt = await Runtime.open(home, providers={"scripted": model()})
        task = await rt.create_task(model="scripted/x")
        bare, bare_rss = await run(lambda text: rt.send(task.id, text), lambda: rt.wait_idle(task.id))
        await rt.aclose()
    with tempfile.TemporaryDirectory() as home:
        ctl = await _app(home, {"scripted": model()})
        try:
            task = await ctl.bridge.create_task(title="Many turns", model="scripted/x")
            await ctl.window.reload_tasks()
            panel = ctl.window.open_task(task.id)
            await panel.loaded.wait()

            async def idle():
                await ctl.rt.wait_idle(task.id)
                while panel.live or panel.composer.running:
                    await asyncio.sleep(0.002)

            times, grew = await run(lambda text: ctl.bridge.send(task.id, text), idle)
            rendered = len(panel.conversation.items)
        finally:
            await ctl.shutdown()
    return {"n": n, "ratio": sum(times[-50:]) / sum(times[:50]), "grew": grew, "rendered": rendered,
            "first": sum(times[:50]) / 50, "last": sum(times[-50:]) / 50,
            "bare_ratio": sum(bare[-50:]) / sum(bare[:50]), "bare_rss": bare_rss}


async def _four_streams(tokens: int) -> dict:
    from runtime.providers.scripted import ScriptedModel

    # An answer as models write them: paragraphs of ~60 tokens. Two tokens a chunk every 2 ms: a sleep that
    # short takes ~4 ms on this loop, so one token a chunk would stream at only ~250 tokens/s.
    words = [f"t{j}" + ("\n\n" if j % 60 == 59 else " ") for j in range(tokens)]
    chunks = ["".join(words[j:j + 2]) for j in range(0, tokens, 2)]
    models = {f"m{i}": ScriptedModel([chunks], chunk_delay=0.002) for i in range(4)}
    with tempfile.TemporaryDirectory() as home:
        ctl = await _app(home, models)
        try:
            tasks = [await ctl.bridge.create_task(title=f"Stream {i}", model=f"m{i}/x") for i in range(4)]
            await ctl.window.reload_tasks()
            panel = ctl.window.open_task(tasks[0].id)
            await panel.loaded.wait()

            async def start():
                for t in tasks:
                    await ctl.bridge.send(t.id, "go")

            async def all_idle():
                for t in tasks:
                    await ctl.rt.wait_idle(t.id)

            lags = await _lags_while(start(), all_idle)
        finally:
            await ctl.shutdown()
    return {"rate": tokens / lags["elapsed"], "p99": lags["p99"], "worst": lags["worst"]}


async def _gc() -> str:
    from tests.support.seed import seed_long_task

    with tempfile.TemporaryDirectory() as home:
        ctl = await _app(home, {})
        try:
            task_id = await seed_long_task(ctl.rt, 2000, model=ctl.rt.settings.default_model)
            await ctl.window.reload_tasks()
            panel = ctl.window.open_task(task_id)
            await panel.loaded.wait()
            gc.unfreeze()  # first without the freeze app/main.py does
            plain = []
            for _ in range(5):
                t = time.perf_counter()
                gc.collect()
                plain.append(time.perf_counter() - t)
            gc.freeze()
            frozen = []
            for _ in range(5):
                t = time.perf_counter()
                gc.collect()
                frozen.append(time.perf_counter() - t)
            gc.unfreeze()
            objects = len(gc.get_objects())
        finally:
            await ctl.shutdown()
    return (f"(f) full gc with a 2,000-message task open ({objects:,} tracked objects): "
            f"{spread(plain, 1000, 'ms', 1)}; after gc.freeze(): {spread(frozen, 1000, 'ms', 1)}")


async def _sidebar(counts: list[int], reps: int) -> list[str]:
    from tests.support.seed import seed_tasks

    lines = []
    for count in counts:
        with tempfile.TemporaryDirectory() as home:
            ctl = await _app(home, {})
            try:
                await seed_tasks(ctl.rt, count, model=ctl.rt.settings.default_model)
                window, sidebar = ctl.window, ctl.window.sidebar
                fills, rss, reads = [], [], []
                for _ in range(reps):
                    t = time.perf_counter()
                    await ctl.rt.list_tasks()
                    reads.append(time.perf_counter() - t)
                    sidebar.set_tasks([], set())  # each rep fills the list from nothing, as a launch does
                    sidebar.list.viewport().repaint()
                    gc.collect()
                    before = rss_mb()
                    t = time.perf_counter()
                    await window.reload_tasks()
                    sidebar.list.viewport().repaint()
                    fills.append(time.perf_counter() - t)
                    gc.collect()
                    rss.append(rss_mb() - before)
                    if sidebar.model.rowCount() != count:
                        raise SystemExit(f"the sidebar shows {sidebar.model.rowCount()} tasks, not {count}")
                lines.append(f"(g) sidebar of {count:>5,} tasks → filled and painted {spread(fills, 1000, 'ms', 1)}, "
                             f"RSS added {spread(rss, 1, 'MB', 1)} | runtime: task list read "
                             f"{spread(reads, 1000, 'ms', 1)}")
            finally:
                await ctl.shutdown()
    return lines


def main() -> None:
    import qasync
    from PySide6.QtWidgets import QApplication

    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--only", default="abcdefg", help="the parts to run, e.g. --only de")
    parser.add_argument("--rss-probe", nargs=2, metavar=("HOME", "TASK"), help=argparse.SUPPRESS)  # (c)'s probe
    args = parser.parse_args()
    if args.rss_probe:
        app = QApplication.instance() or QApplication(sys.argv[:1])
        app.setQuitOnLastWindowClosed(False)
        qasync.run(_probe_open(*args.rss_probe))
        return
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if "a" in args.only:
        bench_launch(args.reps, 100 if args.quick else 1000)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)

    async def in_app() -> None:
        if "b" in args.only:
            r = await _stream(args.deltas)
            lag = r["lags"]
            print(f"(b) {args.deltas:,} deltas into an open panel in {lag['elapsed']:.2f} s: loop lag p99 "
                  f"{lag['p99'] * 1000:.1f} ms, worst {lag['worst'] * 1000:.1f} ms; {r['events']:,} coalesced "
                  f"events → {r['batches']} batches in {r['frames']:.0f} frames")
        if "c" in args.only:
            for line in await _open_long([250, 1000] if args.quick else [250, 1000, 2000, 10_000], args.reps):
                print(line)
        if "d" in args.only:
            turns = [await _turns(100 if args.quick else 500) for _ in range(args.reps)]
            print(f"(d) {turns[0]['n']} turns in one open task, {args.reps} reps: last 50 / first 50 "
                  f"{spread([t['ratio'] for t in turns], unit='', digits=2)} (goal <= 1.2), RSS growth "
                  f"{spread([t['grew'] for t in turns], unit='MB', digits=1)} (goal <= 30); "
                  f"{turns[0]['rendered']} messages rendered; per turn first 50 "
                  f"{spread([t['first'] for t in turns], 1000, 'ms', 1)}, last 50 "
                  f"{spread([t['last'] for t in turns], 1000, 'ms', 1)} | runtime only: last/first "
                  f"{spread([t['bare_ratio'] for t in turns], unit='', digits=2)}, RSS "
                  f"{spread([t['bare_rss'] for t in turns], unit='MB', digits=1)}")
        if "e" in args.only:
            streams = [await _four_streams(1000 if args.quick else 5000) for _ in range(args.reps)]
            print(f"(e) 4 tasks streaming ({streams[0]['rate']:.0f} tokens/s each), one visible, {args.reps} reps: "
                  f"loop lag p99 {spread([s['p99'] for s in streams], 1000, 'ms', 1)} (goal <= 16), worst "
                  f"{spread([s['worst'] for s in streams], 1000, 'ms', 1)}")
        if "f" in args.only:
            print(await _gc())
        if "g" in args.only:
            for line in await _sidebar([20, 100 if args.quick else 1000], args.reps):
                print(line)

    qasync.run(in_app())
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
