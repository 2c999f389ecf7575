"""The window on a Hearth server (File ▸ Connect to a Server…): against real `hearth serve` processes and a loopback
model server, the person connects (a refused token is said in the dialog), works a server's task as a local one —
stream, Stop, an approval in place, a panel closed and reopened mid-turn — sees where the tasks live, and goes back
to this computer's tasks in one click. A server that goes away mid-turn is a state: the window says "reconnecting",
keeps what was typed in its box, then shows the rest of the turn, identical to the stored answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import keyring
import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from runtime.parts import text_of
from tests.support import keyring_file
from tests.support.cluster import Cluster
from tests.support.openai_server import Reply
from tests.support.qt_helpers import MODEL, open_task, type_and_send, until
from tests.support.server_box import box, model  # noqa: F401  (fixtures)
from tests.support.services import free_port, postgres_server, redis_server  # noqa: F401  (fixtures)

# A stream left unfinished (a send's, a panel's) is closed by the loop, not by the garbage collector outside it.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture
def kept(tmp_path, monkeypatch) -> Path:
    """The system keyring, as a file the test can read (the real ones need a desktop session)."""
    path = tmp_path / "keyring.json"
    monkeypatch.setenv(keyring_file.ENV, str(path))
    before = keyring.get_keyring()
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


async def test_a_servers_tasks_in_the_window(launch, box, model, kept, home):  # noqa: F811
    cluster, api = box
    ctl = await launch()
    mine = await ctl.bridge.create_task(title="On this computer", model=MODEL)
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
    window, bridge = ctl.window, ctl.bridge
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

    # A new task, its goal sent: the turn streams into its panel, as the server stored it.
    model.script(Reply(["Hello ", "from ", "the server."]))
    new = window.new_task()
    assert new.model is None and not new.planning.isVisible()
    new.goal.setPlainText("say hello")
    QTest.mouseClick(new.create_button, Qt.MouseButton.LeftButton)
    panel = await until(lambda: window.panel, what="the new task's panel")
    assert not panel.composer.attach.isVisible() and not panel.commands.isVisible()
    task_id = panel.task_id
    await until(lambda: len(panel.conversation.assistant_items()) == 1 and panel.settled, what="the answer")
    said = await bridge.messages(task_id)
    first = next(m.turn_id for m in said if m.role == "assistant")
    assert panel.turn_text(first) == stored_answer(said, first) == "Hello from the server."
    await until(lambda: window.sidebar.badge(task_id) == "idle", what="the list")

    # Stop ends the running turn; the panel shows what the server kept.
    model.script(Reply.counting(5000, delay=0.01))
    type_and_send(panel, "count")
    await until(lambda: panel.live_turn and len(panel.turn_text(panel.live_turn)) > 40, what="streaming")
    stopped = panel.live_turn
    assert window.sidebar.badge(task_id) == "running"
    QTest.mouseClick(panel.composer.stop, Qt.MouseButton.LeftButton)
    await until(lambda: panel.settled and panel.live_turn is None, timeout=15, what="stopped")
    said = await bridge.messages(task_id)
    assert panel.turn_text(stopped) == stored_answer(said, stopped) != ""

    # An approval is answered in place, and its turn goes on in the same panel.
    model.script(Reply(chunks=[], tool_calls=[("c1", "run_shell", {"command": "echo hi"})], finish="tool_calls"),
                 Reply(["It said hi."]))
    type_and_send(panel, "say hi")
    await until(lambda: panel.waiting is not None and panel.waiting.isVisible(), timeout=15, what="the approval")
    QTest.mouseClick(panel.waiting.approve, Qt.MouseButton.LeftButton)
    await until(lambda: panel.waiting is None and panel.settled and bridge.running_tasks() == [], timeout=15,
                what="the approved turn")
    said = await bridge.messages(task_id)
    answered = said[-1]
    assert text_of(answered.parts) == "It said hi." and panel.turn_text(answered.turn_id) == "It said hi."

    # Closed mid-turn and opened again: the panel replays the turn and goes on with it.
    model.script(Reply.counting(300, delay=0.01))
    type_and_send(panel, "count slowly")
    await until(lambda: panel.live_turn and len(panel.turn_text(panel.live_turn)) > 40, what="streaming")
    turn = panel.live_turn
    window.close_panel()
    panel = await open_task(ctl, task_id)
    await until(lambda: panel.live_turn == turn, what="the turn followed again")
    await until(lambda: panel.settled and panel.live_turn is None, timeout=20, what="the rest of the turn")
    said = await bridge.messages(task_id)
    assert panel.turn_text(turn) == stored_answer(said, turn) == "".join(Reply.counting(300).chunks)

    # One click back: this computer's tasks, its runtime opened again.
    window.actions_by_name["Use This Computer's Tasks"].trigger()
    await until(lambda: ctl.bridge is not None and not ctl.bridge.remote and ctl.window is not None
                and ctl.window._bridge is ctl.bridge, timeout=15, what="this computer's tasks")
    await ctl.window.loading
    assert ctl.window.sidebar.where.text() == "This computer" and ctl.rt is not None
    assert set(ctl.window.tasks) == {mine.id} and ctl.window.sidebar.tabs.isTabVisible(1)
    assert not ctl.window.actions_by_name["Use This Computer's Tasks"].isVisible()


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
