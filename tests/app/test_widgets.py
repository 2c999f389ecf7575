"""Widgets on their own: Markdown with highlighted code, tool cards (truncation, "show all"), reasoning,
Settings (presets, save and test through the facade), themes, export."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

import shiboken6
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QPalette, QTextFormat
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMessageBox

from app.conversation.markdown import MarkdownView
from app.conversation.message_widgets import AssistantBlock
from app.conversation.tool_card import ToolCard
from app.shell.sidebar import started_labels
from app.tasks import export
from app.widgets import theme
from runtime.providers.scripted import Call, Delay, Reasoning, ScriptedModel
from tests.support.qt_helpers import MODEL, open_task, type_and_send, until, wait_turns


def test_markdown_renders_and_highlights_code():
    view = MarkdownView("# Title\n\nSome `code`.\n\n```python\ndef f(x):\n    return 1  # note\n```\n")
    doc = view.document()
    assert view.markdown.startswith("# Title")
    code = [b for b in _blocks(doc) if b.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence)]
    assert [b.text() for b in code] == ["def f(x):", "    return 1  # note"]
    assert code[0].blockFormat().background().color().name() == theme.colors()["code"]
    colours = _colours(code[0])
    assert colours["def"] == theme.colors()["kw"]  # Pygments: `def` is a keyword, `f` a function name
    assert colours["f"] == theme.colors()["fn"]
    assert _colours(code[1])["# note"] == theme.colors()["comment"]
    links = [b for b in _blocks(doc) if b.text() == "Copy code"]
    assert len(links) == 1 and view.code_blocks == ["def f(x):\n    return 1  # note"]
    view.anchorClicked.emit(QUrl("copy:0"))
    assert QApplication.clipboard().text() == "def f(x):\n    return 1  # note"


def _colours(block) -> dict[str, str]:
    out = {}
    it = block.begin()
    while not it.atEnd():
        frag = it.fragment()
        out[frag.text()] = frag.charFormat().foreground().color().name()
        it += 1
    return out


def _blocks(doc):
    block = doc.begin()
    while block.isValid():
        yield block
        block = block.next()


LONG_LINE = "curl -fsSL https://example.org/" + "a-very-long-path-segment/" * 12 + "install.sh | sh  # THE-END"
LONG_WORD = "x" * 400 + "END-OF-WORD"  # no place to break: it must still be seen whole


def _line_end_on_screen(conv, views, line: str) -> bool:
    """The last character of `line` (in one of `views`, MarkdownViews of the answer) lies inside the
    conversation's visible width, and no view's document is wider than the view (nothing cut at the right)."""
    for view in views:
        block = next((b for b in _blocks(view.document()) if b.text() == line), None)
        if block is None:
            continue
        assert view.document().size().width() <= view.viewport().width() + 1
        cursor = view.textCursor()
        cursor.setPosition(block.position() + len(line))
        end = view.viewport().mapTo(conv.viewport(), view.cursorRect(cursor).center())
        return 0 <= end.x() <= conv.viewport().width() and view.height() >= view.document().size().height()
    raise AssertionError(f"no view shows {line[:30]!r}…")


async def test_long_code_lines_are_seen_whole_in_an_answer_live_and_saved(launch):
    answer = f"Run this:\n\n```sh\n{LONG_LINE}\n{LONG_WORD}\n```\n\nDone."
    model = ScriptedModel([[answer[:-5], Delay(1.0), answer[-5:]]])
    ctl = await launch(model)
    ctl.window.resize(900, 700)
    ctl.window.show()
    task = await ctl.bridge.create_task(title="Code", model=MODEL)
    panel = await open_task(ctl, task.id)
    conv = panel.conversation
    type_and_send(panel, "How do I install it?")

    def live_views():
        item = conv.live_item(panel.live_turn) if panel.live_turn else None
        return item.block.parts[0].views if item is not None and item.block.parts else []

    await until(lambda: any(LONG_WORD in v.markdown for v in live_views()), what="the code, live")
    await asyncio.sleep(0.1)  # laid out
    assert _line_end_on_screen(conv, live_views(), LONG_LINE) and _line_end_on_screen(conv, live_views(), LONG_WORD)
    await wait_turns(ctl, panel)
    (item,) = conv.assistant_items()
    saved = [item.block.parts[0]]
    assert isinstance(saved[0], MarkdownView) and saved[0].markdown == answer
    await until(lambda: saved[0].height() > 4 * saved[0].fontMetrics().lineSpacing(), what="the saved answer laid out")
    assert _line_end_on_screen(conv, saved, LONG_LINE) and _line_end_on_screen(conv, saved, LONG_WORD)
    assert saved[0].code_blocks == [f"{LONG_LINE}\n{LONG_WORD}"]  # Copy code gives the lines as written


def test_streaming_markdown_keeps_the_exact_source():
    view = MarkdownView()
    for piece in ["Hel", "lo *wor", "ld*\n\n```", "py\nx = 1\n", "```"]:
        view.add_text(piece)
        view.request_render()
    view.flush()
    assert view.markdown == "Hello *world*\n\n```py\nx = 1\n```"
    assert "Hello world" in view.toPlainText()


def test_tool_card_truncates_long_output_with_show_all():
    long = "\n".join(f"line {i}" for i in range(500))
    card = ToolCard({"call_id": "c1", "name": "run_shell", "args": {"command": "seq 500"}, "state": "running"})
    assert card.badge.text() == "● running…" and card.toggle.isHidden()
    card.update_part({"call_id": "c1", "name": "run_shell", "args": {"command": "seq 500"}, "state": "done",
                      "result": long})
    assert card.state == "done" and not card.toggle.isHidden() and card.shown_result == ""
    assert card.result_view is None  # the result's widgets are made when it is first opened
    card.toggle.setChecked(True)  # expand the result
    assert card.result_view is not None
    shown = card.shown_result
    assert shown.startswith("line 0") and shown.endswith("…") and len(shown) < len(long)
    assert not card.more.isHidden()
    QTest.mouseClick(card.more, Qt.MouseButton.LeftButton)
    assert card.shown_result == long and card.more.isHidden()
    card.update_part({"call_id": "c1", "name": "run_shell", "args": {}, "state": "interrupted",
                      "note": "outcome unknown — verify before retrying"})
    assert "outcome unknown" in card.note.text() and not card.note.isHidden()


def test_reasoning_is_collapsed_until_opened():
    block = AssistantBlock()
    block.add_delta("reasoning", 0, "step one, step two")
    block.add_delta("text", 1, "Answer")
    block.render_changed()
    reasoning = block.parts[0]
    assert reasoning.view.isHidden() and "4 words" in reasoning.toggle.text()
    reasoning.toggle.setChecked(True)
    assert not reasoning.view.isHidden() and reasoning.markdown == "step one, step two"
    assert block.text() == "Answer" and block.text("reasoning") == "step one, step two"


async def test_settings_presets_save_and_test_through_the_facade(launch):
    ctl = await launch()
    saved, keys, tested = [], [], []

    async def update_settings(data):
        saved.append(json.loads(json.dumps(data)))

    def set_api_key(name, key):
        keys.append((name, key))
        return f"keyring:{name}"

    async def test_provider(provider):
        tested.append((provider["id"], provider.get("api_key_ref")))
        return ["llama3.2", "qwen2.5"]

    ctl.rt.save_settings = update_settings  # stand-ins: the test must not write a real keyring
    ctl.rt.providers.set_api_key = set_api_key
    ctl.rt.providers.test = test_provider
    win = ctl.open_settings()
    editor = win.providers
    assert [p["id"] for p in editor.providers] == ["builtin"]
    editor.add_preset("ollama")
    editor.add_preset("llamacpp")
    editor.add_preset("openai")
    assert [p["id"] for p in editor.providers] == ["builtin", "ollama", "llamacpp", "openai"]
    assert editor.current()["base_url"] == "https://api.openai.com/v1"
    editor.key.setText("sk-test")
    editor.key.textEdited.emit("sk-test")
    editor.list.setCurrentRow(1)
    QTest.mouseClick(editor.test, Qt.MouseButton.LeftButton)
    await until(lambda: editor.result.text().startswith("✓"), what="test result")
    assert tested == [("ollama", None)] and editor.default_model.findText("ollama/qwen2.5") >= 0
    editor.list.setCurrentRow(3)
    QTest.mouseClick(editor.test, Qt.MouseButton.LeftButton)  # a typed key is stored, then used by reference
    await until(lambda: len(tested) == 2, what="second test")
    assert tested[1] == ("openai", "keyring:openai") and keys == [("openai", "sk-test")]
    editor.default_model.setCurrentText("ollama/llama3.2")
    assert win.save.isEnabled()
    QTest.mouseClick(win.save, Qt.MouseButton.LeftButton)
    await until(lambda: saved, what="saved")
    assert keys == [("openai", "sk-test"), ("openai", "sk-test")]
    data = saved[0]
    assert data["default_model"] == "ollama/llama3.2"
    assert [p["id"] for p in data["providers"]] == ["builtin", "ollama", "llamacpp", "openai"]
    assert data["providers"][3]["api_key_ref"] == "keyring:openai"
    # llama.cpp's server refuses `content: null` beside tool calls: its preset brings the flag, the others not
    assert [p.get("empty_tool_call_content", False) for p in data["providers"]] == [False, False, True, False]
    assert "sk-test" not in json.dumps(data)  # keys go to the keyring, never into settings
    win.close()


async def test_mcp_servers_are_added_approved_and_removed_after_asking(launch, home):
    ctl = await launch()
    win = ctl.open_settings()
    mcp = win.mcp
    mcp.name.setText("time")
    mcp.cmd.setText("uvx mcp-server-time --local-timezone 'Europe/Berlin'")
    QTest.mouseClick(mcp.add, Qt.MouseButton.LeftButton)
    await until(lambda: mcp.tree.topLevelItemCount() == 1, what="server listed")
    item = mcp.tree.topLevelItem(0)
    assert item.text(1) == "uvx mcp-server-time --local-timezone Europe/Berlin"
    assert item.text(2) == "needs your approval"
    assert ctl.rt.mcp.servers() == [("time", item.text(1), False)]
    mcp.tree.setCurrentItem(item)
    QTest.mouseClick(mcp.approve, Qt.MouseButton.LeftButton)
    await until(lambda: mcp.tree.topLevelItem(0).text(2) == "approved", what="approved")

    def saved_servers() -> list[str]:
        return list(json.loads((home / "settings.json").read_text()).get("mcpServers", {}))

    assert saved_servers() == ["time"]
    mcp.tree.setCurrentItem(mcp.tree.topLevelItem(0))
    QTest.mouseClick(mcp.remove, Qt.MouseButton.LeftButton)
    mcp.confirm_box.button(QMessageBox.StandardButton.Cancel).click()  # changed their mind: nothing removed
    await asyncio.sleep(0.1)
    assert mcp.tree.topLevelItemCount() == 1 and len(ctl.rt.mcp.servers()) == 1 and saved_servers() == ["time"]
    QTest.mouseClick(mcp.remove, Qt.MouseButton.LeftButton)
    box = mcp.confirm_box
    assert box.text() == "Remove time?"
    next(b for b in box.buttons() if b.text() == "Remove").click()
    await until(lambda: mcp.tree.topLevelItemCount() == 0, what="removed")
    assert ctl.rt.mcp.servers() == [] and saved_servers() == []
    assert mcp.message.text() == "Removed time."
    win.close()


async def test_closing_settings_with_a_typed_mcp_server_asks_to_add_it(launch, home):
    ctl = await launch()
    win = ctl.open_settings()
    mcp = win.mcp
    mcp.name.setText("time")
    mcp.cmd.setText("uvx mcp-server-time")
    win.close()
    assert win.isVisible()  # not dropped: it asks
    box = win.close_box
    assert "“time” you typed is not added yet" in box.text()
    next(b for b in box.buttons() if b.text() == "Save").click()
    await until(lambda: ctl.settings_window is None, what="added and closed")
    assert [name for name, *_ in ctl.rt.mcp.servers()] == ["time"]
    assert list(json.loads((home / "settings.json").read_text())["mcpServers"]) == ["time"]

    win = ctl.open_settings()  # a typed line that does not parse keeps Settings open on the MCP tab
    win.mcp.name.setText("broken")
    win.mcp.cmd.setText("uvx 'unclosed")
    win.close()
    next(b for b in win.close_box.buttons() if b.text() == "Save").click()
    await until(lambda: "does not parse" in win.mcp.message.text(), what="why it was not added")
    assert win.isVisible() and win.tabs.currentWidget() is win.mcp
    win.mcp.cmd.setText("uvx other")
    win.close()
    next(b for b in win.close_box.buttons() if b.text() == "Discard").click()
    await until(lambda: ctl.settings_window is None, what="discarded and closed")
    assert [name for name, *_ in ctl.rt.mcp.servers()] == ["time"]


async def test_theme_switch_applies_at_once(launch):
    ctl = await launch()
    win = ctl.open_settings()
    win.set_theme("dark")
    assert theme.is_dark() and ctl.prefs.theme == "dark"
    window_colour = QApplication.instance().palette().color(QPalette.ColorRole.Window).name()
    assert window_colour == theme.DARK["window"]
    win.set_theme("light")
    assert not theme.is_dark()
    win.close()


async def test_export_markdown_and_json(launch, tmp_path):
    model = ScriptedModel([[Reasoning("hmm"), "Let me check.", Call("list_files", {"path": "."})], ["All good."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Export me", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "check")
    await wait_turns(ctl, panel)
    await ctl.window.export_to(task.id, str(tmp_path / "t.md"), "md")
    await ctl.window.export_to(task.id, str(tmp_path / "t.json"), "json")
    md = (tmp_path / "t.md").read_text()
    assert md.startswith("# Export me") and "Let me check." in md and "All good." in md and "list_files" in md
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["task"]["title"] == "Export me" and len(data["messages"]) == 2
    info = await ctl.rt.get_task(task.id)
    assert export.to_markdown(info, await ctl.rt.messages(task.id), await ctl.rt.tasks.turns(task.id)) == md


async def test_tasks_with_the_same_title_are_told_apart_by_when_they_began(launch):
    ctl = await launch()
    first = await ctl.bridge.create_task(title="Trip", model=MODEL)
    await ctl.bridge.create_task(title="Groceries", model=MODEL)
    again = await ctl.bridge.create_task(title="Trip", model=MODEL)
    await ctl.window.reload_tasks()
    model = ctl.window.sidebar.model

    def row(task_id: str, role=Qt.ItemDataRole.DisplayRole) -> str:
        return model.data(model.index(model.index_of[task_id]), role)

    labels = started_labels(model.tasks, model.untitled)
    assert [row(t.id) for t in (first, again)] == [f"Trip · {labels[first.id]}", f"Trip · {labels[again.id]}"]
    assert labels[first.id] != labels[again.id]
    groceries = next(t for t in model.tasks if t.title == "Groceries")
    assert row(groceries.id) == "Groceries"  # a title of its own needs no date
    assert row(first.id, Qt.ItemDataRole.ToolTipRole).startswith("Trip\nStarted ")


def test_started_labels_say_as_much_as_tells_rows_apart():
    def task(tid: str, title: str, at: tuple) -> SimpleNamespace:
        return SimpleNamespace(id=tid, title=title, created_at=time.mktime((2026, 12, 2, *at, 0, 0, -1)))

    rows = [task("a", "Trip", (9, 5, 0)), task("b", "Trip", (14, 2, 7)),  # different minutes
            task("c", "Plan", (10, 0, 1)), task("d", "Plan", (10, 0, 42)),  # one minute: to the second
            task("e", None, (11, 0, 3)), task("f", None, (11, 0, 3)),  # one second: numbered
            task("g", "Alone", (8, 0, 0))]
    assert started_labels(rows, "New task") == {
        "a": "2 Dec 09:05", "b": "2 Dec 14:02", "c": "2 Dec 10:00:01", "d": "2 Dec 10:00:42",
        "e": "2 Dec 11:00:03 (1)", "f": "2 Dec 11:00:03 (2)"}


def test_a_saved_messages_render_is_kept_and_reused():
    text = "## Plan\n\nSome **bold** words.\n\n```python\nprint('hi')\n```\n"
    first = MarkdownView(text + "(one)", cached=True)
    first.resize(600, 100)
    assert first.renders == 1
    shown = first.document().toPlainText()
    shiboken6.delete(first)  # the conversation dropped its widget: the kept render outlives it
    again = MarkdownView(cached=True)  # the same message, its widget made again after scrolling back
    again.resize(600, 100)
    again.set_text(text + "(one)")
    again.flush()
    assert again.renders == 0  # copied, not rendered
    assert again.document().toPlainText() == shown
    assert again.code_blocks == ["print('hi')"]
    QApplication.processEvents()
    assert again.height() > 20  # it still grows to fit its document
    assert MarkdownView(text + "(one)").renders == 1  # a view of streaming text keeps nothing
    light = again.document().toHtml()
    theme.apply("dark")
    try:
        dark = MarkdownView(text + "(one)", cached=True)
        assert dark.document().toHtml() != light  # the other theme's colours, never a copy of the light render
    finally:
        theme.apply("light")


def test_ctrl_enter_sends_the_typed_answer_to_a_question(qtbot):
    from app.conversation.waiting import WaitingBox

    box = WaitingBox({"request_id": "r1", "kind": "question", "prompt": "Which file?"})
    qtbot.addWidget(box)
    with qtbot.waitActive(box):
        box.show()
        box.activateWindow()
    box.edit.setFocus()
    QTest.keyClicks(box.edit, "notes.md")
    with qtbot.waitSignal(box.answered, timeout=2000) as sent:
        QTest.keyClick(box.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert sent.args == ["r1", "notes.md", False, ""] and not box.send.isEnabled()
