"""Screenshots of issue 32's background commands and wake-ups: a task waiting until a time (the panel's "Waiting
until …" with Resume now and Cancel wait, the sidebar's row saying when it wakes), and its background command's
output so far. Run under a display (Xvfb, the xcb platform):

    xvfb-run -a -s "-screen 0 1280x800x24" env QT_QPA_PLATFORM=xcb \
        .venv/bin/python -m tests.support.wakeup_shots resources/screenshots
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
BUILD = ("for i in $(seq 1 40); do echo \"[$i/40] compiling src/module_$i.c\"; sleep 0.1; done; "
         "echo linking hearth-demo; sleep 600")


async def shots(out: Path) -> None:
    from app.shell.application import HearthApp
    from app.widgets import theme

    out.mkdir(parents=True, exist_ok=True)
    theme.apply("light")
    tmp = Path(tempfile.mkdtemp(prefix="hearth-wakeup-shots-"))
    try:
        model = ScriptedModel([
            ["I'll start the build in the background.", Call("run_shell", {"command": BUILD, "background": True})],
            ["The build is running; it takes about half an hour, so I'll look at it again then.",
             Call("wait", {"seconds": 1800, "note": "the build takes about half an hour"})],
        ])
        ctl = HearthApp(tmp / "home", providers={"scripted": model}, use_tray=False, preload_model=False)
        await ctl.start()
        ctl.window.resize(1100, 720)
        task = await ctl.bridge.create_task(title="Build the demo", model=MODEL, approval="full_auto")
        await ctl.window.reload_tasks()
        panel = ctl.window.open_task(task.id)
        await asyncio.wait_for(panel.loaded.wait(), 10)
        panel.composer.edit.setPlainText("Build the demo and tell me when it is done.")
        panel.composer.submit()
        box = panel.activity
        await until(lambda: box.wake_row.isVisible() and box.commands and panel.settled, timeout=15,
                    what="the wait and the command")
        await asyncio.sleep(1.0)  # lets Qt paint; processEvents() here would re-enter the qasync loop
        ctl.window.grab().save(str(out / "48-task-waiting-until.png"))
        next(b for b in box.findChildren(type(box.resume)) if b.text() == "Output").click()
        await until(lambda: "linking" in box.output.toPlainText(), timeout=15, what="the output so far")
        await asyncio.sleep(1.0)
        ctl.window.grab().save(str(out / "49-background-command-output.png"))
        await ctl.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from tests.support.qt_helpers import run_shots

    sys.exit(run_shots(shots))
