"""No dead ends: a broken settings.json opens the app anyway, says what is wrong, and every way out works; a
folder or file the desktop cannot open (no file manager: the offscreen platform has none) shows its path with
a Copy button."""

from __future__ import annotations

import sys

from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QApplication, QDialog, QLineEdit, QPushButton

from app.shell.application import HearthApp
from runtime.providers.scripted import ScriptedModel
from tests.app.test_memory_knowledge_ui import Opened
from tests.support.qt_helpers import MODEL, open_task, until


def shown_paths(window) -> list[tuple[QDialog, str]]:
    """The open dialogs of the window that show a path, with that path."""
    return [(d, d.findChild(QLineEdit).text()) for d in window.findChildren(QDialog)
            if d.isVisible() and d.findChild(QLineEdit) is not None]


def copy_button(dialog: QDialog) -> QPushButton:
    return next(b for b in dialog.findChildren(QPushButton) if b.text() == "Copy")


async def test_a_broken_settings_file_opens_a_page_with_ways_out_and_no_action_raises(home, monkeypatch):
    raised = []
    monkeypatch.setattr(sys, "excepthook", lambda *exc: raised.append(exc))
    (home / "settings.json").write_text('{"providers": [oops]}')
    ctl = HearthApp(home, providers={"scripted": ScriptedModel()}, use_tray=False, preload_model=False)
    try:
        await ctl.start()
        window = ctl.window
        assert ctl.startup_error and "settings.json is not valid JSON" in ctl.startup_error
        assert window.stack.currentWidget() is window.problem
        assert set(window.problem.buttons) == {"Reset to defaults", "Open settings.json", "Retry"}
        for name, action in window.actions_by_name.items():
            if name not in ("Quit", "Close Window"):
                action.trigger()
        assert raised == []
        assert window.stack.currentWidget() is window.problem  # still explaining, not broken

        window.problem.buttons["Open settings.json"].click()  # no program answers here: the path is shown
        ((dialog, path),) = shown_paths(window)
        assert path == str(home / "settings.json") and dialog.windowTitle() == "Open file"
        dialog.close()

        window.problem.buttons["Retry"].click()  # still broken: the page stays
        await until(lambda: window.problem.buttons.get("Retry") is not None, what="page still there")
        window.problem.buttons["Reset to defaults"].click()
        await until(lambda: ctl.bridge is not None, what="started with the defaults")
        kept = list(home.glob("settings.json.broken-*"))
        assert len(kept) == 1 and kept[0].read_text() == '{"providers": [oops]}'
        assert not (home / "settings.json").exists()
        assert window.stack.currentWidget() is window.welcome
        await until(lambda: window.new_task() is not None, what="a new task can be made")
        assert raised == []
    finally:
        await ctl.shutdown()


async def test_a_folder_no_file_manager_opens_is_shown_with_its_path_and_a_copy_button(launch, home):
    ctl = await launch()
    window = ctl.window
    task = await ctl.bridge.create_task(title="Photos", model=MODEL)
    panel = await open_task(ctl, task.id)
    QApplication.clipboard().clear()
    window.actions_by_name["Open Workspace Folder"].trigger()
    ((dialog, path),) = shown_paths(window)
    assert path == panel.info.workspace and dialog.windowTitle() == "Open folder"
    assert not dialog.isModal()  # the app goes on behind it
    copy = copy_button(dialog)
    copy.click()
    assert QApplication.clipboard().text() == panel.info.workspace and copy.text() == "Copied"
    assert dialog.isVisible()  # Copy keeps it open; Close closes it
    dialog.close()
    assert shown_paths(window) == []

    window.actions_by_name["Open Data Folder"].trigger()
    ((dialog, path),) = shown_paths(window)
    assert path == str(ctl.rt.home)
    dialog.close()

    opened = Opened()  # where a file manager answers, it gets the folder and nothing else is shown
    QDesktopServices.setUrlHandler("file", opened, "open")
    try:
        window.actions_by_name["Open Workspace Folder"].trigger()
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert [u.toLocalFile() for u in opened.urls] == [panel.info.workspace]
    assert shown_paths(window) == []
