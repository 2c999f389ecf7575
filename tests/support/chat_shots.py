"""Screenshot of a chat whose model wants to save a memory: the approval box above the composer, the memory card
waiting in the answer. Run under a display (Xvfb):

    xvfb-run -a -s "-screen 0 1280x800x24" .venv/bin/python -m tests.support.chat_shots resources/screenshots
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from runtime.providers.scripted import Call, ScriptedModel
from tests.support.qt_helpers import until

MODEL = "scripted/demo"
NOTE = {"command": "create", "path": "diet.md",
        "content": "Sam is vegetarian.\nSaid in a chat while asking for dinner ideas."}


async def shots(out: Path) -> None:
    from app.chats.panel import ChatPanel
    from app.shell.application import HearthApp

    tmp = Path(tempfile.mkdtemp(prefix="hearth-chat-shots-"))
    model = ScriptedModel([["Noted, I'll keep that in mind for next time.", Call("memory", NOTE)],
                           ["Saved."]], title="Vegetarian dinners")
    ctl = HearthApp(tmp / "home", providers={"scripted": model}, use_tray=False, preload_model=False)
    await ctl.start()
    try:
        await ctl.rt.save_settings(ctl.rt.settings.model_copy(update={"default_model": MODEL}))
        win = ctl.window
        win.resize(1180, 720)
        win.show()
        chat = await ctl.bridge.create_chat(model=MODEL)
        await ctl.rt.chats.send(chat.id, "I'm vegetarian, by the way. Remember that?")
        await ctl.rt.chats.wait_idle(chat.id)
        await win.reload_tasks()
        win.open_chat(chat.id)
        await until(lambda: isinstance(win.panel, ChatPanel) and win.panel.waiting is not None, what="the box")
        await asyncio.sleep(0.8)  # lets Qt paint; processEvents() here would re-enter the qasync loop
        win.grab().save(str(out / "33-chat-memory-approval.png"))
    finally:
        await ctl.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from tests.support.qt_helpers import run_shots

    sys.exit(run_shots(shots))
