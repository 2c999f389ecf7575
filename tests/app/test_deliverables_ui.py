"""A task's deliverables in the window, on a real runtime whose turns call `deliver` through the OpenAI-compatible
test server: the panel's button counts them as they come, the dialog lists each path's latest version with the
older ones under it, Save as… writes the chosen version out byte for byte, Open and Show in folder reach the kept
copy, an export carries them, and deleting the task says how many go with it."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.widgets.dialogs import PathDialog
from tests.runtime.test_deliveries import calls
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply
from tests.support.qt_helpers import open_task, type_and_send, until, wait_turns


async def test_deliverables_are_listed_saved_exported_and_deleted_with_the_task(launch, home, tmp_path):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(
            calls(("write_file", {"path": "report.md", "content": "# Draft one\n"}),
                  ("deliver", {"path": "report.md", "note": "First draft of the report"})),
            Reply(chunks=["Delivered", " the first draft."], delay=0.5),  # the turn goes on after the delivery
            calls(("write_file", {"path": "report.md", "content": "# Draft two, longer\n"}),
                  ("deliver", {"path": "report.md", "note": "Second draft"})),
            Reply(chunks=["Delivered again."]),
        )
        ctl = await launch()
        task = await ctl.bridge.create_task(title="Quarterly report", approval="full_auto")
        panel = await open_task(ctl, task.id)
        assert not panel.deliverables.isVisibleTo(panel)  # nothing delivered yet: no button
        type_and_send(panel, "write the report")
        await until(lambda: panel.deliverables.isVisibleTo(panel), what="the Deliverables button")
        assert panel.deliverables.text() == "Deliverables (1)"
        assert ctl.bridge.is_running(task.id)  # counted when the call was done, not when the turn ended
        await wait_turns(ctl, panel)

        dlg = panel.show_deliverables()
        await until(lambda: dlg.tree.topLevelItemCount() == 1, what="the first deliverable listed")
        type_and_send(panel, "make it longer")
        await wait_turns(ctl, panel, 2)
        await until(lambda: panel.deliverables.text() == "Deliverables (2)", what="the count")
        await until(lambda: dlg.tree.topLevelItem(0).childCount() == 1, what="the open dialog read again")
        latest = dlg.tree.topLevelItem(0)
        assert [latest.text(c) for c in (0, 1, 2, 4)] == ["report.md", "2 · 1 older", "20 B", "Second draft"]
        older = latest.child(0)
        assert [older.text(c) for c in (0, 1, 4)] == ["", "1", "First draft of the report"]
        assert dlg.tree.currentItem() is latest and dlg.save_button.isEnabled()

        # Save as… the older version: offered under a name that says which, written out byte for byte.
        dlg.tree.setCurrentItem(older)
        save = dlg.save_selected()
        assert isinstance(save, QFileDialog) and Path(save.selectedFiles()[0]).name == "report (version 1).md"
        target = tmp_path / "kept.md"
        save.fileSelected.emit(str(target))
        await until(target.exists, what="the older version saved")
        assert target.read_bytes() == b"# Draft one\n"
        await until(lambda: str(target) in dlg.status.text(), what="where it went")
        versions = await ctl.rt.deliveries.list(task.id)
        assert Path(versions[1].file).read_bytes() == b"# Draft one\n"  # the kept copy is still version 1
        assert (Path(task.workspace) / "report.md").read_text() == "# Draft two, longer\n"

        # Open and Show in folder reach the kept copy (offscreen nothing opens it: its path is shown to copy).
        dlg.tree.setCurrentItem(latest)
        QTest.mouseClick(dlg.open_button, Qt.MouseButton.LeftButton)
        assert isinstance(dlg.path_dialog, PathDialog) and dlg.path_dialog.field.text() == versions[0].file
        QTest.mouseClick(dlg.folder_button, Qt.MouseButton.LeftButton)
        assert dlg.path_dialog.field.text() == str(Path(versions[0].file).parent)

        # An export writes every version beside it and names each.
        await ctl.window.export_to(task.id, str(tmp_path / "q.md"), "md")
        await ctl.window.export_to(task.id, str(tmp_path / "q.json"), "json")
        md = (tmp_path / "q.md").read_text()
        assert "## Deliverables" in md
        assert "`report.md` version 2 · 20 bytes" in md and "→ [report.md](<q deliverables/report.md>)" in md
        assert "[report (version 1).md](<q deliverables/report (version 1).md>)" in md
        assert (tmp_path / "q deliverables" / "report (version 1).md").read_bytes() == b"# Draft one\n"
        exported = json.loads((tmp_path / "q.json").read_text())["deliveries"]
        assert [(d["version"], d["exported"], d["note"]) for d in exported] == [
            (2, "q deliverables/report.md", "Second draft"),
            (1, "q deliverables/report (version 1).md", "First draft of the report")]
        assert "file" not in exported[0]  # where the data folder keeps it is no business of the export

        # Deleting the task says what goes with it.
        box = await ctl.window.delete_task(task.id)
        assert isinstance(box, QMessageBox)
        assert "Its 2 deliverables (what it delivered, every version) will be deleted too" in box.informativeText()
        QTest.mouseClick(next(b for b in box.buttons() if b.text() == "Delete"), Qt.MouseButton.LeftButton)
        await until(lambda: ctl.window.panel is None and task.id not in ctl.window.sidebar.rows, what="deleted")
        assert not (home / "deliveries" / task.id).exists()
