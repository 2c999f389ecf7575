"""What the window says about a model's limits: an answer cut off because the model repeated itself ends marked,
with Retry (not Continue); a model that can only talk says so once per task when asked for files or commands,
with one click to Settings ▸ Models; and a step that waits for the model to read says how far it got."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.conversation.message_widgets import Notice
from runtime.providers.scripted import Delay, ScriptedModel, Waiting
from tests.support.qt_helpers import MODEL, open_task, type_and_send, until, wait_turns

LOOP = "I can make a vegetarian meal with a vegan meal. I can even make a vegetarian meal with a vegan meal. "


def words(text: str) -> list[str]:
    return [text[i : i + 4] for i in range(0, len(text), 4)]


async def test_an_answer_that_repeats_itself_ends_marked_with_retry(launch):
    model = ScriptedModel([words(LOOP * 100), ["A lentil curry."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Dinner", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "Suggest a vegetarian dinner.")
    await wait_turns(ctl, panel)
    (item,) = panel.conversation.assistant_items()
    assert "stopped: the model was repeating itself" in item.footer.text() and "done" not in item.footer.text()
    banner = item.banner
    assert banner is not None and "repeating itself" in banner.label.text()
    assert banner.button.text() == "Retry" and banner.button.isVisibleTo(panel)
    assert not item.go_on.isVisibleTo(panel) and not item.retry.isVisibleTo(panel)  # one way on, in the banner
    assert len(item.block.text()) < 10 * len(LOOP)
    QTest.mouseClick(banner.button, Qt.MouseButton.LeftButton)
    await wait_turns(ctl, panel, 2)
    assert panel.conversation.assistant_items()[-1].block.text() == "A lentil curry."
    assert [m["role"] for m in model.requests[-1].messages] == ["system", "user"]  # another answer, not more


def notices(panel) -> list[Notice]:
    return [n for item in panel.conversation.assistant_items() for n in item.findChildren(Notice)]


async def test_a_model_that_can_only_talk_says_so_once_with_the_way_to_settings(launch):
    ctl = await launch(ScriptedModel([["I tidied it."], ["Here they are."]], talk_only=True))
    task = await ctl.bridge.create_task(title="Notes", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "Tidy my notes folder, please.")
    await wait_turns(ctl, panel)
    (notice,) = await until(lambda: notices(panel), what="the notice")
    assert "can only talk" in notice.label.text() and notice.isVisibleTo(panel)
    type_and_send(panel, "Now list the files in it.")
    await wait_turns(ctl, panel, 2)
    assert len(notices(panel)) == 1  # once per task

    QTest.mouseClick(notice.button, Qt.MouseButton.LeftButton)
    settings = await until(lambda: ctl.settings_window, what="Settings")
    assert settings.tabs.currentWidget() is settings.models
    assert settings.models.currentWidget() is settings.local_models and settings.isVisible()

    panel = await open_task(ctl, task.id)  # read back from what was saved: still there, still once
    assert len(await until(lambda: notices(panel), what="the saved notice")) == 1


async def test_the_panel_shows_how_far_the_model_has_read(launch):
    ctl = await launch(ScriptedModel([[Waiting("Getting the model ready… 40%"), Delay(0.6),
                                       Waiting("Reading your message… 40%"), Delay(0.6), "Here."]]))
    task = await ctl.bridge.create_task(title="Read", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "hello?")
    for words_ in ("Getting the model ready… 40%", "Reading your message… 40%"):
        await until(lambda w=words_: w in panel.phase.text() and panel.phase.isVisibleTo(panel), what=words_)
    await wait_turns(ctl, panel)
    assert panel.phase.isHidden()
