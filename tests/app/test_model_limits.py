"""What the window says about a model's limits: an answer cut off because the model repeated itself ends marked,
with Retry (not Continue)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from runtime.providers.scripted import ScriptedModel
from tests.support.qt_helpers import MODEL, open_task, type_and_send, wait_turns

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

