"""Installed app vs virtualenv, in one run (issue 17): launch → first paint of the frozen `hearth-app` beside
`python -m app`, alternating, each on a fresh data folder (offscreen). Goal for the frozen app: <= 1.0 s.

    .venv/bin/python tests/benchmarks/bench_bundle_launch.py --app /opt/hearth/hearth-app [--rounds 5]

Launch → first paint is measured from just before the process starts to the main window's first paint event
(the app's `--report-startup exit` JSON line), as in bench_app.py; "ready" is the runtime opened and tasks shown.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def launch(cmd: list[str]) -> tuple[float, float]:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    env.pop("HEARTH_HOME", None)
    with tempfile.TemporaryDirectory() as home:
        t0 = time.time()
        done = subprocess.run([*cmd, "--home", home, "--no-tray", "--report-startup", "exit"],
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
        if done.returncode != 0:
            raise SystemExit(f"{cmd[0]} failed: {done.stderr[-2000:]}")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        if report["error"]:
            raise SystemExit(f"{cmd[0]} could not start: {report['error']}")
        return report["first_paint"] - t0, report["ready"] - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--app", required=True, help="the frozen hearth-app executable")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    kinds = {"frozen": [args.app], "venv": [sys.executable, "-m", "app"]}
    launch(kinds["frozen"])  # one unmeasured launch each: the first reads the files from disk
    launch(kinds["venv"])
    paint: dict[str, list[float]] = {k: [] for k in kinds}
    ready: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for kind, cmd in kinds.items():
            p, r = launch(cmd)
            paint[kind].append(p)
            ready[kind].append(r)
    for kind in kinds:
        print(f"{kind:>6}: launch → first paint median {statistics.median(paint[kind]):.3f} s "
              f"(min {min(paint[kind]):.3f}, max {max(paint[kind]):.3f}); launch → ready median "
              f"{statistics.median(ready[kind]):.3f} s; {args.rounds} launches")
    med = statistics.median(paint["frozen"])
    ratio = med / statistics.median(paint["venv"])
    print(f"frozen / venv first paint: {ratio:.2f}; frozen goal <= 1.0 s: {'OK' if med <= 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
