"""A conversation whose cost follows the screen: long tasks open at their last page, scroll back in pages, stream
live while the person reads far up; a sidebar of 1,000 tasks; queued inputs left over from a quit."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QWidget

from app.conversation.markdown import MarkdownView
from app.conversation.message_item import AssistantItem
from app.conversation.view import MAX_ITEMS, PAGE
from runtime.providers.base import TEXT
from runtime.providers.scripted import Call, Delay, ScriptedModel
from tests.support.qt_helpers import (
    MODEL,
    in_view,
    laid_out,
    open_task,
    screen_text,
    settled_place,
    type_and_send,
    until,
    wait_turns,
    wheel,
)
from tests.support.seed import seed_long_task, seed_tasks


def _rendered_ids(panel) -> list[int]:
    return [m.id for m in panel.conversation.messages]


async def _scroll_to_top_once(panel) -> None:
    conv = panel.conversation
    first = _rendered_ids(panel)[0]
    conv.verticalScrollBar().setValue(0)
    await until(lambda: _rendered_ids(panel)[0] != first or not conv.has_older, what="an older page")


def _shown(panel) -> list[tuple[int, str, str]]:
    return [(m.id, m.role, m.text) for m in panel.conversation.messages]


async def _wheel_up_a_page(panel) -> None:
    """Wheel up to the top of what is loaded, as a person flicking the wheel does, until the page before
    arrives."""
    conv = panel.conversation
    bar = conv.verticalScrollBar()
    first = _rendered_ids(panel)[0]
    while bar.value() > 0:
        before = bar.value()
        wheel(conv, 3)
        assert bar.value() < before, "the wheel did not scroll"
    await until(lambda: _rendered_ids(panel)[0] != first, what="an older page")


async def test_a_2000_message_task_opens_at_its_last_page_with_the_saved_text(launch):
    ctl = await launch()
    task_id = await seed_long_task(ctl.rt, 2000)
    panel = await open_task(ctl, task_id)
    everything = await ctl.rt.messages(task_id)
    shown = _rendered_ids(panel)
    assert len(shown) <= PAGE and shown == [m.id for m in everything[-len(shown):]]
    assert panel.conversation.has_older and not panel.conversation.has_newer
    by_id = {m.id: m for m in everything}
    for mid, item in panel.conversation.items.items():
        if isinstance(item, AssistantItem):
            assert item.block.text() == by_id[mid].text  # byte-identical to what was saved
    bar = panel.conversation.verticalScrollBar()
    assert bar.value() == bar.maximum()  # the newest message is in view


# Awkward text: what a person types and a model writes, kept byte for byte from the database to the screen.
FAMILY = "\U0001F468\u200d\U0001F469\u200d\U0001F467"  # one emoji of three, joined
TYPED = f"Is <b>this</b> bold? &amp; **or** `this`?\n\n\n# not a heading\n- nor a list {FAMILY}"
SPACED = "  leading and trailing spaces, a tab\there, naïve café 日本語 👍🏽  \n"
ANSWER_PROSE = f"Ça marche — \\*not italic\\*, 1\\. not a list, emoji 👍🏽 and {FAMILY} …"
ANSWER_CODE = "    indented = '  spaces kept  '\n\n\tprint(\"<b>\", '&amp;', \"\\\\n\")"
AWKWARD_ANSWER = f"  {ANSWER_PROSE}\n\n\n\n```python\n{ANSWER_CODE}\n```\ntrailing   "


def _check_text_on_screen(panel, saved) -> None:
    shown = {m.id: m for m in panel.conversation.messages}
    assert set(shown) == {m.id for m in saved}
    for m in saved:
        item = panel.conversation.items[m.id]
        if m.role == "user":
            assert screen_text(item.label) == m.text  # plain, as typed: no markup is interpreted
            continue
        # The answer's one text view renders exactly the saved text, as a fresh render of it does; what
        # Markdown leaves literal (escaped characters, code) reads back unchanged; Copy gives the saved bytes.
        (view,) = [w for w in item.block.findChildren(MarkdownView) if w.isVisible()]
        assert view.markdown == m.text
        on_screen = screen_text(view)
        assert on_screen == screen_text(MarkdownView(m.text))
        if m.text == AWKWARD_ANSWER:
            assert ANSWER_PROSE.replace("\\", "") in on_screen and ANSWER_CODE in on_screen
        item.copy.click()
        assert QApplication.clipboard().text() == m.text


async def test_the_text_on_screen_is_the_saved_text_byte_for_byte(launch):
    ctl = await launch(ScriptedModel([[AWKWARD_ANSWER[i:i + 7] for i in range(0, len(AWKWARD_ANSWER), 7)],
                                      ["Plain."]]))
    task = await ctl.bridge.create_task(title="Awkward", model=MODEL)
    other = await ctl.bridge.create_task(title="Other", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, TYPED)
    await wait_turns(ctl, panel, 1)
    await ctl.bridge.send(task.id, SPACED)  # as `hearth run` sends it: the composer would trim the spaces
    await wait_turns(ctl, panel, 2)
    saved = await ctl.rt.messages(task.id)
    assert [m.text for m in saved] == [TYPED, AWKWARD_ANSWER, SPACED, "Plain."]
    _check_text_on_screen(panel, saved)  # as the turns left it
    await open_task(ctl, other.id)
    _check_text_on_screen(await open_task(ctl, task.id), saved)  # read back, from kept renders


async def test_turns_queued_turns_and_switching_tasks_never_read_a_long_task_whole(launch):
    ctl = await launch(ScriptedModel([["Working on it ", Delay(0.5), "done."]] * 4))
    task_id = await seed_long_task(ctl.rt, 2000)
    other = await ctl.bridge.create_task(title="Other", model=MODEL)
    reads = []
    read_messages = ctl.bridge.messages

    async def counted(owner_id, **page):
        reads.append(page)
        return await read_messages(owner_id, **page)

    ctl.bridge.messages = counted
    panel = await open_task(ctl, task_id)
    type_and_send(panel, "first")
    await until(lambda: ctl.rt.tasks.is_running(task_id), what="the first turn running")
    type_and_send(panel, "second")  # queued behind it
    await until(lambda: panel.settled and not ctl.rt.tasks.is_running(task_id)
                and [m.text for m in panel.conversation.messages[-4::2]] == ["first", "second"], what="both turns")
    panel = await open_task(ctl, other.id)
    panel = await open_task(ctl, task_id)
    saved = await ctl.rt.messages(task_id)
    assert [m.text for m in panel.conversation.messages[-4:]] == [m.text for m in saved[-4:]]
    assert reads and all(page.get("limit") or page.get("after") for page in reads), reads


async def test_the_first_message_of_a_long_task_is_one_step_away(launch):
    ctl = await launch()
    task_id = await seed_long_task(ctl.rt, 2000)
    panel = await open_task(ctl, task_id)
    everything = [m.id for m in await ctl.rt.messages(task_id)]
    conv = panel.conversation
    ctl.window.actions_by_name["Go to First Message"].trigger()
    await until(lambda: _rendered_ids(panel)[0] == everything[0], what="the first page")
    assert _rendered_ids(panel) == everything[:len(_rendered_ids(panel))] and not conv.has_older
    assert conv.verticalScrollBar().value() == 0 and conv.has_newer
    await until(lambda: conv.jump.isVisibleTo(conv), what="the way back to the latest")
    ctl.window.actions_by_name["Go to Latest Message"].trigger()
    await until(lambda: _rendered_ids(panel)[-1] == everything[-1], what="the latest page")
    conv.setFocus()  # Home and End in the conversation do the same
    QTest.keyClick(conv, Qt.Key.Key_Home)
    await until(lambda: _rendered_ids(panel)[0] == everything[0], what="the first page, by Home")
    QTest.keyClick(conv, Qt.Key.Key_End)
    await until(lambda: _rendered_ids(panel)[-1] == everything[-1], what="the latest page, by End")
    assert ctl.window.actions_by_name["Go to First Message"].shortcut().toString() == "Alt+Home"


async def test_wheeling_up_a_2000_message_task_shows_every_message_once_in_order(launch):
    ctl = await launch()
    task_id = await seed_long_task(ctl.rt, 2000)
    panel = await open_task(ctl, task_id)
    conv = panel.conversation
    everything = await ctl.rt.messages(task_id)
    saved = [(m.id, m.role, m.text) for m in everything]
    position = {m.id: i for i, m in enumerate(everything)}
    seen = _shown(panel)
    assert seen == saved[-len(seen):]
    pages = 0
    while conv.has_older:
        first = seen[0][0]
        await _wheel_up_a_page(panel)
        pages += 1
        shown = _shown(panel)
        # The window is one unbroken stretch of the saved list, on screen in that order, each message once ...
        start = position[shown[0][0]]
        assert shown == saved[start:start + len(shown)]
        assert laid_out(conv) == [conv.items[m.id] for m in conv.messages]
        assert len(conv.items) <= MAX_ITEMS
        # ... that reaches just past where the person was: the page before it, joined without a gap.
        assert first in [mid for mid, _, _ in shown]
        seen = [m for m in shown if position[m[0]] < position[first]] + seen
    assert seen == saved
    assert pages == -(-(2000 - PAGE) // PAGE)  # one page read per wheel to the top, none twice
    # At the top, the newest messages are gone from the window; "jump to latest" brings them back.
    assert conv.has_newer and conv.jump.isVisibleTo(conv)
    conv.jump.click()
    await until(lambda: _rendered_ids(panel)[-1] == saved[-1][0], what="back at the latest page")
    assert not conv.has_newer


class HeldAnswer(ScriptedModel):
    """Streams its pieces but holds the last one until `go` is set: the turn stays live in between."""

    context_tokens = 1_000_000  # the whole seeded history fits: no summary request takes the script

    def __init__(self, *pieces: str):
        super().__init__([list(pieces)])
        self.last = pieces[-1]
        self.go = asyncio.Event()

    async def stream(self, request, *, on_queued=None):
        async for item in super().stream(request, on_queued=on_queued):
            if item == (TEXT, self.last):
                await self.go.wait()
            yield item


async def _jump_to_latest(conv, turn_id: str, shown: str):
    """Click "jump to latest" (it must be offered): the view lands at the bottom, on the turn's answer, the last
    item, with `shown` on screen there. Returns that item."""
    bar = conv.verticalScrollBar()
    await until(lambda: conv.jump.isVisibleTo(conv), what="jump to latest")
    conv.jump.click()
    await until(lambda: conv.live_item(turn_id) is not None and bar.value() == bar.maximum(), what="at the latest")
    item = conv.live_item(turn_id)
    await until(lambda: in_view(conv, item), what="the answer in view")
    assert laid_out(conv)[-1] is item and bar.value() == bar.maximum()
    (view,) = [w for w in item.block.findChildren(MarkdownView) if w.isVisible()]
    assert screen_text(view) == shown
    return item


async def _reading_pages_up(launch, pages: int):
    """A 400-message task open, the person `pages` pages up, a model that holds the end of its answer."""
    model = HeldAnswer("Fresh ", "answer ", "arrives.")
    ctl = await launch(model)
    task_id = await seed_long_task(ctl.rt, 400)
    panel = await open_task(ctl, task_id)
    for _ in range(pages):
        await _wheel_up_a_page(panel)
    return model, ctl, task_id, panel, panel.conversation


async def test_a_live_turn_streams_into_the_last_item_while_the_person_reads_higher_up(launch):
    # A page back: the newest messages are still rendered, screens below.
    model, ctl, task_id, panel, conv = await _reading_pages_up(launch, 1)
    bar = conv.verticalScrollBar()
    place = await settled_place(conv)
    assert not conv.has_newer and bar.maximum() - bar.value() > 2 * conv.viewport().height()
    await ctl.bridge.send(task_id, "one more question")
    await until(lambda: panel.live_turn is not None, what="the live turn")
    turn_id = panel.live_turn
    await until(lambda: (item := conv.live_item(turn_id)) is not None and item.block.text() == "Fresh answer ",
                what="the streamed text in its item")
    assert laid_out(conv)[-1] is conv.live_item(turn_id)
    assert [m.text for m in conv.messages[-2:]] == ["one more question", "Fresh answer "]
    assert (conv.view_state(), bar.value()) == place  # the person's place, not yanked down
    await _jump_to_latest(conv, turn_id, "Fresh answer")
    # Back to reading a little higher while it goes on: the rest arrives without moving the page, and the way
    # down is offered again.
    wheel(conv, 2)
    place = await settled_place(conv)
    assert not conv.jump.isVisibleTo(conv)
    model.go.set()
    await wait_turns(ctl, panel)
    assert await settled_place(conv) == place and conv.jump.isVisibleTo(conv)
    final = await _jump_to_latest(conv, turn_id, "Fresh answer arrives.")
    (saved,) = await ctl.rt.messages(task_id, limit=1)
    assert final.block.text() == saved.text == "Fresh answer arrives."


async def test_a_live_turn_streams_into_its_own_item_while_the_person_reads_far_up(launch):
    model, ctl, task_id, panel, conv = await _reading_pages_up(launch, 5)
    bar = conv.verticalScrollBar()
    assert conv.has_newer
    place = await settled_place(conv)
    await ctl.bridge.send(task_id, "one more question")
    await until(lambda: panel.live_turn is not None, what="the live turn")
    turn_id = panel.live_turn
    await until(lambda: panel.live[turn_id].text == "Fresh answer ", what="live text kept while not rendered")
    assert conv.live_item(turn_id) is None  # not rendered: the person reads far above
    assert (conv.view_state(), bar.value()) == place
    await _jump_to_latest(conv, turn_id, "Fresh answer")
    model.go.set()  # the rest streams in while the view is at the end: it follows
    await wait_turns(ctl, panel)
    (saved,) = await ctl.rt.messages(task_id, limit=1)
    final = conv.live_item(turn_id)
    assert final.block.text() == saved.text == "Fresh answer arrives."
    await until(lambda: bar.value() == bar.maximum() and in_view(conv, final), what="still following the end")
    assert laid_out(conv)[-1] is final and not conv.jump.isVisibleTo(conv)


async def test_an_approval_arriving_while_the_person_reads_far_up_isin_view_and_reachable(launch):
    model = ScriptedModel([[Call("run_shell", {"command": "ls"})], ["Listed."]])
    model.context_tokens = 1_000_000
    ctl = await launch(model)
    task_id = await seed_long_task(ctl.rt, 400)
    panel = await open_task(ctl, task_id)
    for _ in range(5):
        await _scroll_to_top_once(panel)
    await ctl.bridge.send(task_id, "list the files")
    await until(lambda: panel.waiting is not None and panel.waiting.isVisibleTo(panel),
                what="the approval box, whatever the scroll")
    assert "run_shell" in panel.waiting.heading.text()
    await until(lambda: panel.conversation.jump.isVisibleTo(panel.conversation), what="jump to latest")
    panel.waiting.approve.click()
    await until(lambda: len(model.requests) == 2, what="the approved call's answer")
    await ctl.rt.wait_idle(task_id)
    assert "Listed." in [m.text for m in await ctl.rt.messages(task_id, limit=3)]


async def test_queued_inputs_left_by_a_quit_offer_send_now_and_discard(launch, home):
    model = ScriptedModel([["busy ", Delay(30)]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Queue", model=MODEL)
    await ctl.bridge.send(task.id, "first")
    keep = await ctl.bridge.send(task.id, "keep me", queue=True)
    drop = await ctl.bridge.send(task.id, "drop me", queue=True)
    await ctl.shutdown()

    ctl = await launch(ScriptedModel([["kept and answered"]]))
    panel = await open_task(ctl, task.id)
    bubbles = {mid: panel.conversation.items[mid] for mid in (keep.message_id, drop.message_id)}
    buttons = {mid: {b.text(): b for b in w.findChildren(type(panel.composer.send))} for mid, w in bubbles.items()}
    assert set(buttons[keep.message_id]) >= {"Send now", "Discard"}
    buttons[drop.message_id]["Discard"].click()
    await until(lambda: drop.message_id not in panel.conversation.items, what="discarded")
    buttons[keep.message_id]["Send now"].click()
    await wait_turns(ctl, panel, 2)
    messages = await ctl.rt.messages(task.id)
    assert [m.text for m in messages if m.role == "user"] == ["first", "keep me"]
    assert messages[-1].text == "kept and answered"
    assert all(m.status != "queued" for m in messages)


async def test_a_thousand_task_sidebar_is_a_list_model_not_a_thousand_widgets(launch):
    ctl = await launch()
    await seed_tasks(ctl.rt, 1000)
    await ctl.window.reload_tasks()
    sidebar = ctl.window.sidebar
    assert sidebar.model.rowCount() == 1000
    assert len(sidebar.list.viewport().findChildren(QWidget)) < 5
    sidebar.list.setCurrentIndex(sidebar.model.index(500))
    await until(lambda: ctl.window.panel is not None, what="a panel for the clicked row")
    assert ctl.window.panel.task_id == sidebar.model.tasks[500].id


async def test_a_stale_task_list_never_closes_a_new_tasks_panel(launch):
    ctl = await launch()
    window = ctl.window
    real = ctl.bridge.list_tasks
    stale = await real()  # read before the new task exists

    async def slow_stale():
        await asyncio.sleep(0.3)
        return stale

    ctl.bridge.list_tasks = slow_stale
    old_reload = asyncio.ensure_future(window.reload_tasks())
    ctl.bridge.list_tasks = real
    await asyncio.sleep(0.01)
    info = await ctl.bridge.create_task(title="Brand new", model=MODEL)
    await window.reload_tasks()
    window.open_task(info.id)
    await old_reload  # lands last, with the older list
    assert window.panel is not None and window.panel.task_id == info.id
    assert info.id in window.tasks


async def test_scroll_position_and_open_cards_survive_a_switch_and_a_window_reopen(launch):
    ctl = await launch()
    long_id = await seed_long_task(ctl.rt, 300)
    other = await ctl.bridge.create_task(title="Other", model=MODEL)
    panel = await open_task(ctl, long_id)
    await _scroll_to_top_once(panel)
    card = panel.conversation.cards()[1]
    card.toggle.setChecked(True)
    await asyncio.sleep(0.3)  # text lays out after it is shown; the view keeps the place meanwhile
    anchor = panel.view_state()
    assert anchor[0] is not None and card.call_id in anchor[2]

    await open_task(ctl, other.id)
    panel = await open_task(ctl, long_id)
    await asyncio.sleep(0.3)
    assert panel.view_state()[:2] == anchor[:2]
    assert card.call_id in panel.conversation.expanded_calls()

    ctl.hide_window()
    ctl.show_main()
    await until(lambda: ctl.window.panel is not None and ctl.window.panel.loaded.is_set(), what="reopened")
    panel = ctl.window.panel
    assert panel.task_id == long_id
    await asyncio.sleep(0.3)
    assert panel.view_state()[:2] == anchor[:2]
    assert card.call_id in panel.conversation.expanded_calls()


async def test_two_inputs_queued_while_a_turn_runs_each_show_right_before_their_answer(launch):
    model = ScriptedModel([["busy ", Delay(0.5), "done."], ["Answer one."], ["Answer two."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Queue", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "first")
    await until(lambda: ctl.rt.tasks.is_running(task.id), what="the first turn running")
    type_and_send(panel, "second")
    type_and_send(panel, "third")
    await wait_turns(ctl, panel, 3)
    shown = [(m.role, m.text) for m in panel.conversation.messages]
    assert shown == [("user", "first"), ("assistant", "busy done."), ("user", "second"),
                     ("assistant", "Answer one."), ("user", "third"), ("assistant", "Answer two.")], [
        (m.id, m.role, m.text, m.status) for m in panel.conversation.messages]
    conv = panel.conversation
    assert sorted(conv.items) == sorted(m.id for m in conv.messages)  # no stale queued bubble
    assert laid_out(conv) == [conv.items[m.id] for m in conv.messages]  # and on screen in that order
    assert shown == [(m.role, m.text) for m in await ctl.rt.messages(task.id)]
