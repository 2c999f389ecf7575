"""Planning, todos, helpers and skills in the window."""

from __future__ import annotations

import asyncio
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from runtime.providers.scripted import Call, ScriptedModel
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply
from tests.support.qt_helpers import MODEL, open_task, type_and_send, until, wait_turns


async def test_a_plan_is_approved_in_place_and_its_todos_show_beside_the_conversation(launch):
    steps = ["Read the notes", "Draft the reply"]
    model = ScriptedModel([
        [Call("submit_plan", {"summary": "Read, then draft.", "steps": steps})],
        [Call("todo_write", {"items": [{"content": "Read the notes", "status": "done"},
                                       {"content": "Draft the reply", "status": "in_progress"},
                                       {"content": "Send it", "status": "pending"}]})],
        ["Drafted."],
    ])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Reply", model=MODEL, planning=True)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "Answer Ana's email.")
    await until(lambda: panel.waiting is not None and panel.waiting.kind == "plan", what="the plan")
    box = panel.waiting
    assert box.steps.toPlainText() == "Read the notes\nDraft the reply"
    box.steps.setPlainText("Read the notes\nDraft the reply\nSend it")  # the person adds a step
    QTest.mouseClick(box.approve, Qt.MouseButton.LeftButton)
    await wait_turns(ctl, panel, 2)
    info = await ctl.rt.get_task(task.id)
    assert info.plan_status == "approved"
    await until(lambda: "1 of 3 done" in panel.todo_box.toggle.text(), what="todos shown")
    assert "◐  Draft the reply" in panel.todo_box.items.text()


async def test_turn_details_list_steps_and_helpers(launch):
    model = ScriptedModel([[Call("delegate", {"agent": "researcher", "task": "find the invoice"})],
                           ["The invoice is in inbox/."], ["Found it."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Invoice", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "Where is the invoice?")
    await wait_turns(ctl, panel)
    item = panel.conversation.assistant_items()[0]
    QTest.mouseClick(item.details, Qt.MouseButton.LeftButton)
    await until(lambda: getattr(panel, "details_dialog", None) is not None, what="details")
    dialog = panel.details_dialog
    assert dialog.steps.rowCount() == 2
    assert dialog.helpers.rowCount() == 1 and dialog.helpers.item(0, 0).text() == "researcher"
    assert dialog.helpers.item(0, 6).text() == "completed"


class HeldHelper(ScriptedModel):
    """The helper's model: answers its first request at once and holds every later one until `go` is set."""

    def __init__(self, steps):
        super().__init__(steps, id="kid")
        self.go = asyncio.Event()

    async def stream(self, request, *, on_queued=None):
        if self.requests:
            await self.go.wait()
        async for item in super().stream(request, on_queued=on_queued):
            yield item


def delegate_card(panel):
    cards = [c for c in panel.conversation.cards() if c.name == "delegate"]
    return cards[0] if len(cards) == 1 else None


def progress_of(panel) -> str:
    card = delegate_card(panel)
    return card.progress.text() if card is not None and card.progress.isVisibleTo(panel) else ""


async def test_a_helpers_progress_shows_in_its_card_live_and_after_reopening(launch, home):
    (home / "agents").mkdir()
    (home / "agents" / "reader.md").write_text(
        "---\nname: reader\ndescription: Reads files.\ntools: read_file\nmodel: kid/m\n---\nRead and report.")
    kid = HeldHelper([[Call("read_file", {"path": "notes.txt"})], ["The notes say: water the plants."]])
    model = ScriptedModel([[Call("delegate", {"agent": "reader", "task": "read notes.txt"})], ["Water the plants."]])
    ctl = await launch(model, kid=kid)
    task = await ctl.bridge.create_task(title="Notes", model=MODEL)
    Path(task.workspace, "notes.txt").write_text("water the plants")
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "What do my notes say?")
    so_far = 'reader started\n→ read_file {"path": "notes.txt"}'
    await until(lambda: progress_of(panel) == so_far, what="the helper's steps, live")
    await panel.feed.open_page()  # "jump to latest" re-reads the page: the running answer's item is re-made
    assert progress_of(panel) == so_far
    ctl.window.close_panel()
    panel = await open_task(ctl, task.id)
    await until(lambda: progress_of(panel) == so_far, what="the same steps after reopening")
    kid.go.set()
    done = so_far + "\nreader finished"
    await until(lambda: progress_of(panel) == done, what="the rest, live in the reopened panel")
    await wait_turns(ctl, panel)
    assert delegate_card(panel).state == "done"
    assert progress_of(panel) == done  # the card as saved keeps the helper's steps
    ctl.window.close_panel()
    panel = await open_task(ctl, task.id)
    await until(lambda: progress_of(panel) == done, what="the steps after reopening the finished task")


async def test_settings_list_skills_and_add_one(launch, tmp_path):
    ctl = await launch()
    folder = tmp_path / "summary"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: summary\ndescription: Summarise a long text.\n---\nBe short.")
    win = ctl.open_settings()
    page = win.skills
    await until(lambda: page.status.text() == "No skills yet.", what="empty list")
    await page.add(str(folder))
    assert page.status.text() == "Added /summary."
    assert page.list.item(0).text() == "/summary — Summarise a long text."
    await page.add(str(folder))
    assert "exists already" in page.status.text()


async def test_a_compacted_turn_shows_its_marker_live_and_after_reopening(launch):
    from PySide6.QtWidgets import QLabel

    from tests.runtime.test_compaction import SmallModel

    def marked(panel) -> bool:
        return any(label.text().startswith("⚠ Context compacted") and label.isVisibleTo(panel)
                   for label in panel.findChildren(QLabel))

    model = SmallModel()
    ctl = await launch(small=model)
    task = await ctl.bridge.create_task(model="small/m")
    panel = await open_task(ctl, task.id)
    for i in range(40):
        await ctl.bridge.send(task.id, f"Message {i}: tell me more about topic {i}, please.")
        await ctl.rt.wait_idle(task.id)
        if model.summaries:
            break
    assert model.summaries  # the history outgrew the window and was summarized
    await until(lambda: marked(panel), what="the marker on the live turn")
    ctl.window.close_panel()
    panel = await open_task(ctl, task.id)
    await until(lambda: marked(panel), what="the marker after reopening")


def test_a_long_helper_progress_shows_its_newest_steps_and_opens_to_all():
    from app.conversation.tool_card import PROGRESS_PEEK, ToolCard

    steps = [f"→ read_file {{\"path\": \"part{i}.txt\"}}" for i in range(12)]
    card = ToolCard({"type": "tool_call", "name": "delegate", "state": "done", "progress": steps,
                     "args": {"agent": "reader", "task": "read the parts"}})
    card.show()
    assert card.progress.text().splitlines() == steps[-PROGRESS_PEEK:]
    assert card.progress_toggle.isVisible() and card.progress_toggle.text() == "Helper steps (12)"
    card.progress_toggle.click()
    assert card.progress.text().splitlines() == steps
    card.add_progress("reader finished")  # live lines join the open list
    assert card.progress.text().splitlines() == [*steps, "reader finished"]
    assert card.progress_toggle.text() == "Helper steps (13)"
    card.progress_toggle.click()
    assert card.progress.text().splitlines() == [*steps[-PROGRESS_PEEK + 1:], "reader finished"]
    card.close()


async def test_a_server_model_that_answers_in_words_still_brings_a_plan_to_approve(launch, home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(Reply(chunks=["I would back up first, then tidy."]),
                      Reply(chunks=[], finish="tool_calls", tool_calls=[
                          ("c1", "submit_plan", {"summary": "Back up, then tidy.", "steps": ["Back up", "Tidy"]})]))
        ctl = await launch()
        task = await ctl.bridge.create_task(title="Disk", model="local/test-model", planning=True)
        panel = await open_task(ctl, task.id)
        type_and_send(panel, "Tidy my disk.")
        await until(lambda: panel.waiting is not None and panel.waiting.kind == "plan", what="the plan card")
        assert panel.waiting.steps.toPlainText() == "Back up\nTidy"
        assert panel.conversation.assistant_items()[0].block.text() == "I would back up first, then tidy."
        first, second = server.chat_requests
        assert "tool_choice" not in first
        assert second["tool_choice"] == {"type": "function", "function": {"name": "submit_plan"}}
