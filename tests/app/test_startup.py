"""The real entry point, in a subprocess: the window paints before the runtime (and openai / mcp / llama_cpp)
is imported, and SIGTERM / SIGINT shut the app down cleanly without asking."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    env.pop("HEARTH_HOME", None)
    return env


def _cmd(home: Path, mode: str) -> list[str]:
    return [sys.executable, "-m", "app", "--home", str(home), "--no-tray", "--report-startup", mode]


def test_window_paints_before_the_runtime_is_imported(tmp_path):
    done = subprocess.run(_cmd(tmp_path, "exit"), capture_output=True, text=True, timeout=60, cwd=ROOT, env=_env())
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["error"] is None
    assert report["heavy_at_paint"] == []  # runtime.api, openai, mcp, llama_cpp all came later
    assert report["t0"] <= report["first_paint"] <= report["ready"]
    assert (tmp_path / "hearth.sqlite3").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_quit_cleanly_without_asking(tmp_path, sig):
    proc = subprocess.Popen(_cmd(tmp_path, "stay"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=_env())
    try:
        line = proc.stdout.readline()
        assert json.loads(line)["error"] is None
        proc.send_signal(sig)
        assert proc.wait(timeout=20) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
