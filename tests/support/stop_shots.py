"""Screenshot of Stop while an approval waits: the request closed as "stopped" and the composer ready for the next
message. Run under a display (Xvfb, the xcb platform):

    xvfb-run -a -s "-screen 0 1280x800x24" env QT_QPA_PLATFORM=xcb \
        .venv/bin/python -m tests.support.stop_shots resources/screenshots
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


async def shots(out: Path) -> None:
    from app.shell.application import HearthApp
    from app.widgets import theme

    out.mkdir(parents=True, exist_ok=True)
    theme.apply("light")
    tmp = Path(tempfile.mkdtemp(prefix="hearth-stop-shots-"))
    try:
        model = ScriptedModel([["I'll tidy the notes into one file first.",
                                Call("write_file", {"path": "notes/all.md", "content": "# Notes\n"})]])
        ctl = HearthApp(tmp / "home", providers={"scripted": model}, use_tray=False, preload_model=False)
        await ctl.start()
        ctl.window.resize(1100, 720)
        task = await ctl.bridge.create_task(title="Tidy my notes", model=MODEL)
        await ctl.window.reload_tasks()
        panel = ctl.window.open_task(task.id)
        await asyncio.wait_for(panel.loaded.wait(), 10)
        panel.composer.edit.setPlainText("Put my notes into one file.")
        panel.composer.submit()
        await until(lambda: panel.waiting is not None and panel.settled, what="the approval")
        panel.composer.stop.click()
        await until(lambda: panel.waiting is None and [c.state for c in panel.conversation.cards()] == ["stopped"]
                    and panel.composer.stop.isHidden(), what="the request closed as stopped")
        panel.focus_composer()
        await asyncio.sleep(0.8)  # lets Qt paint; processEvents() here would re-enter the qasync loop
        ctl.window.grab().save(str(out / "32-approval-stopped.png"))
        await ctl.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from tests.support.qt_helpers import run_shots

    sys.exit(run_shots(shots))
