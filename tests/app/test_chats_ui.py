"""The Chats section as a person uses it, offscreen with real widgets and a real data folder: a new chat is one
keystroke (Ctrl+Shift+N; Ctrl+N stays New Task) and light (no folder, approval or attachments), the model can be
changed between answers (a line marks it and the next request goes to the new model), Stop and a closed panel
behave as a task's, and "Turn into a task" opens a task with the chat's history."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import QMimeData, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLabel, QPushButton

from app.chats.panel import ChatPanel
from app.conversation.message_widgets import EventLine
from app.tasks.panel import TaskPanel
from runtime.providers.scripted import Call, Delay, ScriptedModel
from tests.support.qt_helpers import MODEL, type_and_send, until


async def _default_model(ctl) -> None:
    await ctl.rt.save_settings(ctl.rt.settings.model_copy(update={"default_model": MODEL}))


async def _new_chat(ctl) -> ChatPanel:
    window = ctl.window
    window.show()
    window.activateWindow()
    QTest.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    await until(lambda: isinstance(window.panel, ChatPanel) and window.panel.loaded.is_set(), what="chat panel")
    return window.panel


async def test_a_new_chat_is_one_keystroke_and_has_no_folder_approval_or_attachments(launch):
    ctl = await launch(ScriptedModel([["Paris."]]))
    await _default_model(ctl)
    window = ctl.window
    assert window.actions_by_name["New Chat"].shortcut().toString() == "Ctrl+Shift+N"
    assert window.actions_by_name["New Task…"].shortcut().toString() == "Ctrl+N"
    panel = await _new_chat(ctl)
    assert window.sidebar.mode == "chats" and window.sidebar.new_button.text().endswith("New chat")
    assert not [w for w in panel.findChildren(QLabel) if w.objectName() == "Chip"]
    assert not [b for b in panel.findChildren(QPushButton) if b.text() == "Open folder"]
    assert panel.composer.attach.isHidden()
    assert not window.actions_by_name["Open Workspace Folder"].isEnabled()

    type_and_send(panel, "Capital of France?")
    await until(lambda: panel.settled and "Paris." in [m.text for m in panel.conversation.messages],
                what="the answer")
    await window.reload_tasks()
    assert await ctl.rt.list_tasks() == []  # a chat is not a task
    assert window.sidebar.chat_model.rowCount() == 1 and window.sidebar.model.rowCount() == 0
    assert window.sidebar.chat_model.tasks[0].title == "Capital of France?"
    pasted = "".join(f"row {i}\n" for i in range(900))  # long enough to become a file in a task
    mime = QMimeData()
    mime.setText(pasted)
    panel.composer.edit.insertFromMimeData(mime)  # a chat attaches nothing: the paste stays text
    assert panel.composer.edit.toPlainText() == pasted and panel.composer.send.isEnabled()


async def test_a_new_chat_says_what_to_do_until_its_first_message(launch):
    ctl = await launch(ScriptedModel([["Paris."]]))
    await _default_model(ctl)
    window = ctl.window
    panel = await _new_chat(ctl)
    hint = panel.conversation.hint
    assert hint.isVisibleTo(panel) and hint.text().startswith("Type a question below to start.")
    type_and_send(panel, "Capital of France?")
    await until(lambda: not hint.isVisibleTo(panel), what="the hint gone with the first message")
    await until(lambda: panel.settled and "Paris." in [m.text for m in panel.conversation.messages],
                what="the answer")
    chat_id = panel.chat_id
    window.close_panel()
    await window.reload_tasks()
    panel = window.open_chat(chat_id)  # a chat with messages never shows it
    await until(lambda: panel.loaded.is_set(), what="the chat again")
    assert panel.conversation.messages and not panel.conversation.hint.isVisibleTo(panel)


async def test_changing_the_model_marks_the_conversation_and_reaches_the_next_answer(launch):
    first, other = ScriptedModel([["One."]]), ScriptedModel([["Two, from the other model."]])
    ctl = await launch(first, other=other)
    await _default_model(ctl)
    panel = await _new_chat(ctl)
    type_and_send(panel, "Hello")
    await until(lambda: panel.settled and len(first.requests) == 1, what="first answer")

    dialog = panel.choose_model()
    dialog.chosen.emit("other/big")
    await until(lambda: panel.findChildren(EventLine), what="the model-change line")
    assert "Model changed to other/big" in panel.findChildren(EventLine)[0].text()
    await until(lambda: panel.model_button.text().startswith("other/big"), what="the model button")

    type_and_send(panel, "Again")
    await until(lambda: panel.settled and "Two, from the other model." in
                [m.text for m in panel.conversation.messages], what="second answer")
    assert len(first.requests) == 1 and len(other.requests) == 1
    sent = [m["content"] for m in other.requests[0].messages]
    assert "Hello" in sent and "One." in sent  # the history went along; the marker line did not
    assert not any("Model changed" in str(c) for c in sent)


async def test_stop_closing_and_reopening_and_turning_into_a_task(launch):
    model = ScriptedModel([["Thinking ", Delay(0.6), "slowly ", Delay(30), "never"], ["Done waiting."]])
    ctl = await launch(model)
    await _default_model(ctl)
    window = ctl.window
    panel = await _new_chat(ctl)
    chat_id = panel.chat_id
    type_and_send(panel, "Take your time")
    await until(lambda: panel.live_turn and "Thinking" in panel.turn_text(panel.live_turn), what="streaming")
    turn_id = panel.live_turn

    window.close_panel()  # a viewer: the answer goes on
    await asyncio.sleep(0.7)
    assert ctl.rt.chats.is_running(chat_id)
    await window.reload_tasks()
    panel = window.open_chat(chat_id)
    await until(lambda: panel.loaded.is_set() and panel.turn_text(turn_id) == "Thinking slowly ",
                what="replayed text")

    window.stop_current()
    await until(lambda: not ctl.rt.chats.is_running(chat_id) and panel.settled, what="stopped")
    assert (await ctl.rt.chats.get(chat_id)).last_reason == "aborted"

    [to_task] = [b for b in panel.findChildren(QPushButton) if b.text() == "Turn into a task"]
    to_task.click()
    await until(lambda: isinstance(window.panel, TaskPanel) and window.panel.loaded.is_set(), what="the task")
    assert window.sidebar.mode == "tasks"
    task_messages = await ctl.rt.messages(window.panel.task_id)
    assert [m.text for m in task_messages][:2] == ["Take your time", "Thinking slowly "]


async def test_a_chat_answer_has_details_with_its_model_steps(launch):
    ctl = await launch(ScriptedModel([[Call("memory", {"command": "view"})], ["Nothing saved yet."]]))
    await _default_model(ctl)
    panel = await _new_chat(ctl)
    type_and_send(panel, "What do you remember about me?")
    await until(lambda: panel.settled and panel.conversation.assistant_items(), what="the answer")
    item = panel.conversation.assistant_items()[-1]
    await until(lambda: item.details.isVisibleTo(panel), what="Details shown")
    QTest.mouseClick(item.details, Qt.MouseButton.LeftButton)
    await until(lambda: panel.details_dialog is not None, what="the details dialog")
    dialog = panel.details_dialog
    assert dialog.steps.rowCount() == 2 and dialog.steps.item(0, 5).text() == "memory"
    assert dialog.helpers.isHidden()  # a chat runs no helpers


async def test_a_chats_memory_write_waits_for_approve_in_the_panel(launch, home):
    note = {"command": "create", "path": "drinks.md", "content": "Prefers tea to coffee.\nSaid in a chat."}
    ctl = await launch(ScriptedModel([["I'll note that.", Call("memory", note)], ["Saved."]]))
    await _default_model(ctl)
    panel = await _new_chat(ctl)
    type_and_send(panel, "Remember: tea beats coffee.")
    await until(lambda: panel.waiting is not None and panel.settled, what="the approval asked")
    assert [c.state for c in panel.conversation.cards()] == ["pending"] and panel.conversation.cards()[0].waiting
    assert panel.waiting.always.isHidden() and not (home / "memory" / "drinks.md").exists()
    QTest.mouseClick(panel.waiting.approve, Qt.MouseButton.LeftButton)
    await until(lambda: panel.settled and not ctl.rt.chats.is_running(panel.chat_id)
                and panel.conversation.assistant_items()[-1].block.text() == "Saved.", what="the answer")
    await until(lambda: panel.waiting is None, what="the box gone")
    assert [c.state for c in panel.conversation.cards()] == ["done"]
    assert (home / "memory" / "drinks.md").read_text().startswith("Prefers tea to coffee.")
