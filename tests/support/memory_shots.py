"""Screenshots of issue 28's memory, approval, context window and plan fixes: Settings ▸ Memory just after a delete
(Undo offered beside New), a memory approval saying what it touches, the provider form's Context window, and a
plan to approve after a model first answered in words. Run under a display (Xvfb):

    xvfb-run -a -s "-screen 0 1280x800x24" env QT_QPA_PLATFORM=xcb \
        .venv/bin/python -m tests.support.memory_shots resources/screenshots
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from runtime.providers.scripted import Call, ScriptedModel
from tests.support.qt_helpers import until

MODEL = "scripted/demo"


async def _settle(seconds: float) -> None:
    await asyncio.sleep(seconds)  # lets Qt paint; processEvents() here would re-enter the qasync loop


async def _answered(ctl, title: str, text: str, *, planning: bool = False, kind: str = "approval"):
    """A task whose first input is `text`, open in the window once it waits with a request of `kind`."""
    task = await ctl.bridge.create_task(title=title, model=MODEL, planning=planning)
    await ctl.window.reload_tasks()
    panel = ctl.window.open_task(task.id)
    await _settle(0.3)
    panel.composer.edit.setPlainText(text)
    panel.composer.submit()
    await until(lambda: panel.waiting is not None and panel.waiting.kind == kind and panel.settled, what=title)
    await _settle(0.8)
    return panel


async def shots(out: Path) -> None:
    from app.shell.application import HearthApp
    from app.widgets import theme

    out.mkdir(parents=True, exist_ok=True)
    theme.apply("light")
    tmp = Path(tempfile.mkdtemp(prefix="hearth-memory-shots-"))
    try:
        model = ScriptedModel([
            [Call("memory", {"command": "create", "path": "trains.md",
                             "content": "# Travels by train\nNever books flights."})],
            ["I would list what is in the folder, sort the photos by date, then write a short index."],
            [Call("submit_plan", {"summary": "Sort the photos by date, then index them.",
                                  "steps": ["List the photos", "Rename them by date", "Write index.md"]})],
        ])
        ctl = HearthApp(tmp / "home", providers={"scripted": model}, use_tray=False, preload_model=False)
        await ctl.start()
        rt = ctl.rt
        await rt.memory.save("tea.md", "# Prefers green tea\nNo sugar, a slice of lemon.")
        await rt.memory.add("units", "# Uses metric units\nKilometres and degrees Celsius.")
        ctl.window.resize(1100, 720)

        await _answered(ctl, "Travel", "Remember that I always travel by train.")
        ctl.window.grab().save(str(out / "34-memory-approval.png"))
        await _answered(ctl, "Photos", "Sort out my holiday photos.", planning=True, kind="plan")
        ctl.window.grab().save(str(out / "37-plan-after-words.png"))

        settings = ctl.open_settings()
        settings.resize(900, 600)
        settings.providers.add_preset("ollama", ["llama3.2"])
        settings.providers.context.setValue(32768)
        await _settle(0.6)
        settings.grab().save(str(out / "36-provider-context-window.png"))
        settings.providers.context.setValue(0)
        settings.tabs.setCurrentWidget(settings.memory)
        page = settings.memory
        await until(lambda: page.list.count() == 2, what="the memories")
        page.list.setCurrentRow(1)
        await until(lambda: page.delete.isEnabled(), what="one chosen")
        page.delete.click()
        next(b for b in page.confirm_box.buttons() if b.text() == "Delete").click()
        await until(lambda: page.undo.isVisible(), what="Undo offered")
        await _settle(0.5)
        settings.grab().save(str(out / "35-memory-deleted-undo.png"))
        settings.close_without_asking()
        await ctl.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from tests.support.qt_helpers import run_shots

    sys.exit(run_shots(shots))
