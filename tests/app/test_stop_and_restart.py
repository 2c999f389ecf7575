"""Stop from the UI during a tool call; an app restart on a data folder with an interrupted turn and a pending
approval; answering that approval from the inline UI."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from runtime.api import Runtime
from runtime.providers.scripted import Call, ScriptedModel
from runtime.tools.base import Effect, FunctionTool
from tests.support.qt_helpers import MODEL, open_task, type_and_send, until, wait_turns


async def _forever(args, ctx):
    await asyncio.sleep(3600)
    return "never"


SLOW = FunctionTool(name="slow", description="Takes forever.", parameters={"type": "object", "properties": {}},
                    effect=Effect.read_only, fn=_forever)


async def test_stop_during_a_tool_call_leaves_the_card_interrupted(launch):
    model = ScriptedModel([["Working on it.", Call("slow", {"what": "everything"})], ["Second answer."]])
    ctl = await launch(model, tools=[SLOW])
    task = await ctl.bridge.create_task(title="Stop me", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "start")
    await until(lambda: any(c.state == "running" for c in panel.conversation.cards()), what="tool running")
    assert panel.composer.stop.isVisible()

    QTest.mouseClick(panel.composer.stop, Qt.MouseButton.LeftButton)
    await until(lambda: not ctl.rt.tasks.is_running(task.id), what="turn stopped")
    await until(lambda: [c.state for c in panel.conversation.cards()] == ["interrupted"], what="card interrupted")
    await until(lambda: not panel.composer.running, what="composer idle")
    assert panel.composer.stop.isHidden() and panel.composer.send.text() == "Send"
    assert (await ctl.rt.get_task(task.id)).last_reason == "aborted"

    type_and_send(panel, "again")  # the composer is usable right away
    await wait_turns(ctl, panel, 2)
    messages = await ctl.rt.messages(task.id)
    last = [m for m in messages if m.role == "assistant"][-1]
    await until(lambda: panel.turn_text(last.turn_id) == "Second answer.", what="second answer shown")


async def test_escape_stops_the_running_turn(launch):
    ctl = await launch(ScriptedModel([[Call("slow", {})]]), tools=[SLOW])
    task = await ctl.bridge.create_task(title="Esc", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "start")
    await until(lambda: any(c.state == "running" for c in panel.conversation.cards()), what="tool running")
    QTest.keyClick(panel.composer.edit, Qt.Key.Key_Escape)
    await until(lambda: [c.state for c in panel.conversation.cards()] == ["interrupted"], what="card interrupted")


async def _seed(home) -> tuple[str, str]:
    model = ScriptedModel()
    rt = await Runtime.open(home, providers={"scripted": model}, tools=[SLOW])
    waiting = await rt.create_task(title="Needs approval", model=MODEL, approval="ask")
    model.add_steps(["I will write the file.", Call("write_file", {"path": "hello.txt", "content": "hi\n"})])
    await rt.send(waiting.id, "write hello.txt")
    await rt.wait_idle(waiting.id)
    interrupted = await rt.create_task(title="Cut short", model=MODEL)
    model.add_steps(["Partial answer before the quit.", Call("slow", {})])
    await rt.send(interrupted.id, "long job")
    await asyncio.sleep(0.3)
    await rt.aclose()  # quitting mid-turn
    return interrupted.id, waiting.id


async def test_restart_shows_interrupted_turn_and_pending_approval(launch, home):
    interrupted, waiting = await _seed(home)
    model = ScriptedModel([["Wrote it."], ["Continuing from where I was."]])
    ctl = await launch(model, tools=[SLOW])
    sidebar = ctl.window.sidebar
    await until(lambda: sidebar.badge(interrupted) == "interrupted" and sidebar.badge(waiting) == "waiting",
                what="sidebar badges")

    panel = await open_task(ctl, interrupted)
    messages = await ctl.rt.messages(interrupted)
    turn_id = next(m.turn_id for m in messages if m.role == "assistant")
    assert panel.turn_text(turn_id) == "Partial answer before the quit."
    assert [c.state for c in panel.conversation.cards()] == ["interrupted"]
    banners = panel.conversation.banners()
    assert len(banners) == 1 and banners[0].kind == "interrupted" and banners[0].button.isVisibleTo(panel)
    assert panel.waiting is None

    panel = await open_task(ctl, waiting)
    box = panel.waiting
    assert box is not None and box.kind == "approval"
    assert [c.state for c in panel.conversation.cards()] == ["pending"]
    assert panel.conversation.cards()[0].waiting
    QTest.mouseClick(box.approve, Qt.MouseButton.LeftButton)
    await until(lambda: panel.waiting is None, what="waiting box gone")
    await until(lambda: not ctl.rt.tasks.is_running(waiting) and panel.live_turn is None
                and (ctl.rt.core.buffers.get(waiting) is None or ctl.rt.core.buffers.get(waiting).ended),
                what="approved turn ran")
    info = await ctl.rt.get_task(waiting)
    assert info.state == "idle" and info.last_reason == "completed"
    assert (await ctl.rt.get_task(waiting)).workspace
    await until(lambda: "done" in [c.state for c in panel.conversation.cards()], what="card done")
    await until(lambda: sidebar.badge(waiting) == "idle", what="badge idle")


async def test_continue_after_an_interrupted_turn(launch, home):
    interrupted, _ = await _seed(home)
    ctl = await launch(ScriptedModel([["Picked it up again."]]), tools=[SLOW])
    panel = await open_task(ctl, interrupted)
    banner = panel.conversation.banners()[0]
    QTest.mouseClick(banner.button, Qt.MouseButton.LeftButton)
    await wait_turns(ctl, panel, 2)
    messages = await ctl.rt.messages(interrupted)
    last = [m for m in messages if m.role == "assistant"][-1]
    await until(lambda: panel.turn_text(last.turn_id) == "Picked it up again.", what="answer shown")
    await until(lambda: not any(b.button.isVisibleTo(panel) for b in panel.conversation.banners()),
                what="the old banner offers no Continue any more")


async def test_stop_while_an_approval_waits_closes_it_as_stopped(launch):
    """The composer offers Stop while an approval waits; Stop (its button, Task ▸ Stop / Ctrl+., Esc) closes the
    request: the card reads stopped, nothing is pending, and the composer takes the next message at once."""
    write = ["I will write it.", Call("write_file", {"path": "a.txt", "content": "hi"})]
    model = ScriptedModel([write, write, write, ["Fresh start."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Stop the wait", model=MODEL)
    panel = await open_task(ctl, task.id)

    async def asked(n: int) -> None:
        type_and_send(panel, f"write a.txt ({n})")
        await until(lambda: panel.waiting is not None and panel.settled
                    and len(panel.conversation.cards()) == n, what=f"approval {n} asked")
        assert panel.composer.stop.isVisibleTo(panel) and "Waiting for your answer" in panel.composer.hint.text()
        assert panel.conversation.cards()[-1].waiting

    async def stopped(n: int) -> None:
        await until(lambda: panel.waiting is None and [c.state for c in panel.conversation.cards()] == ["stopped"] * n,
                    what=f"request {n} closed as stopped")
        card = panel.conversation.cards()[-1]
        assert card.badge.text() == "● stopped" and not card.waiting
        await until(lambda: panel.composer.stop.isHidden(), what="composer ready")
        assert panel.composer.send.text() == "Send" and panel.composer.hint.text() == ""
        assert "stopped by you" in panel.conversation.assistant_items()[-1].footer.text()
        info = await ctl.rt.get_task(task.id)
        assert (info.state, info.last_reason, info.pending_request) == ("idle", "aborted", None)

    await asked(1)
    QTest.mouseClick(panel.composer.stop, Qt.MouseButton.LeftButton)
    await stopped(1)
    await asked(2)
    ctl.window.actions_by_name["Stop"].trigger()  # Task ▸ Stop, Ctrl+.
    await stopped(2)
    await asked(3)
    QTest.keyClick(panel.composer.edit, Qt.Key.Key_Escape)
    await stopped(3)

    type_and_send(panel, "something else")
    await wait_turns(ctl, panel, 4)
    await until(lambda: panel.conversation.assistant_items()[-1].block.text() == "Fresh start.", what="a clean turn")
    assert [c.state for c in panel.conversation.cards()] == ["stopped"] * 3
    ctl.window.close_panel()
    panel = await open_task(ctl, task.id)  # read back: nothing pending anywhere
    assert [c.state for c in panel.conversation.cards()] == ["stopped"] * 3 and panel.waiting is None
