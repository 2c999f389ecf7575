"""A panel and the main window are viewers: closing them mid-turn and reopening shows exactly the text streamed
and persisted so far, and the turn continues live."""

from __future__ import annotations

import asyncio

from runtime.providers.scripted import Delay, ScriptedModel
from tests.support.qt_helpers import MODEL, open_task, persisted_text, type_and_send, until

FIRST = [f"alpha{i} " for i in range(30)] + ["\n\n```python\nprint('hi')\n```\n\n"]
SECOND = [f"beta{i} " for i in range(30)] + ["**done**."]


def paced(chunks: list[str]) -> list:
    out: list = []
    for i, c in enumerate(chunks):
        out.append(c)
        if i % 6 == 5:
            out.append(Delay(0.02))
    return out


def model() -> ScriptedModel:
    # A pause between the halves: the panel is closed and reopened while the turn sits there.
    return ScriptedModel([[*paced(FIRST), Delay(1.2), *paced(SECOND)]])


def buffered_text(ctl, task_id: str) -> str:
    """The text a fresh observer would replay right now (read straight from the runtime's buffer)."""
    events = ctl.rt.core.buffers.get(task_id).read(0)
    return "".join(ev.text for ev in events if ev.type == "text_delta")


async def test_close_panel_mid_turn_and_reopen(launch):
    ctl = await launch(model())
    task = await ctl.bridge.create_task(title="Reopen me", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "stream please")
    first = "".join(FIRST)
    await until(lambda: panel.live_turn and panel.turn_text(panel.live_turn) == first, what="first half shown")
    turn_id = panel.live_turn

    ctl.window.close_panel()
    assert ctl.rt.tasks.is_running(task.id)  # closing the panel stopped nothing
    await asyncio.sleep(0.1)

    panel = await open_task(ctl, task.id)
    assert panel.live_turn == turn_id
    await until(lambda: panel.turn_text(turn_id) == first, what="replayed text")
    assert panel.turn_text(turn_id) == buffered_text(ctl, task.id) == first

    await until(lambda: not ctl.rt.tasks.is_running(task.id), timeout=15, what="turn end")
    full = first + "".join(SECOND)
    await until(lambda: panel.live_turn is None and panel.turn_text(turn_id) == full, what="live continuation")
    messages = await ctl.rt.messages(task.id)
    assert panel.turn_text(turn_id) == persisted_text(messages, turn_id) == full


async def test_close_main_window_mid_turn_and_reopen(launch):
    ctl = await launch(model())
    task = await ctl.bridge.create_task(title="Reopen the window", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "stream please")
    first = "".join(FIRST)
    await until(lambda: panel.live_turn and panel.turn_text(panel.live_turn) == first, what="first half shown")
    turn_id = panel.live_turn

    ctl.hide_window()
    assert ctl.window is None and ctl.rt.tasks.is_running(task.id)
    await asyncio.sleep(0.1)

    window = ctl.show_main()  # a new window: it reopens the task that was open
    await until(lambda: window.panel is not None and window.panel.loaded.is_set(), what="panel reopened")
    panel = window.panel
    assert panel.task_id == task.id
    await until(lambda: panel.turn_text(turn_id) == first, what="replayed text")
    assert panel.turn_text(turn_id) == buffered_text(ctl, task.id)

    await until(lambda: not ctl.rt.tasks.is_running(task.id), timeout=15, what="turn end")
    full = first + "".join(SECOND)
    await until(lambda: panel.live_turn is None and panel.turn_text(turn_id) == full, what="live continuation")
    messages = await ctl.rt.messages(task.id)
    assert panel.turn_text(turn_id) == persisted_text(messages, turn_id) == full


async def test_reopen_after_the_turn_ended_reads_the_database(launch):
    ctl = await launch(ScriptedModel([paced(FIRST)]))
    task = await ctl.bridge.create_task(title="Done already", model=MODEL)
    await ctl.bridge.send(task.id, "go")
    await ctl.rt.wait_idle(task.id)
    panel = await open_task(ctl, task.id)
    messages = await ctl.rt.messages(task.id)
    turn_id = next(m.turn_id for m in messages if m.role == "assistant")
    assert panel.live_turn is None
    assert panel.turn_text(turn_id) == persisted_text(messages, turn_id) == "".join(FIRST)
