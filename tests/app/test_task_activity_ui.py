"""A task's activity between turns in the window, offscreen, on real turns and real processes: the panel shows the
wake-up it waits for and its background commands with their output so far; Stop ends one, Cancel wait and Resume
now act on the wake-up; the sidebar says when the task wakes, and a task that wakes out of sight notifies."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLabel, QPushButton

from app.shell.sidebar import WAKE
from runtime.providers.scripted import Call, ScriptedModel
from runtime.tools.shell.process import group_alive
from tests.support.qt_helpers import MODEL, open_task, type_and_send, until, wait_turns


def _sidebar_wake(ctl, task_id: str) -> object:
    model = ctl.window.sidebar.model
    return model.index(model.index_of[task_id]).data(WAKE)


def _button(panel, text: str) -> QPushButton:
    return next(b for b in panel.activity.findChildren(QPushButton) if b.text() == text and b.isVisible())


async def test_the_panel_shows_the_wait_and_the_command_and_acts_on_them(launch):
    model = ScriptedModel([
        [Call("run_shell", {"command": "echo hello from the build; sleep 60", "background": True})],
        [Call("wait", {"seconds": 3600, "note": "the build takes a while"})],
        ["Woken early."],
    ])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Build", model=MODEL, approval="full_auto")
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "build it")
    await wait_turns(ctl, panel)
    box = panel.activity
    await until(lambda: box.isVisible() and box.commands and box.wake_row.isVisible(), what="activity shown")
    assert "Waiting until" in box.wake_label.text() and "the build takes a while" in box.wake_label.text()
    (command,) = box.commands
    assert command["status"] == "running" and group_alive(command["pgid"])
    await until(lambda: str(_sidebar_wake(ctl, task.id)).startswith("wakes "), what="the sidebar's row")

    asked = ctl.request_quit(ask=True)  # no turn runs, but a quit would end the command: it asks first
    assert asked is not None and "background commands" in asked.informativeText()
    asked.close()

    QTest.mouseClick(_button(panel, "Output"), Qt.MouseButton.LeftButton)
    await until(lambda: "hello from the build" in box.output.toPlainText(), what="the output so far")
    QTest.mouseClick(_button(panel, "Stop"), Qt.MouseButton.LeftButton)
    await until(lambda: box.commands and box.commands[0]["status"] == "stopped", what="the command stopped")
    assert not group_alive(command["pgid"])

    QTest.mouseClick(box.resume, Qt.MouseButton.LeftButton)  # wake now instead of in an hour
    await wait_turns(ctl, panel, 2)
    woken = [m for m in await ctl.rt.messages(task.id) if m.role == "user"][-1]
    assert "The person woke the task now" in woken.text and "the build takes a while" in woken.text
    bubble = await until(lambda: panel.conversation.items.get(woken.id), what="the wake-up's bubble")
    assert "Hearth woke the task" in [label.text() for label in bubble.findChildren(QLabel)]
    assert "Edit" not in [b.text() for b in bubble.findChildren(QPushButton)]  # not the person's words to edit
    await until(lambda: not box.wake_row.isVisible(), what="the wait gone from the panel")
    await until(lambda: _sidebar_wake(ctl, task.id) is None, what="the wait gone from the sidebar")


async def test_cancel_wait_and_a_task_that_wakes_out_of_sight_notifies(launch):
    model = ScriptedModel([
        [Call("wait", {"seconds": 3600, "note": "cancel me"})],
        [Call("wait", {"seconds": 1, "note": "the kettle"})],
        ["Tea is ready."],
    ])
    ctl = await launch(model)
    first = await ctl.bridge.create_task(title="Cancelled", model=MODEL)
    panel = await open_task(ctl, first.id)
    type_and_send(panel, "wait long")
    await wait_turns(ctl, panel)
    await until(lambda: panel.activity.wake_row.isVisible(), what="the wait shown")
    QTest.mouseClick(panel.activity.cancel, Qt.MouseButton.LeftButton)
    await until(lambda: not panel.activity.isVisible(), what="the wait cancelled")
    assert (await ctl.rt.get_task(first.id)).wake is None

    kettle = await ctl.bridge.create_task(title="Kettle", model=MODEL)
    await ctl.bridge.send(kettle.id, "boil")  # its panel is not the one on screen
    await until(lambda: any(n[0] == kettle.id and "woke up" in n[1] for n in ctl.notifications), timeout=15,
                what="the wake-up notified")
    said = [(n[1], n[2]) for n in ctl.notifications if n[0] == kettle.id]
    assert said[0][0].endswith(" will carry on by itself") and said[0][1].startswith("The task waits until ")
    assert "the kettle" in said[1][1] and not any("is done" in title for title, _ in said[:2])
