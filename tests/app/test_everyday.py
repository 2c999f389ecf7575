"""The everyday path in the window: Continue carries on one answer, approvals update one card, retry and edit,
copy, long pastes, empty input."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QMimeData, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QLabel

from app.conversation.message_item import AssistantItem
from runtime.engine.agent.context import CONTINUE, DENIED
from runtime.providers.base import FINISH, TEXT
from runtime.providers.scripted import Call, Delay, Fail, ScriptedModel
from tests.support.helpers import ECHO, write_settings
from tests.support.openai_server import OpenAIServer, Reply
from tests.support.qt_helpers import MODEL, open_task, type_and_send, until, wait_turns


class CutOff(ScriptedModel):
    """Answers its first request with a step that stops at the length limit."""

    async def stream(self, request, *, on_queued=None):
        if not self.requests:
            self.requests.append(request)
            yield (TEXT, "Red, green")
            yield (FINISH, "length")
            return
        async for item in super().stream(request, on_queued=on_queued):
            yield item


def _markers(panel) -> list[str]:
    return [w.text() for item in panel.conversation.assistant_items() for w in item.findChildren(QLabel)
            if w.text().startswith("↳")]


def _assert_reads_as_one_answer(panel, first, second, whole: str) -> None:
    """The part before a Continue has no footer or banner of its own; Copy on the rest copies the whole answer."""
    assert not first.footer.isVisibleTo(panel) and first.banner is None and not first.copy.isVisibleTo(panel)
    assert second.footer.isVisibleTo(panel) and "done" in second.footer.text()
    QTest.mouseClick(second.copy, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == whole


async def test_continue_after_a_length_stop_shows_one_answer_going_on(launch):
    model = CutOff([[" and blue."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Colours", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "Name three colours.")
    await wait_turns(ctl, panel)
    banner = (await until(panel.conversation.banners, what="the length-limit banner"))[0]
    assert "ran out of room" in banner.label.text() and banner.button.isVisibleTo(panel)
    (cut,) = panel.conversation.assistant_items()  # the turn completed; the answer did not: not "done"
    assert cut.footer.text().startswith("cut off at the length limit") and "done" not in cut.footer.text()
    QTest.mouseClick(banner.button, Qt.MouseButton.LeftButton)
    await wait_turns(ctl, panel, 2)
    first, second = panel.conversation.assistant_items()
    assert first.block.text() + second.block.text() == "Red, green and blue."
    assert _markers(panel) == ["↳ continued"]
    _assert_reads_as_one_answer(panel, first, second, "Red, green and blue.")
    bubbles = [m for m in panel.conversation.messages if m.role == "user"]
    assert not panel.conversation.items[bubbles[1].id].isVisibleTo(panel)  # no "Continue." from the person
    last = model.requests[-1].messages
    assert [m["role"] for m in last[-2:]] == ["assistant", "user"] and last[-1]["content"] == CONTINUE
    assert last[-2]["content"] == "Red, green"


async def test_a_continue_that_fails_at_once_leaves_the_partial_answer_whole(launch):
    model = CutOff([[Fail("the server went away")]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Colours", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "Name three colours.")
    await wait_turns(ctl, panel)
    await ctl.bridge.continue_task(task.id)
    await wait_turns(ctl, panel, 2)
    first, second = panel.conversation.assistant_items()
    assert first.block.text() == "Red, green" and second.block.text() == ""
    assert first.footer.isVisibleTo(panel) and first.copy.isVisibleTo(panel)  # nothing carried it on
    assert "went away" in second.banner.label.text()
    QTest.mouseClick(second.copy, Qt.MouseButton.LeftButton)  # the answer so far is still one click away
    assert QApplication.clipboard().text() == "Red, green"


async def test_continue_after_a_stop_goes_on_from_the_partial_answer(launch):
    model = ScriptedModel([["Once upon a time ", Delay(30)], ["there was a fox."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Story", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "A story.")
    await until(lambda: panel.live_turn and "Once upon" in panel.live[panel.live_turn].text, what="partial")
    QTest.mouseClick(panel.composer.stop, Qt.MouseButton.LeftButton)
    await wait_turns(ctl, panel)
    assert (await ctl.rt.get_task(task.id)).last_reason == "aborted"
    (stopped,) = panel.conversation.assistant_items()
    await until(lambda: stopped.go_on.isVisibleTo(panel), what="Continue offered after the Stop")
    assert "stopped by you" in stopped.footer.text()
    QTest.mouseClick(stopped.go_on, Qt.MouseButton.LeftButton)
    await wait_turns(ctl, panel, 2)
    assert not any(i.go_on.isVisibleTo(panel) for i in panel.conversation.assistant_items())  # it finished
    texts = [i.block.text() for i in panel.conversation.assistant_items()]
    assert "".join(texts) == "Once upon a time there was a fox."
    _assert_reads_as_one_answer(panel, *panel.conversation.assistant_items(), "Once upon a time there was a fox.")
    assert model.requests[-1].messages[-2]["content"] == "Once upon a time "


async def test_approving_updates_the_one_card_in_place(launch):
    model = ScriptedModel([["I will write it.", Call("write_file", {"path": "a.txt", "content": "hi"})],
                           ["Written."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Approve", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "write a.txt")
    await until(lambda: panel.waiting is not None and panel.settled, what="approval asked")
    asking = panel.conversation.assistant_items()[0]
    assert "waiting for you" in asking.footer.text()
    assert not asking.retry.isVisibleTo(panel)  # the approval is how this turn goes on, not another answer
    cards = panel.conversation.cards()
    assert [c.state for c in cards] == ["pending"] and cards[0].waiting
    QTest.mouseClick(panel.waiting.approve, Qt.MouseButton.LeftButton)
    await wait_turns(ctl, panel, 2)
    await until(lambda: [c.state for c in panel.conversation.cards()] == ["done"], what="the same card done")
    (line,) = [w for w in panel.conversation.findChildren(QLabel) if w.text() == "✓ You approved write_file"]
    await until(lambda: line.isVisibleTo(panel) and line.width() > 1, what="the answer line laid out")
    assert line.width() >= line.fontMetrics().horizontalAdvance(line.text())  # one line, not broken at the right
    assert line.height() < 2 * line.fontMetrics().lineSpacing()
    assert panel.conversation.cards()[0] is cards[0]  # updated in place, never a second card
    assert panel.waiting is None
    assert all("waiting for you" not in i.footer.text() for i in panel.conversation.assistant_items())


async def test_denying_updates_the_one_card_in_place(launch):
    model = ScriptedModel([["I will write it.", Call("write_file", {"path": "a.txt", "content": "hi"})],
                           ["Understood, I left a.txt alone."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Deny", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "write a.txt")
    await until(lambda: panel.waiting is not None and panel.settled, what="approval asked")
    cards = panel.conversation.cards()
    assert [c.state for c in cards] == ["pending"] and cards[0].waiting
    QTest.mouseClick(panel.waiting.deny, Qt.MouseButton.LeftButton)
    await wait_turns(ctl, panel, 2)
    await until(lambda: [c.state for c in panel.conversation.cards()] == ["denied"], what="the same card denied")
    assert panel.conversation.cards()[0] is cards[0]  # updated in place, never a second card
    assert not cards[0].waiting and cards[0].badge.text() == "● denied"
    assert panel.waiting is None
    assert all("waiting for you" not in i.footer.text() for i in panel.conversation.assistant_items())
    assert panel.conversation.assistant_items()[-1].block.text() == "Understood, I left a.txt alone."
    assert not Path(task.workspace, "a.txt").exists()
    denied = [m for m in model.requests[-1].messages if m["role"] == "tool"]
    assert [m["content"] for m in denied] == [DENIED]  # the model was told, and nothing was written


async def test_cards_of_a_server_that_repeats_call_ids_stay_in_their_own_turns(launch, home):
    """A server that names every call `call_0`: two calls of one step are two cards, each turn's card stays in
    its turn, approve and deny land on the card that asked, live and when the task is opened again."""
    def cards(panel) -> list[list[tuple[str, str]]]:
        return [[(c.name, c.state) for c in item.block.cards()] for item in panel.conversation.assistant_items()]

    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        same = "call_0"
        server.script(
            Reply(chunks=[], tool_calls=[(same, "echo", {"text": "one"}), (same, "echo", {"text": "two"})],
                  finish="tool_calls"),
            Reply(chunks=["Echoed twice."]),
            Reply(chunks=[], tool_calls=[(same, "write_file", {"path": "a.txt", "content": "hi"})],
                  finish="tool_calls"),
            Reply(chunks=["Written."]),
            Reply(chunks=[], tool_calls=[(same, "run_shell", {"command": "rm a.txt"})], finish="tool_calls"),
            Reply(chunks=["Left it."]),
        )
        ctl = await launch(tools=[ECHO])
        task = await ctl.bridge.create_task(title="Same ids")
        panel = await open_task(ctl, task.id)
        type_and_send(panel, "echo one and two")
        await wait_turns(ctl, panel)
        assert cards(panel) == [[("echo", "done"), ("echo", "done")]]
        first, second = panel.conversation.cards()
        assert (first.result, second.result) == ("echo: one", "echo: two")

        type_and_send(panel, "write a.txt")
        await until(lambda: panel.waiting is not None and panel.settled, what="the write asked")
        QTest.mouseClick(panel.waiting.approve, Qt.MouseButton.LeftButton)
        await wait_turns(ctl, panel, 3)
        await until(lambda: cards(panel)[1:] == [[("write_file", "done")], []], what="the write approved")

        type_and_send(panel, "now remove it")
        await until(lambda: panel.waiting is not None and panel.settled, what="the removal asked")
        waiting = [(c.name, c.waiting) for c in panel.conversation.cards()]
        assert waiting == [("echo", False), ("echo", False), ("write_file", False), ("run_shell", True)]
        assert cards(panel) == [[("echo", "done")] * 2, [("write_file", "done")], [], [("run_shell", "pending")]]
        QTest.mouseClick(panel.waiting.deny, Qt.MouseButton.LeftButton)
        await wait_turns(ctl, panel, 5)
        after = [[("echo", "done")] * 2, [("write_file", "done")], [], [("run_shell", "denied")], []]
        await until(lambda: cards(panel) == after, what="the removal denied on its own card")
        assert Path(task.workspace, "a.txt").read_text() == "hi"

        ctl.window.close_panel()
        panel = await open_task(ctl, task.id)  # the same, read back from the saved parts
        assert cards(panel) == after
        assert [c.result for c in panel.conversation.cards()[:2]] == ["echo: one", "echo: two"]


async def test_retry_and_edit_from_the_conversation(launch):
    model = ScriptedModel([["About cats."], ["More about cats."], ["About dogs."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Pets", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "Tell me about cats.")
    await wait_turns(ctl, panel)
    item = panel.conversation.assistant_items()[-1]
    assert item.retry.isVisibleTo(panel)
    QTest.mouseClick(item.retry, Qt.MouseButton.LeftButton)
    await wait_turns(ctl, panel, 2)
    assert _markers(panel) == ["↳ another answer"]
    assert [m["role"] for m in model.requests[-1].messages] == ["system", "user"]  # the old answer left out

    user = next(w for m in panel.conversation.messages if m.role == "user" and m.text
                for w in [panel.conversation.items[m.id]])
    edit = next(b for b in user.findChildren(type(panel.composer.send)) if b.text() == "Edit")
    QTest.mouseClick(edit, Qt.MouseButton.LeftButton)
    assert panel.composer.is_editing and panel.composer.edit.toPlainText() == "Tell me about cats."
    panel.composer.edit.setPlainText("Tell me about dogs.")
    QTest.keyClick(panel.composer.edit, Qt.Key.Key_Return)
    await wait_turns(ctl, panel, 3)
    sent = model.requests[-1].messages
    assert [m["content"] for m in sent if m["role"] == "user"] == ["Tell me about dogs."]
    assert panel.conversation.assistant_items()[-1].block.text() == "About dogs."


async def test_copy_an_answer_and_empty_input_cannot_be_sent(launch):
    ctl = await launch(ScriptedModel([["# Plan\n\n**Step one.**"]]))
    task = await ctl.bridge.create_task(title="Copy", model=MODEL)
    panel = await open_task(ctl, task.id)
    assert not panel.composer.send.isEnabled()
    panel.composer.edit.setPlainText("   \n  ")
    assert not panel.composer.send.isEnabled()
    QTest.keyClick(panel.composer.edit, Qt.Key.Key_Return)
    assert await ctl.rt.messages(task.id) == []
    type_and_send(panel, "plan")
    await wait_turns(ctl, panel)
    item: AssistantItem = panel.conversation.assistant_items()[0]
    QTest.mouseClick(item.copy, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == "# Plan\n\n**Step one.**"


async def test_the_composer_grows_with_the_text_up_to_a_third_of_the_window(launch):
    ctl = await launch(ScriptedModel([]))
    task = await ctl.bridge.create_task(title="Typing", model=MODEL)
    panel = await open_task(ctl, task.id)
    edit = panel.composer.edit
    one_line = edit.height()
    edit.setPlainText("first line\nsecond line\nthird line")
    three_lines = edit.height()
    assert three_lines > one_line
    edit.setPlainText("\n".join(f"line {i}" for i in range(200)))
    tallest = edit.height()
    assert three_lines < tallest <= edit.window().height() // 3 + 12  # then it scrolls
    edit.setPlainText("\n".join(f"line {i}" for i in range(400)))
    assert edit.height() == tallest
    edit.clear()
    assert edit.height() == one_line


async def test_a_long_paste_becomes_an_attachment_whose_text_reaches_the_model(launch):
    model = ScriptedModel([["Got it."]])
    model.context_tokens = 100_000
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Paste", model=MODEL)
    panel = await open_task(ctl, task.id)
    pasted = "".join(f"row {i}: value {i * 7}\n" for i in range(400))
    mime = QMimeData()
    mime.setText(pasted)
    panel.composer.edit.insertFromMimeData(mime)
    assert panel.composer.edit.toPlainText() == ""
    assert len(panel.composer.attachments) == 1 and panel.composer.send.isEnabled()
    type_and_send(panel, "summarise this")
    await wait_turns(ctl, panel)
    content = model.requests[-1].messages[-1]["content"]
    assert content.startswith("summarise this") and "row 399: value 2793" in content
    short = QMimeData()
    short.setText("just a line")
    panel.composer.edit.insertFromMimeData(short)
    assert panel.composer.edit.toPlainText() == "just a line" and panel.composer.attachments == []


async def test_an_unsent_draft_survives_switching_tasks_and_a_restart(launch, tmp_path):
    model = ScriptedModel([["Noted."]])
    ctl = await launch(model)
    first = await ctl.bridge.create_task(title="First", model=MODEL)
    second = await ctl.bridge.create_task(title="Second", model=MODEL)
    panel = await open_task(ctl, first.id)
    note = tmp_path / "note.txt"
    note.write_text("the note\n")
    panel.composer.edit.setPlainText("half a thought")
    panel.composer.add_files([str(note)])
    pasted = "".join(f"row {i}\n" for i in range(900))
    mime = QMimeData()
    mime.setText(pasted)
    panel.composer.edit.insertFromMimeData(mime)  # a long paste: an attachment

    def shown(panel) -> tuple[str, list[str]]:
        files = panel.composer.attachments
        return panel.composer.edit.toPlainText(), [Path(f).read_text() for f in files]

    other = await open_task(ctl, second.id)
    assert shown(other) == ("", [])  # a draft belongs to its task
    panel = await open_task(ctl, first.id)
    assert shown(panel) == ("half a thought", ["the note\n", pasted])
    await ctl.shutdown()  # quit with the draft unsent

    ctl = await launch(model)
    panel = await open_task(ctl, first.id)
    assert shown(panel) == ("half a thought", ["the note\n", pasted])
    QTest.keyClick(panel.composer.edit, Qt.Key.Key_Return)
    await wait_turns(ctl, panel)
    assert "half a thought" in model.requests[-1].messages[-1]["content"]
    await open_task(ctl, second.id)
    panel = await open_task(ctl, first.id)
    assert shown(panel) == ("", [])  # sent: nothing left to restore


async def test_a_server_slow_to_answer_is_shown_as_waiting_for_the_server(home):
    from app.shell.application import HearthApp

    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(Reply(chunks=["Here ", "I am."], wait=1.5))  # not a byte for 1.5 s (a model loading)
        ctl = HearthApp(home, use_tray=False)
        await ctl.start()
        try:
            task = await ctl.bridge.create_task(title="Slow server")
            panel = await open_task(ctl, task.id)
            type_and_send(panel, "hello?")
            await until(lambda: "Waiting for the server…" in panel.phase.text() and panel.phase.isVisibleTo(panel),
                        what="the wait for the server explained")
            texts = [item.block.text() for item in panel.conversation.assistant_items()]
            assert texts in ([], [""])  # nothing came back yet
            await wait_turns(ctl, panel)
            assert panel.phase.isHidden()
            assert panel.conversation.assistant_items()[-1].block.text() == "Here I am."
        finally:
            await ctl.shutdown()


async def test_a_long_wait_says_what_it_waits_for(launch):
    ctl = await launch(ScriptedModel([[Delay(0.8), "Here."]]))
    task = await ctl.bridge.create_task(title="Wait", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "hello?")
    await until(lambda: "Waiting for the model" in panel.phase.text() and panel.phase.isVisibleTo(panel),
                what="the wait explained")
    await wait_turns(ctl, panel)
    assert panel.phase.isHidden()
