"""A streaming text part is laid out in chunks cut at blank lines outside code fences; each settled chunk is
rendered once, only the tail is re-rendered as text arrives."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel

from app.conversation.markdown_stream import StreamingMarkdown, settle_point


def test_a_cut_falls_on_the_last_blank_line_far_enough_in():
    text = "a" * 10 + "\n\n" + "b" * 10 + "\n\n" + "c" * 10 + "\n\n" + "still writi"
    assert settle_point(text, 0, chunk=100) is None  # not enough text yet
    assert settle_point(text, 0, chunk=5) == text.index("still")
    assert settle_point(text, 0, chunk=13) == text.index("still")
    assert settle_point(text, text.index("c"), chunk=5) == text.index("still")
    assert settle_point("x" * 50 + "\n\nno line end yet", 0, chunk=60) is None


def test_no_cut_inside_a_code_fence():
    code = "```python\nx = 1\n\n\ny = 2\n```\n"
    text = "intro\n\n" + code + "after"
    # The blank lines inside the fence are not cuts; the first cut after it is past the closing fence.
    assert settle_point(text, 0, chunk=len("intro\n\n") + 1) is None
    closed = text + "\n\nmore"
    assert settle_point(closed, 0, chunk=len("intro\n\n") + 1) == closed.index("more")
    # A fence still open at the end: nothing after its opening is a cut.
    assert settle_point("p\n\n~~~\na\n\nb\n\n", 0, chunk=4) is None


def test_only_the_tail_is_re_rendered(qtbot):
    view = StreamingMarkdown()
    qtbot.addWidget(view)
    paragraphs = [f"Paragraph {i}: " + "word " * 80 for i in range(40)]
    paragraphs[10] = "```python\nprint('kept whole')\n\n\nprint('still code')\n```"
    renders_then = {}
    for i, p in enumerate(paragraphs):
        view.add_text(p + "\n\n")
        view.request_render()
        if i == 20:
            renders_then = {v: v.renders for v in view.views[:-1]}
    view.flush()
    expected = "\n\n".join(paragraphs) + "\n\n"
    assert view.markdown == expected
    assert len(renders_then) >= 4 and len(view.views) > len(renders_then) + 2
    assert all(v.renders == n for v, n in renders_then.items())  # a settled chunk is not laid out again
    assert "\n\n".join(v.markdown for v in view.views).strip() == expected.strip()
    assert any("print('still code')" in v.markdown and "print('kept whole')" in v.markdown for v in view.views)
    assert all(v.markdown.count("```") % 2 == 0 for v in view.views)  # no chunk cut inside the fence
    assert len(view.tail.markdown) < 2000 + 500


def test_the_whole_text_at_once_is_one_view_again(qtbot):
    view = StreamingMarkdown()
    qtbot.addWidget(view)
    for _ in range(30):
        view.add_text("A line of a longer answer " * 10 + "\n\n")
        view.request_render()
    assert len(view.views) > 1
    view.set_text("Replaced.")
    view.flush()
    assert len(view.views) == 1 and view.tail.markdown == "Replaced." and view.markdown == "Replaced."


def test_a_running_answer_re_made_from_its_parts_streams_in_chunks_a_saved_one_is_one_view(qtbot):
    from app.conversation.markdown import MarkdownView
    from app.conversation.message_widgets import AssistantBlock

    text = "".join(f"Paragraph {i}: " + "word " * 60 + "\n\n" for i in range(40))
    live = AssistantBlock(live=True)  # e.g. a task opened while its turn runs: the text so far comes as parts
    qtbot.addWidget(live)
    live.set_parts([{"type": "text", "text": text}])
    view = live.parts[0]
    assert isinstance(view, StreamingMarkdown) and len(view.views) == 2 and view.markdown == text
    live.add_delta("text", 0, "More.")
    live.render_changed()
    assert view.views[0].renders == 1 and view.markdown == text + "More."
    saved = AssistantBlock()
    qtbot.addWidget(saved)
    saved.set_parts([{"type": "text", "text": text}])
    assert isinstance(saved.parts[0], MarkdownView)


def test_a_live_warning_with_a_code_gets_its_link(qtbot):
    from app.conversation.message_item import AssistantItem, Message
    from runtime.events import WarningEvent

    item = AssistantItem(Message(7, "assistant", [], "streaming", "turn1", live=True))
    qtbot.addWidget(item)
    wanted = []
    item.settings_clicked.connect(wanted.append)
    item.apply([WarningEvent(task_id="t", turn_id="turn1", message="MCP server 'calc' is paused.", code="mcp_paused"),
                WarningEvent(task_id="t", turn_id="turn1", message="Something else.")])
    labels = [w for w in item.findChildren(QLabel) if w.text().startswith("⚠")]
    assert "Review the change…" in labels[0].text() and "Review" not in labels[1].text()
    labels[0].linkActivated.emit("permissions")
    assert wanted == ["permissions"]
