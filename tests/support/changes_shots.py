"""Screenshots of a turn's changes (issue 32): the "3 files changed" link under an answer opening the list with a
text file's diff, and Undo refused because the person edited one of the files since. Run under a display (Xvfb,
the xcb platform):

    xvfb-run -a -s "-screen 0 1280x800x24" env QT_QPA_PLATFORM=xcb \
        .venv/bin/python -m tests.support.changes_shots resources/screenshots
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
PLAN = "# Trip plan\n\nDay 1: arrive in Lyon\nDay 2: Croix-Rousse market\nDay 3: train to Annecy\n"
NEW_PLAN = "# Trip plan\n\nDay 1: arrive in Lyon\nDay 2: Croix-Rousse market, then the Traboules\nDay 3: lake day\n"


async def open_changes(panel):
    """The answer's "N files changed" link, clicked: the dialog once it shows the first file's diff."""
    await until(lambda: any(getattr(i, "changes", None) is not None and i.changes.isVisible()
                            for i in panel.conversation.items.values()), what="the files-changed link")
    item = next(i for i in panel.conversation.items.values() if getattr(i, "changes", None) is not None
                and i.changes.isVisible())
    item.changes.click()
    await until(lambda: panel.changes_dialog is not None and panel.changes_dialog.diff.toPlainText(),
                what="the changes dialog with a diff")
    return panel.changes_dialog


async def changed_turn(ctl, model: ScriptedModel):
    """A task whose second turn edits plan.md and writes packing.md with file tools and removes draft.txt with
    `rm` in a shell; its panel, settled."""
    task = await ctl.bridge.create_task(title="Plan the Lyon trip", model=MODEL, approval="full_auto")
    ws = Path((await ctl.rt.core.store.get_task(task.id))["workspace"])
    (ws / "plan.md").write_text(PLAN)
    (ws / "draft.txt").write_text("old notes\n")
    await ctl.window.reload_tasks()
    panel = ctl.window.open_task(task.id)
    await asyncio.wait_for(panel.loaded.wait(), 10)
    model.add_steps(["I'll update the plan, add a packing list and remove the old draft.",
                     Call("write_file", {"path": "plan.md", "content": NEW_PLAN})],
                    [Call("write_file", {"path": "packing.md", "content": "- rain jacket\n- walking shoes\n"})],
                    [Call("run_shell", {"command": "rm draft.txt"})],
                    ["Done: the plan has the Traboules and a lake day, packing.md lists what to bring, and the "
                     "old draft is gone."])
    panel.composer.edit.setPlainText("Update the plan and tidy up.")
    panel.composer.submit()
    await until(lambda: panel.bridge.is_running(task.id), what="the turn's start")
    await until(lambda: panel.settled and not panel.bridge.is_running(task.id), what="the turn's end")
    return task, ws, panel


async def shots(out: Path) -> None:
    from PySide6.QtWidgets import QApplication

    from app.shell.application import HearthApp
    from app.widgets import theme

    out.mkdir(parents=True, exist_ok=True)
    theme.apply("light")
    tmp = Path(tempfile.mkdtemp(prefix="hearth-changes-shots-"))
    try:
        model = ScriptedModel()
        ctl = HearthApp(tmp / "home", providers={"scripted": model}, use_tray=False, preload_model=False)
        await ctl.start()
        ctl.window.resize(1100, 720)
        ctl.window.move(0, 0)  # the shots grab the screen (the window and its dialogs) at the window's place
        _task, ws, panel = await changed_turn(ctl, model)
        dialog = await open_changes(panel)
        dialog.files.setCurrentRow(2)  # plan.md, modified
        await until(lambda: "Traboules" in dialog.diff.toPlainText(), what="plan.md's diff")
        dialog.resize(780, 420)
        dialog.move(300, 110)  # the answer's "3 files changed" link stays in sight below it
        await asyncio.sleep(0.8)  # lets Qt paint; processEvents() here would re-enter the qasync loop
        QApplication.primaryScreen().grabWindow(0, 0, 0, 1100, 720).save(str(out / "46-turn-changes-diff.png"))

        (ws / "packing.md").write_text("- rain jacket\n- walking shoes\n- my own addition\n")
        dialog.undo.click()
        await until(lambda: dialog.refusal is not None and dialog.refusal.isVisible(), what="the refusal")
        dialog.refusal.move(330, 300)
        await asyncio.sleep(0.8)
        QApplication.primaryScreen().grabWindow(0, 0, 0, 1100, 720).save(str(out / "47-undo-refused.png"))
        await ctl.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from tests.support.qt_helpers import run_shots

    sys.exit(run_shots(shots))
