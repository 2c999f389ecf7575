"""Screenshot of a task's deliverables: the Deliverables button in the task panel's head and its list, a report
delivered twice (the older version under the latest) and a folder delivered as a zip. Run under a display (Xvfb,
the xcb platform):

    xvfb-run -a -s "-screen 0 1280x800x24" env QT_QPA_PLATFORM=xcb \
        .venv/bin/python -m tests.support.deliverables_shots resources/screenshots
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
REPORT = "# Q3 report\n\nRevenue grew 12% over Q2; costs held flat.\n"


async def shots(out: Path) -> None:
    from PySide6.QtWidgets import QApplication

    from app.shell.application import HearthApp
    from app.widgets import theme

    out.mkdir(parents=True, exist_ok=True)
    theme.apply("light")
    tmp = Path(tempfile.mkdtemp(prefix="hearth-deliverables-shots-"))
    try:
        model = ScriptedModel([
            ["I'll write the report and a small page for it.",
             Call("write_file", {"path": "report.md", "content": "# Q3 report\n\nDraft.\n"}),
             Call("write_file", {"path": "site/index.html", "content": "<h1>Q3</h1>"}),
             Call("deliver", {"path": "report.md", "note": "First draft of the Q3 report"}),
             Call("deliver", {"path": "site", "note": "The report as a web page"})],
            ["Here are the first draft and the page."],
            [Call("write_file", {"path": "report.md", "content": REPORT}),
             Call("deliver", {"path": "report.md", "note": "Q3 report with the revenue figures"})],
            ["I added the revenue figures: the new version is in Deliverables, the first draft is kept."],
        ])
        ctl = HearthApp(tmp / "home", providers={"scripted": model}, use_tray=False, preload_model=False)
        await ctl.start()
        ctl.window.move(0, 0)
        ctl.window.resize(1100, 720)
        task = await ctl.bridge.create_task(title="Q3 report", model=MODEL, approval="full_auto")
        await ctl.window.reload_tasks()
        panel = ctl.window.open_task(task.id)
        await asyncio.wait_for(panel.loaded.wait(), 10)
        for n, text in enumerate(("Write the Q3 report, and a web page of it.", "Add the revenue figures."), 1):
            panel.composer.edit.setPlainText(text)
            panel.composer.submit()
            await until(lambda n=n: len(panel.conversation.assistant_items()) == n
                        and not ctl.bridge.is_running(task.id), what=f"turn {n}", timeout=20)
        await until(lambda: panel.deliverables.text() == "Deliverables (3)", what="the count")
        dlg = panel.show_deliverables()
        await until(lambda: dlg.tree.topLevelItemCount() == 2, what="the list")
        dlg.tree.expandAll()
        dlg.resize(720, 260)
        dlg.move(260, 150)
        await asyncio.sleep(0.8)  # lets Qt paint; processEvents() here would re-enter the qasync loop
        screen = QApplication.primaryScreen()
        geometry = ctl.window.frameGeometry()
        screen.grabWindow(0, geometry.x(), geometry.y(), geometry.width(), geometry.height()).save(
            str(out / "44-deliverables.png"))
        await ctl.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from tests.support.qt_helpers import run_shots

    sys.exit(run_shots(shots))
