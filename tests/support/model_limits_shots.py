"""Screenshots of what the window says about a model's limits (issue 28): an answer stopped because the model
repeated itself, with Retry; the built-in model saying it can only talk, with the way to Settings ▸ Models; and
how far a model has read before its first token. Run under a display (Xvfb, the xcb platform):

    xvfb-run -a -s "-screen 0 1280x800x24" env QT_QPA_PLATFORM=xcb \
        .venv/bin/python -m tests.support.model_limits_shots resources/screenshots

The first two play the bundled model's words with a scripted model under its name (the loop is the one SmolLM2
wrote without its repeat penalty); the third is the real bundled GGUF, added as a local model that is offered
tools, whose tool list the window reads ahead while the first message waits.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
import tempfile
from pathlib import Path

from runtime.providers.scripted import ScriptedModel
from tests.support.local_models import add_bundled_file
from tests.support.qt_helpers import until

BUNDLED = "builtin/smollm2-135m"
OPENING = ("I'm sorry for your loss. I'm sorry I can't help you with your meal. ")
LOOP = "I'm sorry I can't help you with your meal. "


async def _settle(seconds: float) -> None:
    await asyncio.sleep(seconds)  # lets Qt paint; processEvents() here would re-enter the qasync loop


async def _answered(ctl, title: str, text: str, model: ScriptedModel):
    task = await ctl.bridge.create_task(title=title, model=BUNDLED)
    await ctl.window.reload_tasks()
    panel = ctl.window.open_task(task.id)
    await asyncio.wait_for(panel.loaded.wait(), 10)
    panel.composer.edit.setPlainText(text)
    panel.composer.submit()
    await until(lambda: model.requests and not ctl.rt.tasks.is_running(task.id) and panel.settled, timeout=20)
    await _settle(1.0)


async def scripted_shots(home: Path, out: Path) -> None:
    from app.shell.application import HearthApp

    words = [c for c in re.findall(r"\S+\s*", OPENING + LOOP * 60)]
    model = ScriptedModel([words, ["I can't open your folders, but here is a way to sort notes: by topic, "
                                   "then by date, with one folder for each project."]], talk_only=True)
    ctl = HearthApp(home, providers={"builtin": model}, use_tray=False, preload_model=False)
    await ctl.start()
    try:
        ctl.window.resize(1100, 720)
        await _answered(ctl, "Dinner", "I'm vegetarian and my name is Sam. Suggest a dinner.", model)
        ctl.window.grab().save(str(out / "41-repeating-retry.png"))
        await _answered(ctl, "Notes", "Tidy my notes folder, please.", model)
        ctl.window.grab().save(str(out / "42-talk-only-notice.png"))
    finally:
        await ctl.shutdown()


async def progress_shot(home: Path, out: Path) -> None:
    from app.shell.application import HearthApp

    home.mkdir(parents=True)
    add_bundled_file(home)  # offered tools: the window reads its system prompt and tools ahead
    ctl = HearthApp(home, use_tray=False)
    await ctl.start()
    try:
        ctl.window.resize(1100, 720)
        model = await until(lambda: ctl.rt.providers.get("builtin")._model, timeout=60)
        await until(lambda: model.mutex.locked(), timeout=60)
        task = await ctl.bridge.create_task(title="Sums")
        await ctl.window.reload_tasks()
        panel = ctl.window.open_task(task.id)
        await asyncio.wait_for(panel.loaded.wait(), 10)
        panel.composer.edit.setPlainText("What is 2+2?")
        panel.composer.submit()
        await until(lambda: re.search(r"ready… [3-9]\d%", panel.phase.text()), timeout=120)
        await _settle(0.2)
        ctl.window.grab().save(str(out / "43-reading-progress.png"))
        await ctl.bridge.stop(task.id)
        await ctl.rt.wait_idle(task.id)
    finally:
        await ctl.shutdown()


async def shots(out: Path) -> None:
    from app.widgets import theme

    out.mkdir(parents=True, exist_ok=True)
    theme.apply("light")
    tmp = Path(tempfile.mkdtemp(prefix="hearth-limits-shots-"))
    try:
        await scripted_shots(tmp / "scripted", out)
        await progress_shot(tmp / "real", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from tests.support.qt_helpers import run_shots

    sys.exit(run_shots(shots))
