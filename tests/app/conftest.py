"""Qt tests: offscreen platform, one QApplication, and a qasync event loop for every async test here.

The `pytest_asyncio_loop_factories` hook lives in this directory's conftest, so pytest-asyncio asks it only
for items under tests/app (it calls the hook through `item.ihook`); runtime tests keep plain asyncio.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
import qasync
from PySide6.QtWidgets import QApplication

from runtime.providers.scripted import ScriptedModel


def qt_app() -> QApplication:
    app = QApplication.instance() or QApplication(["hearth-tests"])
    app.setQuitOnLastWindowClosed(False)
    return app


@pytest.fixture(autouse=True)
def _application() -> QApplication:
    """Widgets need the QApplication: a plain (not async) test that runs first, alone, gets it here."""
    return qt_app()


# Every qasync loop stays referenced for the whole session. A closed loop's timer object may still have Qt
# timers registered; if a garbage collection in a worker thread (a later test's asyncio.to_thread) frees it,
# Qt cannot unregister them from that thread and the next processEvents() on the main thread crashes.
_loops: list[qasync.QEventLoop] = []


def _new_loop() -> qasync.QEventLoop:
    loop = qasync.QEventLoop(qt_app())
    _loops.append(loop)
    return loop


def pytest_asyncio_loop_factories(config, item):
    return {"qasync": _new_loop}


async def _quiesce(timeout: float = 5.0) -> None:
    """Wait for the app's short actions (DB reads, sends) to finish while the loop still runs. qasync's
    run_until_complete processes leftover Qt events after the loop stopped; a database callback run there
    fails with "no running event loop" and leaks its connection."""
    from app.core.util import pending_tasks

    deadline = time.monotonic() + timeout
    while any(not t.done() for t in pending_tasks(short_only=True)) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def _quiescing(fn):
    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        try:
            return await fn(*args, **kwargs)
        finally:
            await _quiesce()

    return wrapper


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        fn = getattr(item, "obj", None)
        if inspect.iscoroutinefunction(fn) and here in Path(str(item.fspath)).parents:
            item.obj = _quiescing(fn)


@pytest.fixture
async def launch(home):
    """Start the app (no tray) on a data folder with scripted models; shut everything down afterwards. The
    bundled model is not loaded at window open unless asked (`preload_model=True`): tests that run it are
    marked slow_model."""
    from app.shell.application import HearthApp

    started: list[HearthApp] = []

    async def _launch(model: ScriptedModel | None = None, tools=(), data=None, preload_model: bool = False,
                      **providers) -> HearthApp:
        models = {"scripted": model or ScriptedModel(), **providers}
        ctl = HearthApp(data or home, providers=models, tools=tools, use_tray=False, preload_model=preload_model)
        started.append(ctl)
        await ctl.start()
        assert ctl.startup_error is None, ctl.startup_error
        return ctl

    yield _launch
    for ctl in started:
        await ctl.shutdown()
