"""What an installed app needs to be supportable (issue 17): a rotating log file in the platform's log folder,
the version in About, and a startup report that names the tasks it found (the installer smoke test reads it)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import platformdirs
from PySide6.QtWidgets import QApplication, QMessageBox

from app.core.logs import LOG_BACKUPS, LOG_BYTES, setup_logging
from app.widgets import dialogs
from runtime.api import Runtime

ROOT = Path(__file__).resolve().parents[2]


def _start_app(env: dict[str, str], *args: str) -> dict:
    env = dict(env, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "app", "--no-tray", "--report-startup", "exit", *args],
                          capture_output=True, text=True, timeout=90, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["error"] is None
    return report


def test_a_fresh_account_gets_data_and_log_in_the_platform_folders(tmp_path, monkeypatch):
    # A user who never ran Hearth: only HOME, no XDG overrides, no HEARTH_HOME, no --home.
    for var in ("HEARTH_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    data = Path(platformdirs.user_data_dir("Hearth", appauthor=False))
    logs = Path(platformdirs.user_log_dir("Hearth", appauthor=False))
    assert tmp_path in data.parents and tmp_path in logs.parents

    _start_app(dict(os.environ))

    assert (data / "hearth.sqlite3").is_file()
    text = (logs / "hearth.log").read_text()
    assert f"Hearth {importlib.metadata.version('hearth')} starting" in text


async def test_an_explicit_data_folder_keeps_its_log_and_the_report_names_its_tasks(tmp_path):
    rt = await Runtime.open(tmp_path)
    try:
        task = await rt.create_task(title="Kept")
    finally:
        await rt.aclose()
    env = {k: v for k, v in os.environ.items() if k != "HEARTH_HOME"}

    report = await asyncio.to_thread(_start_app, env, "--home", str(tmp_path))

    assert report["tasks"] == [task.id]
    assert "starting" in (tmp_path / "logs" / "hearth.log").read_text()


@contextlib.contextmanager
def _app_logging(home: Path):
    """The app's logging set up as `hearth-app --home HOME` does, undone afterwards; yields the log file."""
    root = logging.getLogger()
    saved = (root.level, list(root.handlers), sys.excepthook)
    try:
        yield setup_logging(False, home)
    finally:
        for handler in root.handlers[:]:
            if handler not in saved[1]:
                root.removeHandler(handler)
                handler.close()
        root.setLevel(saved[0])
        sys.excepthook = saved[2]


def test_the_log_rotates_and_keeps_a_bounded_number_of_files(tmp_path):
    with _app_logging(tmp_path) as path:
        line = "x" * 1000
        for _ in range(LOG_BYTES * (LOG_BACKUPS + 2) // len(line)):
            logging.getLogger("app.test").info(line)
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["hearth.log", *(f"hearth.log.{i}" for i in range(1, LOG_BACKUPS + 1))]
    assert all(p.stat().st_size <= LOG_BYTES for p in path.parent.iterdir())


async def test_about_shows_the_installed_version_and_the_folders(launch):
    ctl = await launch()
    ctl.window.actions_by_name["About Hearth"].trigger()
    boxes = [w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]
    assert len(boxes) == 1
    try:
        assert importlib.metadata.version("hearth") in boxes[0].text()
        assert f"Data folder: <code>{ctl.home}</code>" in boxes[0].informativeText()
        assert f"Logs: <code>{ctl.home / 'logs'}</code>" in boxes[0].informativeText()
    finally:
        boxes[0].close()
    assert dialogs.app_version() == importlib.metadata.version("hearth")


async def test_a_configured_key_in_an_error_the_app_logs_never_reaches_the_log_file(launch, home, monkeypatch):
    # A provider key under a name no filter would guess, configured the way a person does it.
    key_var, key = f"ZQ{uuid.uuid4().hex[:6].upper()}_AUTH", f"cnry{uuid.uuid4().hex}"
    monkeypatch.setenv(key_var, key)
    (home / "settings.json").write_text(json.dumps({"providers": [
        {"id": "remote", "kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key_ref": f"env:{key_var}"}]}))
    with _app_logging(home) as path:
        ctl = await launch()

        # Any unexpected failure whose text carries the key (here: a client error quoting the request URL)
        # takes the bridge's path (message and traceback), and so does an uncaught exception in a Qt slot.
        async def failing_action() -> None:
            raise RuntimeError(f"GET http://127.0.0.1:9/v1/models?key={key} failed")

        await asyncio.gather(ctl.bridge.run(failing_action()), return_exceptions=True)
        try:
            raise ValueError(f"slot failed with {key}")
        except ValueError as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)

    text = path.read_text()
    assert path == home / "logs" / "hearth.log"
    assert key not in text
    assert text.count("models?key=[redacted] failed") == 2  # the bridge's message and the action's traceback
    assert "in failing_action" in text
    assert "uncaught exception" in text and "ValueError: slot failed with [redacted]" in text
