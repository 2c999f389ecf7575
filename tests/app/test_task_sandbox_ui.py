"""A task's command settings in the app, offscreen, on real turns: the New task dialog's network checkbox (a real
sandboxed command reaches a loopback listener only while it is on), the header's Commands menu that changes it, and
the approval card of a command that cannot be sandboxed (bwrap made unavailable), whose "Run commands unsandboxed in
this task" accepts that risk for the task so the next command runs without asking, until the header undoes it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLabel, QPushButton

from runtime.providers.scripted import Call, ScriptedModel
from tests.support.helpers import connect_command
from tests.support.qt_helpers import MODEL, open_task, type_and_send, until, wait_turns

NO_BWRAP = "/nonexistent/bwrap"


async def _results(rt, task_id: str) -> list[tuple[str, str]]:
    return [(p["state"], p.get("result") or "") for m in await rt.messages(task_id) for p in m.parts
            if p.get("type") == "tool_call"]


async def test_new_task_lets_commands_use_the_network_and_the_header_turns_it_off(launch, listener):
    port, accepted = listener
    connect = connect_command(port)
    model = ScriptedModel([[Call("run_shell", {"command": connect})], ["Reached it."],
                           [Call("run_shell", {"command": connect})], ["Could not reach it."]])
    ctl = await launch(model)
    assert (await ctl.rt.permissions.sandbox_status()).available  # a real bubblewrap sandbox runs the commands
    dlg = ctl.window.new_task("Fetch the greeting")
    assert not dlg.network.isChecked()  # off unless the person ticks it
    dlg.model.setEditText(MODEL)
    dlg.approval.setCurrentIndex(dlg.approval.findData("full_auto"))
    dlg.network.click()
    QTest.mouseClick(dlg.create_button, Qt.MouseButton.LeftButton)
    await until(lambda: ctl.window.panel is not None, what="task created and opened")
    panel = ctl.window.panel
    assert (await ctl.rt.get_task(panel.task_id)).network is True
    await wait_turns(ctl, panel)
    (state, result), = await _results(ctl.rt, panel.task_id)
    assert state == "done" and "hello from the host" in result and accepted == [1]
    assert panel.commands.text() == "Commands: network on ▾" and panel.commands.network.isChecked()
    assert not panel.commands.unsandboxed.isVisible()

    panel.commands.network.trigger()  # the header's Commands menu: untick the network
    await until(lambda: panel.commands.text() == "Commands: no network ▾", what="the header updated")
    assert (await ctl.rt.get_task(panel.task_id)).network is False
    type_and_send(panel, "again")
    await wait_turns(ctl, panel, 2)
    state, result = (await _results(ctl.rt, panel.task_id))[-1]
    assert state == "done" and "Connection refused" in result and accepted == [1]


async def test_the_unsandboxed_card_accepts_the_risk_for_the_task_until_the_header_undoes_it(launch):
    model = ScriptedModel([[Call("run_shell", {"command": "echo one >> log.txt"})], ["Once."],
                           [Call("run_shell", {"command": "echo two >> log.txt"})], ["Twice."],
                           [Call("run_shell", {"command": "echo three >> log.txt"})], ["Asked again."],
                           [Call("run_shell", {"command": "echo four >> log.txt"})], ["Asked."]])
    ctl = await launch(model)
    rt = ctl.rt
    await rt.save_settings({**rt.settings.dump(), "sandbox_bwrap": NO_BWRAP})  # no sandbox can start
    task = await ctl.bridge.create_task(title="Log", model=MODEL, approval="full_auto")
    log = Path(task.workspace) / "log.txt"
    panel = await open_task(ctl, task.id)
    assert panel.commands.text() == "Commands: no network ▾" and not panel.commands.unsandboxed.isVisible()

    type_and_send(panel, "write one")  # full_auto, but an unsandboxed command asks first
    await until(lambda: panel.waiting is not None and panel.settled, what="approval asked")
    box = panel.waiting
    assert "<b>not sandboxed</b>" in box.heading.text()
    warning = next(w for w in box.findChildren(QLabel) if w.objectName() == "Warning")
    assert warning.text().startswith("It runs WITHOUT a sandbox") and not log.exists()
    assert box.unsandboxed.text() == "Run commands unsandboxed in this task"
    QTest.mouseClick(box.unsandboxed, Qt.MouseButton.LeftButton)
    await wait_turns(ctl, panel, 2)
    assert (await rt.get_task(task.id)).unsandboxed_ok is True and log.read_text() == "one\n"
    await until(lambda: panel.commands.text() == "Commands: no network, may run unsandboxed ▾", what="header")
    assert panel.commands.unsandboxed.isVisible() and panel.commands.unsandboxed.isChecked()

    type_and_send(panel, "write two")  # accepted: it runs without a question
    await wait_turns(ctl, panel, 3)
    assert panel.waiting is None and log.read_text() == "one\ntwo\n"

    panel.commands.unsandboxed.trigger()  # undo it from the header: each command asks again
    await until(lambda: panel.commands.text() == "Commands: no network ▾", what="the header updated")
    assert (await rt.get_task(task.id)).unsandboxed_ok is False
    type_and_send(panel, "write three")
    await until(lambda: panel.waiting is not None and panel.settled, what="asked again")
    assert log.read_text() == "one\ntwo\n"
    QTest.mouseClick(panel.waiting.deny, Qt.MouseButton.LeftButton)
    await wait_turns(ctl, panel, 4)

    # In "ask" every command asks anyway, so the card does not offer what would change nothing.
    asks = await ctl.bridge.create_task(title="Asks", model=MODEL, approval="ask")
    panel = await open_task(ctl, asks.id)
    type_and_send(panel, "write four")
    await until(lambda: panel.waiting is not None and panel.settled, what="approval asked")
    assert "<b>not sandboxed</b>" in panel.waiting.heading.text()
    labels = [b.text() for b in panel.waiting.findChildren(QPushButton)]
    assert "Approve" in labels and "Run commands unsandboxed in this task" not in labels
