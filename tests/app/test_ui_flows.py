"""What a person does in the window: compose (keys, queue, attachments), answer a question, create, rename
and delete tasks, get notified, close the window while turns run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import shiboken6
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QDialog, QFileDialog, QMessageBox

from runtime.providers.scripted import Call, Delay, ScriptedModel
from tests.support.qt_helpers import MODEL, open_task, type_and_send, until, wait_turns


async def test_enter_sends_shift_enter_adds_a_line(launch):
    ctl = await launch(ScriptedModel([["ok"]]))
    task = await ctl.bridge.create_task(title="Keys", model=MODEL)
    panel = await open_task(ctl, task.id)
    edit = panel.composer.edit
    edit.setFocus()
    QTest.keyClicks(edit, "line one")
    QTest.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    QTest.keyClicks(edit, "line two")
    assert edit.toPlainText() == "line one\nline two"
    QTest.keyClick(edit, Qt.Key.Key_Return)
    assert edit.toPlainText() == ""
    await wait_turns(ctl, panel)
    messages = await ctl.rt.messages(task.id)
    assert messages[0].text == "line one\nline two"

    panel.composer.set_enter_sends(False)  # Settings → Enter sends off: Ctrl+Enter sends instead
    QTest.keyClicks(edit, "x")
    QTest.keyClick(edit, Qt.Key.Key_Return)
    assert edit.toPlainText() == "x\n"


async def test_input_while_busy_is_queued_and_runs_next(launch):
    model = ScriptedModel([["first ", Delay(0.6), "answer"], ["second answer"]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Queue", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "one")
    await until(lambda: panel.composer.running, what="running")
    assert panel.composer.send.text() == "Queue"
    type_and_send(panel, "two")
    await wait_turns(ctl, panel, 2)
    messages = await ctl.rt.messages(task.id)
    answers = [m for m in messages if m.role == "assistant"]
    assert [a.text for a in answers] == ["first answer", "second answer"]
    assert [panel.turn_text(a.turn_id) for a in answers] == ["first answer", "second answer"]


async def test_ask_user_is_answered_inline(launch):
    model = ScriptedModel([[Call("ask_user", {"question": "Which colour?"})], ["Blue it is."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Ask", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "paint it")
    await until(lambda: panel.waiting is not None, what="question shown")
    box = panel.waiting
    assert box.kind == "question"
    box.edit.setPlainText("blue")
    QTest.mouseClick(box.send, Qt.MouseButton.LeftButton)
    await until(lambda: panel.waiting is None, what="answered")
    await wait_turns(ctl, panel, 2)
    messages = await ctl.rt.messages(task.id)
    last = [m for m in messages if m.role == "assistant"][-1]
    await until(lambda: panel.turn_text(last.turn_id) == "Blue it is.", what="answer shown")


async def test_attachments_by_drop_are_sent_and_copied(launch, tmp_path):
    ctl = await launch(ScriptedModel([["got it"]]))
    task = await ctl.bridge.create_task(title="Files", model=MODEL)
    panel = await open_task(ctl, task.id)
    note = tmp_path / "note.txt"
    note.write_text("hello")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(note))])
    target = panel.composer.edit.viewport()
    enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                      Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, drop)
    assert panel.composer.attachments == [str(note)]
    type_and_send(panel, "read this")
    await wait_turns(ctl, panel)
    messages = await ctl.rt.messages(task.id)
    assert {"type": "attachment", "name": "note.txt", "text": "hello", "chars": 5, "kind": "text"} in messages[0].parts
    info = await ctl.rt.get_task(task.id)
    assert (Path(info.workspace) / "note.txt").read_text() == "hello"
    assert panel.composer.attachments == []


async def test_attach_opens_in_the_home_folder_and_adds_the_chosen_files(launch, tmp_path, monkeypatch):
    person = tmp_path / "person"  # a home that is surely not the folder the tests run from
    person.mkdir()
    (person / "plan.txt").write_text("the plan")
    monkeypatch.setenv("HOME", str(person))
    ctl = await launch(ScriptedModel([]))
    task = await ctl.bridge.create_task(title="Files", model=MODEL)
    panel = await open_task(ctl, task.id)
    panel.composer.attach.click()
    (dialog,) = panel.composer.findChildren(QFileDialog)
    try:
        assert dialog.isVisible() and Path(dialog.directory().absolutePath()) == person
        dialog.selectFile("plan.txt")
        dialog.accept()
        await until(lambda: panel.composer.attachments == [str(person / "plan.txt")], what="the chosen file")
    finally:
        if shiboken6.isValid(dialog):
            dialog.close()


async def test_new_task_dialog_creates_the_task_with_fixed_settings(launch):
    ctl = await launch(ScriptedModel([["Hello!"]]))
    dlg = ctl.window.new_task("Say hello")
    assert dlg.model.ref() == ctl.bridge.settings.default_model  # the default (bundled) model is preselected
    dlg.model.setEditText(MODEL)
    dlg.approval.setCurrentIndex(dlg.approval.findData("auto_edit"))
    dlg.planning.setChecked(True)
    QTest.mouseClick(dlg.create_button, Qt.MouseButton.LeftButton)
    await until(lambda: ctl.window.panel is not None, what="panel opened")
    panel = ctl.window.panel
    info = await ctl.rt.get_task(panel.task_id)
    assert (info.model, info.approval, info.planning) == (MODEL, "auto_edit", True)
    chips = [w.text() for w in panel.findChildren(type(panel.title)) if w.objectName() == "Chip"]
    assert chips == [MODEL, "Edits files, asks before commands", "Planning on"]
    await wait_turns(ctl, panel)  # the goal went as the first message
    assert (await ctl.rt.messages(info.id))[0].text == "Say hello"


async def test_new_task_dialog_shows_a_config_error(launch):
    ctl = await launch()
    dlg = ctl.window.new_task()
    dlg.model.setEditText("nowhere/model")
    QTest.mouseClick(dlg.create_button, Qt.MouseButton.LeftButton)
    await until(lambda: not dlg.error.isHidden(), what="error shown")
    assert "nowhere" in dlg.error.text() and dlg.create_button.isEnabled()
    dlg.close()


async def test_rename_and_delete_with_confirmation(launch):
    ctl = await launch()
    task = await ctl.bridge.create_task(title="Old name", model=MODEL)
    await open_task(ctl, task.id)
    dlg = ctl.window.rename_task(task.id)
    assert not dlg.isModal() and dlg.textValue() == "Old name"
    dlg.setTextValue("New name")
    dlg.done(QDialog.DialogCode.Accepted)
    await until(lambda: ctl.window.tasks[task.id].title == "New name", what="renamed")
    assert (await ctl.rt.get_task(task.id)).title == "New name"
    await until(lambda: ctl.window.panel.title.text() == "New name", what="title updated")
    assert ctl.window.windowTitle() == "New name — Hearth"  # the window is named after the open task

    box = await ctl.window.delete_task(task.id)
    assert isinstance(box, QMessageBox) and not box.isModal()
    assert "deliverable" not in box.informativeText()  # it delivered nothing
    cancel = box.button(QMessageBox.StandardButton.Cancel)
    QTest.mouseClick(cancel, Qt.MouseButton.LeftButton)
    await asyncio.sleep(0.05)
    assert task.id in {t.id for t in await ctl.rt.list_tasks()}
    ctl.window.panel.composer.edit.setPlainText("a note I never sent")
    box = await ctl.window.delete_task(task.id)
    delete = next(b for b in box.buttons() if b.text() == "Delete")
    QTest.mouseClick(delete, Qt.MouseButton.LeftButton)
    await until(lambda: ctl.window.panel is None and task.id not in ctl.window.sidebar.rows, what="deleted")
    assert ctl.window.windowTitle() == "Hearth"
    assert task.id not in {t.id for t in await ctl.rt.list_tasks()}
    assert task.id not in ctl.drafts and task.id not in ctl.prefs.drafts  # its unsent text went with it


async def test_notification_when_a_turn_ends_out_of_sight(launch):
    model = ScriptedModel([["seen"], [Delay(0.3), "unseen"], [Call("ask_user", {"question": "Ok?"})]])
    ctl = await launch(model)
    a = await ctl.bridge.create_task(title="Visible", model=MODEL)
    b = await ctl.bridge.create_task(title="Hidden", model=MODEL)
    panel = await open_task(ctl, a.id)
    type_and_send(panel, "go")
    await wait_turns(ctl, panel)
    assert ctl.notifications == []  # its panel was on screen
    await ctl.bridge.send(b.id, "go")
    await until(lambda: ctl.notifications, what="notification")
    assert ctl.notifications[0][:2] == (b.id, "Hidden is done")
    await ctl.bridge.send(b.id, "again")
    await until(lambda: len(ctl.notifications) == 2, what="waiting notification")
    assert ctl.notifications[1][1] == "Hidden is waiting for you"


async def test_sidebar_badge_follows_the_turn(launch):
    ctl = await launch(ScriptedModel([["a", Delay(0.5), "b"]]))
    task = await ctl.bridge.create_task(title="Badge", model=MODEL)
    await ctl.window.reload_tasks()
    await ctl.bridge.send(task.id, "go")
    await until(lambda: ctl.window.sidebar.badge(task.id) == "running", what="running badge")
    await until(lambda: ctl.window.sidebar.badge(task.id) == "idle", what="idle badge")


async def test_closing_the_window_while_turns_run(launch):
    ctl = await launch(ScriptedModel([[Delay(2.0), "done"]]))
    task = await ctl.bridge.create_task(title="Busy", model=MODEL)
    await ctl.bridge.send(task.id, "go")
    # No tray (offscreen): closing asks before quitting, and quitting waits for the answer.
    ctl.window.close()
    box = next(w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible())
    assert "still working" in box.text() and not ctl.quit_event.is_set()
    box.close()

    class FakeTray:
        notes: list = []

        def notify(self, title, text):
            self.notes.append(title)

    ctl.tray = FakeTray()
    ctl.window.close()  # with a tray: hide, keep running, say so once
    assert ctl.window is None and ctl.rt.tasks.is_running(task.id) and not ctl.quit_event.is_set()
    assert FakeTray.notes == ["Hearth is still working"]
    ctl.show_main().close()
    assert FakeTray.notes == ["Hearth is still working"]  # once only
    ctl.tray = None
    window = ctl.show_main()
    assert window.isVisible()


async def test_a_running_local_server_is_offered_on_the_welcome_page(launch, monkeypatch):
    from runtime.api import Providers

    async def detect(self, timeout: float = 0.25):
        return {"ollama": ["llama3.2", "qwen2.5"]}

    monkeypatch.setattr(Providers, "detect_local_servers", detect)
    ctl = await launch()
    welcome = ctl.window.welcome
    await until(lambda: not welcome.use.isHidden(), what="server offered")
    assert "Ollama is running" in welcome.found.text()
    QTest.mouseClick(welcome.use, Qt.MouseButton.LeftButton)
    editor = ctl.settings_window.providers
    assert [p["id"] for p in editor.providers] == ["builtin", "ollama"]
    assert editor.default_model.currentText() == "ollama/llama3.2"
    ctl.settings_window.close()


async def test_menus_and_shortcuts(launch):
    ctl = await launch()
    actions = ctl.window.actions_by_name
    assert actions["New Task…"].shortcut().toString() == "Ctrl+N"
    assert actions["Settings…"].shortcut().toString() == "Ctrl+,"
    assert actions["Quit"].shortcut().toString() == "Ctrl+Q"
    assert not actions["Export Task as Markdown…"].isEnabled()  # no task open yet
    actions["New Task…"].trigger()
    dlg = ctl.window.new_task_dialog
    assert dlg.isVisible() and not dlg.isModal()
    dlg.close()
    actions["Settings…"].trigger()
    assert ctl.settings_window is not None and ctl.settings_window.isVisible()
    ctl.settings_window.close()
    task = await ctl.bridge.create_task(title="Menu", model=MODEL)
    await open_task(ctl, task.id)
    assert actions["Export Task as Markdown…"].isEnabled() and actions["Open Workspace Folder"].isEnabled()
    actions["Quit"].trigger()  # nothing runs: quits without asking
    assert ctl.quit_event.is_set()


async def test_a_reload_overtaken_by_a_newer_one_returns_once_the_newer_lists_are_shown(launch):
    """Whoever awaits a reload (opening a task just made) sees the task, even when another reload began meanwhile
    and only the newest may land."""
    ctl = await launch()
    await ctl.window.reload_tasks()
    task = await ctl.rt.create_task(title="Just made", model=MODEL)
    list_teams, calls = ctl.bridge.list_teams, []

    async def newer_is_slower():  # the newer reload's last read comes back after the older one is done
        calls.append(1)
        if len(calls) == 2:
            await asyncio.sleep(0.3)
        return await list_teams()

    ctl.bridge.list_teams = newer_is_slower
    older = asyncio.ensure_future(ctl.window.reload_tasks())
    newer = asyncio.ensure_future(ctl.window.reload_tasks())
    await older
    assert task.id in ctl.window.tasks and ctl.window.open_task(task.id) is not None
    await newer


async def test_the_models_title_replaces_the_provisional_one_in_the_sidebar_header_and_window(launch):
    model = ScriptedModel([["Here is a plan."]], title="Lisbon week")
    ctl = await launch(model)
    task = await ctl.bridge.create_task(model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "Plan my week in Lisbon with a day in Sintra")
    await until(lambda: ctl.window.tasks[task.id].title == "Plan my week in Lisbon with a day in Sintra",
                what="the provisional title")
    await until(lambda: ctl.window.tasks[task.id].title == "Lisbon week", what="the model's title")
    await until(lambda: panel.title.text() == "Lisbon week", what="the header")
    assert ctl.window.windowTitle() == "Lisbon week — Hearth"
    sidebar = ctl.window.sidebar.model
    assert sidebar.index(sidebar.index_of[task.id], 0).data(Qt.ItemDataRole.DisplayRole) == "Lisbon week"
