"""The window on a Hearth server (File ▸ Connect to a Server…), against real `hearth serve` processes and a loopback
model server. A person's turns — a new task's goal streamed, Stop, an approval in place, a panel closed and reopened
mid-turn, a message queued behind a running turn — are the same test bodies on this computer's tasks and on a
server's (the `window` fixture, the same model answering both). The person connects (a refused token is said in the
dialog), sees where the tasks live and what a server's task cannot have, and goes back to this computer's tasks in
one click. A server that goes away mid-turn is a state: the window says "reconnecting",
keeps what was typed in its box, then shows the rest of the turn, identical to the stored answer."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import keyring
import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLabel

from runtime.parts import text_of
from runtime.providers.openai_compat import OpenAICompatProvider
from tests.support import keyring_file
from tests.support.cluster import MODEL, Cluster
from tests.support.openai_server import Reply
from tests.support.qt_helpers import MODEL as SCRIPTED
from tests.support.qt_helpers import open_task, type_and_send, until
from tests.support.server_box import box, model  # noqa: F401  (fixtures)
from tests.support.services import free_port, postgres_server, redis_server  # noqa: F401  (fixtures)

# A stream left unfinished (a send's, a panel's) is closed by the loop, not by the garbage collector outside it.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture
def kept(tmp_path, monkeypatch) -> Path:
    """The system keyring, as a file the test can read (the real ones need a desktop session)."""
    before = keyring.get_keyring()  # chosen before the file is named: the file keyring is never the one put back
    path = tmp_path / "keyring.json"
    monkeypatch.setenv(keyring_file.ENV, str(path))
    keyring.set_keyring(keyring_file.FileKeyring())
    yield path
    keyring.set_keyring(before)


@pytest.fixture(autouse=True)
def fresh_script(model) -> None:  # noqa: F811
    model.forget_script()


async def connect(ctl, url: str, token: str):
    """File ▸ Connect to a Server…, the address and token typed, Connect clicked."""
    ctl.window.actions_by_name["Connect to a Server…"].trigger()
    dlg = ctl.connect_window
    dlg.url.setText(url)
    dlg.token.setText(token)
    QTest.mouseClick(dlg.connect_button, Qt.MouseButton.LeftButton)
    return dlg


async def connected(ctl) -> None:
    await until(lambda: ctl.bridge is not None and ctl.bridge.remote and ctl.window is not None
                and ctl.window._bridge is ctl.bridge, timeout=15, what="the server's tasks in the window")
    await ctl.window.loading


def stored_answer(messages, turn_id: str) -> str:
    return next(text_of(m.parts) for m in messages if m.role == "assistant" and m.turn_id == turn_id)


@pytest.fixture(params=["this computer", "a server"])
async def window(request, launch, box, model, kept):  # noqa: F811
    """The app on this computer's tasks or on the single box's, the same loopback model answering both."""
    if request.param == "this computer":
        return await launch(t=OpenAICompatProvider("t", model.base_url))
    cluster, api = box
    ctl = await launch()
    await connect(ctl, api.base_url, await cluster.user(uuid.uuid4().hex[:12]))
    await connected(ctl)
    return ctl


async def task_panel(ctl, title: str):
    task = await ctl.bridge.create_task(title=title, model=MODEL, memory=False)
    return await open_task(ctl, task.id)


async def streaming(panel) -> str:
    await until(lambda: panel.live_turn and len(panel.turn_text(panel.live_turn)) > 40, what="streaming")
    return panel.live_turn


async def settled(panel, timeout: float = 20.0) -> None:
    await until(lambda: panel.settled and panel.live_turn is None and not panel.bridge.running_tasks(),
                timeout=timeout, what="the turn's end")


# -- a person's turns, the same on this computer's tasks and on a server's --

async def test_a_new_tasks_goal_streams_into_its_panel_as_stored(window, model):  # noqa: F811
    model.script(Reply(["Hello ", "from ", "the model."]))
    new = window.window.new_task()
    new.goal.setPlainText("say hello")
    if window.bridge.remote:  # the server's default model; nothing of this computer's
        assert new.model is None and not new.planning.isVisible() and not new.memory.isVisible()
    else:
        new.model.setEditText(MODEL)
    QTest.mouseClick(new.create_button, Qt.MouseButton.LeftButton)
    panel = await until(lambda: window.window.panel, what="the new task's panel")
    await until(lambda: len(panel.conversation.assistant_items()) == 1, what="the answer")
    await settled(panel)
    said = await window.bridge.messages(panel.task_id)
    first = next(m.turn_id for m in said if m.role == "assistant")
    assert panel.turn_text(first) == stored_answer(said, first) == "Hello from the model."
    await until(lambda: window.window.sidebar.badge(panel.task_id) == "idle", what="the list")


async def test_stop_ends_the_running_turn_as_stored(window, model):  # noqa: F811
    panel = await task_panel(window, "Count")
    model.script(Reply.counting(5000, delay=0.01))
    type_and_send(panel, "count")
    stopped = await streaming(panel)
    await until(lambda: window.window.sidebar.badge(panel.task_id) == "running", what="the list")
    QTest.mouseClick(panel.composer.stop, Qt.MouseButton.LeftButton)
    await settled(panel)
    said = await window.bridge.messages(panel.task_id)
    assert panel.turn_text(stopped) == stored_answer(said, stopped) != ""
    assert [row["reason"] for row in await window.bridge.turns(panel.task_id)] == ["aborted"]


async def test_an_approval_is_answered_in_place(window, model):  # noqa: F811
    panel = await task_panel(window, "Say hi")
    model.script(Reply(chunks=[], tool_calls=[("c1", "run_shell", {"command": "echo hi"})], finish="tool_calls"),
                 Reply(["It said hi."]))
    type_and_send(panel, "say hi")
    await until(lambda: panel.waiting is not None and panel.waiting.isVisible(), timeout=15, what="the approval")
    QTest.mouseClick(panel.waiting.approve, Qt.MouseButton.LeftButton)
    await until(lambda: panel.waiting is None, what="the approval answered")
    await settled(panel)
    answered = (await window.bridge.messages(panel.task_id))[-1]
    assert text_of(answered.parts) == "It said hi." and panel.turn_text(answered.turn_id) == "It said hi."
    assert [c.state for c in panel.conversation.cards()] == ["done"]


async def test_a_panel_closed_mid_turn_replays_it_and_goes_on(window, model):  # noqa: F811
    panel = await task_panel(window, "Count slowly")
    model.script(Reply.counting(300, delay=0.01))
    type_and_send(panel, "count slowly")
    turn = await streaming(panel)
    task_id = panel.task_id
    window.window.close_panel()
    panel = await open_task(window, task_id)
    await until(lambda: panel.live_turn == turn, what="the turn followed again")
    await settled(panel)
    said = await window.bridge.messages(task_id)
    assert panel.turn_text(turn) == stored_answer(said, turn) == "".join(Reply.counting(300).chunks)


async def test_a_message_sent_while_a_turn_runs_is_queued_and_runs_next(window, model):  # noqa: F811
    panel = await task_panel(window, "Queue")
    model.script(Reply.counting(300, delay=0.01), Reply(["Second answer."]))
    type_and_send(panel, "count")
    first = await streaming(panel)
    assert panel.composer.send.text() == "Queue"
    type_and_send(panel, "and then this")
    await until(lambda: len(panel.conversation.assistant_items()) == 2, timeout=20, what="the queued turn")
    await settled(panel)
    said = await window.bridge.messages(panel.task_id)
    assert [m.text for m in said if m.role == "user"] == ["count", "and then this"]
    second = said[-1].turn_id
    assert panel.turn_text(first) == stored_answer(said, first) and panel.turn_text(second) == "Second answer."


# -- connecting, and what only a server's tasks do --

async def test_connecting_and_going_back_to_this_computer(launch, box, kept, home):  # noqa: F811
    cluster, api = box
    ctl = await launch()
    mine = await ctl.bridge.create_task(title="On this computer", model=SCRIPTED)
    await ctl.window.reload_tasks()
    assert ctl.window.sidebar.where.text() == "This computer"

    token = await cluster.user("ada")
    dlg = await connect(ctl, api.base_url, "not-my-token")
    await until(lambda: dlg.error.isVisible(), what="the refusal")
    assert "The server refused this token" in dlg.error.text() and not ctl.bridge.remote
    assert ctl.window.sidebar.where.text() == "This computer" and not kept.exists()
    dlg.token.setText(token)
    QTest.mouseClick(dlg.connect_button, Qt.MouseButton.LeftButton)
    await connected(ctl)
    window = ctl.window
    host = api.base_url.split("://")[1]
    assert window.sidebar.where.text() == f"server: {host}" and ctl.rt is None
    assert keyring_file.read(kept) == {f"hearth/server:{api.base_url}": token}
    assert not [p for p in home.rglob("*") if p.is_file() and token in p.read_text(errors="ignore")]
    assert ctl.prefs.server == api.base_url
    # What a server's task cannot have is not offered.
    assert not window.sidebar.tabs.isTabVisible(1) and not window.sidebar.tabs.isTabVisible(2)
    assert not window.sidebar.settings.isEnabled() and "server has its own" in window.sidebar.settings.toolTip()
    for name in ("New Chat", "New Team…", "Settings…", "Rename…", "Delete…", "Open Workspace Folder"):
        assert not window.actions_by_name[name].isVisible(), name
    assert window.actions_by_name["Use This Computer's Tasks"].isVisible()
    assert mine.id not in window.tasks
    panel = await task_panel(ctl, "There")
    assert not panel.composer.attach.isVisible() and not panel.commands.isVisible()
    assert any("lives on the Hearth server" in label.text() for label in panel.head.findChildren(QLabel))

    # One click back: this computer's tasks, its runtime opened again.
    window.actions_by_name["Use This Computer's Tasks"].trigger()
    await until(lambda: ctl.bridge is not None and not ctl.bridge.remote and ctl.window is not None
                and ctl.window._bridge is ctl.bridge, timeout=15, what="this computer's tasks")
    await ctl.window.loading
    assert ctl.window.sidebar.where.text() == "This computer" and ctl.rt is not None
    assert set(ctl.window.tasks) == {mine.id} and ctl.window.sidebar.tabs.isTabVisible(1)
    assert not ctl.window.actions_by_name["Use This Computer's Tasks"].isVisible()
    # The dialog offers the last server again, its token from the keyring.
    ctl.window.actions_by_name["Connect to a Server…"].trigger()
    await until(lambda: ctl.connect_window.token.text(), what="the kept token")
    assert (ctl.connect_window.url.text(), ctl.connect_window.token.text()) == (api.base_url, token)
    ctl.connect_window.close()


async def test_a_token_revoked_meanwhile_asks_for_a_new_one(launch, box, kept):  # noqa: F811
    cluster, api = box
    ctl = await launch()
    await connect(ctl, api.base_url, await cluster.user("eve"))
    await connected(ctl)
    panel = await task_panel(ctl, "Revoked")
    store = await cluster.store()
    try:
        await store.revoke_user("eve")
    finally:
        await store.aclose()
    type_and_send(panel, "still there?")
    dlg = await until(lambda: ctl.connect_window if ctl.connect_window and ctl.connect_window.isVisible() else None,
                      what="asked for a new token")
    assert dlg.error.text() == (f"The server refused this token (revoked, or never issued by {api.base_url}): give a "
                                "new one.")
    assert (dlg.url.text(), dlg.token.text()) == (api.base_url, "")
    assert panel.composer.edit.toPlainText() == "still there?"  # nothing typed is lost
    dlg.token.setText(await cluster.user("eve-again"))
    QTest.mouseClick(dlg.connect_button, Qt.MouseButton.LeftButton)
    await until(lambda: ctl.bridge not in (None, panel.bridge), timeout=15, what="connected with the new token")
    await connected(ctl)
    assert ctl.window.tasks == {}  # the new token's user has no tasks yet


async def test_a_spent_quota_is_said_and_the_message_kept(launch, box, kept):  # noqa: F811
    cluster, api = box
    ctl = await launch()
    await connect(ctl, api.base_url, await cluster.user("spent", quota_tokens=0))
    await connected(ctl)
    panel = await task_panel(ctl, "No quota")
    type_and_send(panel, "one more")
    await until(lambda: ctl.window.statusBar().currentMessage(), what="the sentence")
    assert ctl.window.statusBar().currentMessage() == ("Your token quota on this server is used up. Ask the server's "
                                                       "administrator for more.")
    assert panel.composer.edit.toPlainText() == "one more" and await ctl.bridge.messages(panel.task_id) == []


async def test_a_dropped_server_is_a_state_and_the_panel_misses_nothing(launch, model, kept, tmp_path,  # noqa: F811
                                                                         postgres_server, redis_server):  # noqa: F811
    """The API instance is killed mid-turn (its worker goes on) and started again on its port."""
    database = postgres_server.create_database()
    cluster = Cluster(tmp_path / "host", model.base_url, database=postgres_server.url(database),
                      redis=redis_server.url.rsplit("/", 1)[0] + "/6")
    try:
        port = free_port()
        api, _ = cluster.launch_api(port), await cluster.worker()
        await api.started()
        ctl = await launch()
        await connect(ctl, api.base_url, await cluster.user("dee"))
        await connected(ctl)
        window, bridge = ctl.window, ctl.bridge
        task = await bridge.create_task("count")
        panel = await open_task(ctl, task.id)
        reply = Reply.counting(1000, delay=0.005)
        model.script(reply, Reply(["got it"]))
        type_and_send(panel, "count")
        await until(lambda: panel.live_turn and len(panel.turn_text(panel.live_turn)) > 40, what="streaming")
        turn = panel.live_turn
        api.kill()
        await api.stopped()
        await until(lambda: "reconnecting" in window.sidebar.where.text(), what="the mark says it")
        assert panel.phase.text() == "● The server does not answer: reconnecting…" and panel.live_turn == turn
        type_and_send(panel, "typed meanwhile")
        await until(lambda: panel.composer.edit.toPlainText() == "typed meanwhile", what="the text kept")
        assert "Cannot reach the Hearth server" in window.statusBar().currentMessage()
        await cluster.launch_api(port).started()
        await until(lambda: window.sidebar.where.text() == f"server: 127.0.0.1:{port}", timeout=30,
                    what="connected again")
        await until(lambda: panel.settled and panel.live_turn is None, timeout=60, what="the rest of the turn")
        said = await bridge.messages(task.id)
        assert panel.turn_text(turn) == stored_answer(said, turn) == "".join(reply.chunks)
        QTest.keyClick(panel.composer.edit, Qt.Key.Key_Return)  # the kept text, sent now
        await until(lambda: len(panel.conversation.assistant_items()) == 2 and panel.settled, what="its answer")
        said = await bridge.messages(task.id)
        assert [m.text for m in said if m.role == "user"] == ["count", "typed meanwhile"]
        await ctl.shutdown()
        await asyncio.sleep(0)
    finally:
        cluster.stop()
        postgres_server.drop_database(database)
