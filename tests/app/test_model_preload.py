"""The default model loads in the background once the window shows its tasks (issue 12): the bundled model (which
can only talk: no tools, so no prompt prefix worth evaluating ahead) is loaded before anything is sent; a local
model that is offered tools has its prompt prefix evaluated and saved, the first send finds it ready, and a send
that comes while it is read says how far the reading got (issue 28); quitting while it warms stops it; a default
model with nothing to load is left alone, and one whose file is missing costs a line in the log, never a
traceback or a message on screen."""

from __future__ import annotations

import json
import logging
import re

import pytest

from app.shell.application import HearthApp
from tests.support.local_models import add_bundled_file
from tests.support.qt_helpers import open_task, type_and_send, until, wait_turns


@pytest.fixture
def fresh():
    """No model loaded yet, as in a new process."""
    from runtime.providers.llama.provider import unload_models

    unload_models()
    yield
    unload_models()


def loaded(ctl: HearthApp):
    """The local model as the app's runtime loaded it (None until it is loaded)."""
    return ctl.rt.providers.get("builtin")._model


@pytest.mark.slow_model
async def test_the_bundled_model_is_loaded_before_the_first_send(home, fresh):
    ctl = HearthApp(home, use_tray=False)
    try:
        await ctl.start()
        assert ctl.startup_error is None and await ctl.rt.list_tasks() == []
        assert await until(lambda: ctl.model_preload.done() and ctl.model_preload.result(), timeout=120,
                           what="the default model loaded")
        assert loaded(ctl) is not None and loaded(ctl).prefix_status == ""  # no tools: no prefix to read ahead
        assert not (home / "cache" / "kv-prefix").exists() and await ctl.rt.list_tasks() == []

        task = await ctl.bridge.create_task(title="Sums")  # the default model: the bundled one
        panel = await open_task(ctl, task.id)
        type_and_send(panel, "What is 2+2?")
        phases: list[str] = []  # what the panel says while the turn runs, looked at every 10 ms
        await until(lambda: phases.append(panel.phase.text()) or (
            panel.conversation.assistant_items() and panel.settled), timeout=120, what="the answer")
        await wait_turns(ctl, panel)
        assert not [p for p in phases if "Getting the model ready" in p or "Loading" in p]  # it was ready
        assert panel.conversation.assistant_items()[-1].block.text().strip()
    finally:
        await ctl.shutdown()


@pytest.mark.slow_model
async def test_a_local_model_with_tools_is_warmed_and_a_send_meanwhile_says_how_far(home, fresh):
    add_bundled_file(home)  # the default model: a small local model that is offered tools
    ctl = HearthApp(home, use_tray=False)
    try:
        await ctl.start()
        await until(lambda: loaded(ctl) is not None and loaded(ctl).mutex.locked(), timeout=60,
                    what="the prompt prefix being evaluated")
        task = await ctl.bridge.create_task(title="Sums")
        panel = await open_task(ctl, task.id)
        type_and_send(panel, "What is 2+2?")  # while the window's warm-up reads the system prompt and tools
        said = await until(lambda: re.search(r"Getting the model ready… ([1-9]\d*)%", panel.phase.text()),
                           timeout=120, what="how far the warm-up has read")
        print(f"\nthe panel said: {said.group(0)!r}")
        assert await until(lambda: ctl.model_preload.done() and ctl.model_preload.result(), timeout=120,
                           what="the warm-up done")
        assert list((home / "cache" / "kv-prefix").glob("*.kv"))  # evaluated at window open, kept for next time
        await until(lambda: loaded(ctl).prefix_status == "warm", timeout=60, what="the first step's prefix")
        await ctl.bridge.stop(task.id)  # found in the model's memory, not evaluated again: enough
        await ctl.rt.wait_idle(task.id)
    finally:
        await ctl.shutdown()


@pytest.mark.slow_model
async def test_quitting_while_the_model_warms_stops_the_evaluation(home, fresh):
    add_bundled_file(home)
    ctl = HearthApp(home, use_tray=False)
    try:
        await ctl.start()
        await until(lambda: loaded(ctl) is not None and loaded(ctl).mutex.locked(), timeout=60,
                    what="the prompt prefix being evaluated")
        model = loaded(ctl)
    finally:
        await ctl.shutdown()
    assert ctl.model_preload.cancelled()
    assert not model.mutex.locked()  # no thread evaluating after the app shut down
    assert model.prefix_status == "stopped" and not list((home / "cache" / "kv-prefix").glob("*.kv"))


async def test_a_default_model_with_nothing_to_load_is_left_alone(launch, home, caplog):
    caplog.set_level(logging.INFO)
    (home / "settings.json").write_text(json.dumps({"default_model": "scripted/test"}))
    ctl = await launch(preload_model=True)
    assert await ctl.model_preload is False  # asked, and nothing to do: not a local model
    assert not (home / "cache" / "kv-prefix").exists()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or "preloading" in r.getMessage()]


async def test_a_missing_model_file_is_logged_in_a_sentence_and_shows_nothing(launch, home, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    gone = tmp_path / "moved-away.gguf"
    settings = {"providers": [{"id": "mine", "kind": "llama_cpp", "model_path": str(gone)}],
                "default_model": "mine/moved-away"}
    (home / "settings.json").write_text(json.dumps(settings))
    ctl = await launch(preload_model=True)
    assert await ctl.model_preload is False
    (record,) = [r for r in caplog.records if "preloading the default model failed" in r.getMessage()]
    assert f"Model file not found: {gone}" in record.getMessage() and record.exc_info is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING] and "Traceback" not in caplog.text
    assert ctl.startup_error is None and ctl.window.statusBar().currentMessage() == ""
