"""Seed a data folder with example tasks and run (or photograph) the desktop app on a scripted model.

    .venv/bin/python -m tests.support.app_demo --home /tmp/hearth-demo          # run the app on the demo data
    .venv/bin/python -m tests.support.app_demo --shots resources/screenshots    # write the README screenshots

Seeded tasks: a finished turn with Markdown and a code block (and a tool card), an approval waiting, an
interrupted turn. While the app runs, a further task streams with a long-running tool call.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from runtime.api import Runtime
from runtime.providers.scripted import Call, Delay, Fail, Reasoning, ScriptedModel, StepUsage
from runtime.tools.base import Effect, FunctionTool

ANSWER = """Here is a small, tidy layout for the project:

## Layout

- `photos/` — the originals, never modified
- `rename.py` — the script below
- `notes.md` — what was renamed, for undo

## The script

```python
from datetime import datetime
from pathlib import Path

def rename_by_date(folder: Path) -> int:
    \"\"\"Rename every JPEG to its modification date.\"\"\"
    count = 0
    for photo in sorted(folder.glob("*.jpg")):
        stamp = datetime.fromtimestamp(photo.stat().st_mtime)
        photo.rename(folder / f"{stamp:%Y-%m-%d_%H%M%S}.jpg")
        count += 1  # one more done
    return count
```

Run it with `python rename.py photos/`. It prints how many files it renamed; **nothing is deleted**.
"""


async def _slow(args, ctx):
    await asyncio.sleep(float(args.get("seconds", 120)))
    return "Total: 12.4 GB in 3,812 files\nLargest: videos/holiday.mp4 (2.1 GB)"


SLOW_TOOL = FunctionTool(
    name="disk_usage",
    description="Measure how much space a folder uses.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}, "seconds": {"type": "number"}}},
    effect=Effect.read_only,
    fn=_slow,
)


async def seed(home: Path) -> dict[str, str]:
    """Create the demo tasks; returns their ids by role."""
    model = ScriptedModel()
    rt = await Runtime.open(home, providers={"scripted": model}, tools=[SLOW_TOOL])
    ids: dict[str, str] = {}
    (home / "notes.txt").write_text("photos from 2019-2024\n")

    t = await rt.create_task(title="Rename my photos by date", model="scripted/demo")
    ids["finished"] = t.id
    model.add_steps(
        [Reasoning("The person wants a script. First check what is in the workspace."),
         "Let me look at the workspace first.", Call("list_files", {"path": "."}), StepUsage(812, 24)],
        [*(ANSWER[i:i + 40] for i in range(0, len(ANSWER), 40)), StepUsage(1290, 242)],
    )
    await rt.send(t.id, "Write a Python script that renames my photos by the date they were taken.")
    await rt.wait_idle(t.id)

    t = await rt.create_task(title="Tidy the downloads folder", model="scripted/demo", approval="ask")
    ids["approval"] = t.id
    model.add_steps(["I will move the old installers into an archive folder.",
                     Call("run_shell", {"command": "mkdir -p archive && mv *.dmg *.exe archive/"}),
                     StepUsage(640, 38)])
    await rt.send(t.id, "Clean up my downloads: archive old installers.")
    await rt.wait_idle(t.id)

    t = await rt.create_task(title="Back up the thesis drafts", model="scripted/demo")
    ids["interrupted"] = t.id
    model.add_steps(["Copying the drafts to the backup folder. This can take a while…",
                     Call("disk_usage", {"path": "thesis/"})])
    await rt.send(t.id, "Back up all my thesis drafts.")
    await asyncio.sleep(0.3)
    await rt.aclose()  # the app "quit" mid-turn: the turn is now interrupted
    return ids


def live_model() -> ScriptedModel:
    """The model for the app run: a turn that streams, then sits in a long tool call."""
    text = "Sure. I'll measure the big folders first, then suggest what to move to the external drive."
    return ScriptedModel([[*(text[i:i + 6] for i in range(0, len(text), 6)), Delay(0.1),
                           Call("disk_usage", {"path": "~/", "seconds": 600}), StepUsage(530, 31)]],
                         chunk_delay=0.02)


async def _settle(seconds: float) -> None:
    # Plain sleeping lets Qt paint; QApplication.processEvents() here would re-enter the qasync loop.
    await asyncio.sleep(seconds)


async def shots(out: Path) -> None:
    """Write the screenshots. Runs inside a qasync loop."""
    from app.shell.application import HearthApp
    from app.widgets import theme

    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="hearth-shots-"))
    try:
        empty = HearthApp(tmp / "empty", use_tray=False, preload_model=False)  # the shots are of the UI
        await empty.start()
        await _settle(0.5)
        empty.window.grab().save(str(out / "01-first-start.png"))
        await empty.shutdown()

        home = tmp / "demo"
        home.mkdir()
        ids = await seed(home)
        live = live_model()
        ctl = HearthApp(home, providers={"scripted": live, "local": chat_model(), **team_models()},
                        tools=[SLOW_TOOL], use_tray=False, preload_model=False)
        await ctl.start()
        win = ctl.window
        panel = win.open_task(ids["finished"])
        await _settle(0.8)
        for card in panel.conversation.cards():
            card.toggle.setChecked(True)
        reasoning = [w for e in panel.conversation.items.values() for w in getattr(
            getattr(e, "block", None), "parts", {}).values() if hasattr(w, "toggle") and hasattr(w, "view")]
        for r in reasoning:
            r.toggle.setChecked(True)
        await _settle(0.4)
        win.grab().save(str(out / "02-finished-markdown.png"))

        task = await ctl.bridge.create_task(title="Free up disk space", model="scripted/demo")
        await win.reload_tasks()
        panel = win.open_task(task.id)
        await _settle(0.3)
        panel.composer.edit.setPlainText("My disk is almost full. What can I move to the external drive?")
        panel.composer.submit()
        await _settle(3.0)
        win.grab().save(str(out / "03-running-tool.png"))

        win.open_task(ids["approval"])
        await _settle(0.8)
        win.grab().save(str(out / "04-approval-waiting.png"))

        win.open_task(ids["interrupted"])
        await _settle(0.8)
        win.grab().save(str(out / "05-interrupted.png"))

        settings = ctl.open_settings()
        settings.providers.add_preset("ollama", ["llama3.2", "qwen2.5-coder"])
        settings.providers.add_preset("openai")
        settings.providers.list.setCurrentRow(1)
        await _settle(0.6)
        settings.grab().save(str(out / "06-settings.png"))
        await ctl.rt.permissions.add_rule("run_shell", "allow", command="git status", task_id=ids["approval"])
        await ctl.rt.permissions.add_rule("run_shell", "deny", command="rm -rf")
        settings.tabs.setCurrentWidget(settings.permissions)
        await settings.permissions.refresh()
        await _settle(0.4)
        settings.grab().save(str(out / "16-permissions.png"))
        await add_rule_shot(settings, out)
        settings.close()

        dialog = win.new_task("Summarise the meeting notes I attach and draft a short reply")
        await _settle(0.5)
        dialog.grab().save(str(out / "08-new-task.png"))
        dialog.close()

        theme.apply("dark")
        win.open_task(ids["finished"])
        await _settle(0.8)
        win.grab().save(str(out / "07-dark-theme.png"))
        theme.apply("light")
        await everyday_shots(ctl, out, ids)
        await chat_shot(ctl, out)
        await team_shot(ctl, out)
        await unsandboxed_shot(ctl, live, out)
        await ctl.shutdown()
        await broken_settings_shot(tmp / "broken", out)
        (tmp / "servers").mkdir()
        await model_picker_shot(tmp / "servers", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def everyday_shots(ctl, out: Path, ids: dict[str, str]) -> None:
    """A long task, a continued answer, an approval after it was given, the model picker."""
    from tests.support.seed import seed_long_task

    win = ctl.window
    long_id = await seed_long_task(ctl.rt, 2000, title="Reading group notes, all year", model="scripted/demo")
    await win.reload_tasks()
    panel = win.open_task(long_id)
    await _settle(0.8)
    panel.conversation.verticalScrollBar().setValue(0)
    await _settle(1.0)
    win.grab().save(str(out / "09-long-task-paged.png"))

    model = ctl._providers["scripted"]
    model.add_steps(["The three colours of the French flag are blue, white"], [" and red."])
    task = await ctl.bridge.create_task(title="Flags", model="scripted/demo")
    await ctl.bridge.send(task.id, "Which colours are on the French flag?")
    await ctl.rt.wait_idle(task.id)
    await ctl.bridge.continue_task(task.id)
    await ctl.rt.wait_idle(task.id)
    await win.reload_tasks()
    win.open_task(task.id)
    await _settle(0.8)
    win.grab().save(str(out / "10-continued-answer.png"))

    panel = win.open_task(ids["approval"])
    await _settle(0.5)
    model.add_steps(["Done: the installers are in archive/."])
    panel.waiting.approve.click()
    await _settle(1.5)
    win.grab().save(str(out / "11-approval-after.png"))


def chat_model() -> ScriptedModel:
    return ScriptedModel([
        ["A starter is a pet that lives in a jar, so a pun works well: **Clint Yeastwood**, **Bread Pitt** or "
         "**Doughlene**. Pick one you will enjoy saying when you feed it."],
        ["Feed it every 12 hours at room temperature: discard half, then add equal weights of flour and water "
         "(say 50 g each). In the fridge, once a week is enough."],
    ], chunk_delay=0.0, title="Sourdough starter names")


async def chat_shot(ctl, out: Path) -> None:
    """A chat with a model change between its answers, in the Chats tab."""
    win = ctl.window
    chat = await ctl.bridge.create_chat(model="local/qwen2.5-3b")
    await ctl.rt.chats.send(chat.id, "Name ideas for my sourdough starter?")
    await ctl.rt.chats.wait_idle(chat.id)
    for _ in range(100):  # the model's title replaces the first words once the answer is in
        if (await ctl.rt.chats.get(chat.id)).title == "Sourdough starter names":
            break
        await asyncio.sleep(0.05)
    await ctl.rt.chats.set_model(chat.id, "local/llama3.1-8b")
    await ctl.rt.chats.send(chat.id, "And how often do I feed it?")
    await ctl.rt.chats.wait_idle(chat.id)
    await win.reload_tasks()
    win.open_chat(chat.id)
    await _settle(0.8)
    win.grab().save(str(out / "22-chat.png"))
    panel = win.panel
    panel.show_details(panel.conversation.assistant_items()[-1].message.turn_id)
    while panel.details_dialog is None:
        await asyncio.sleep(0.02)
    await _settle(0.3)
    panel.details_dialog.grab().save(str(out / "31-chat-details.png"))
    panel.details_dialog.close()


def team_models() -> dict[str, ScriptedModel]:
    return {
        "lead": ScriptedModel([["1. Why lighthouses stand where they do\n2. The keepers\n3. Storms and the lamp"]]),
        "writer": ScriptedModel([[
            "## Lighthouses\n\nA lighthouse stands where the sea is most dangerous: on the reef, the point, the "
            "harbour mouth. For two centuries **keepers** lived beside the lamp, trimming wicks and winding the "
            "clockwork that turned the lens. In a storm the light was the one thing a ship could trust."]]),
        "critic": ScriptedModel([[Delay(0.3), Fail("The model server at 127.0.0.1:8081 did not answer.")]]),
    }


async def team_shot(ctl, out: Path) -> None:
    """A team's board: A and B done, C failed, D blocked because of it; B's work shown."""
    win = ctl.window
    team = await ctl.bridge.create_team(
        goal="An essay about lighthouses, drafted and checked",
        members=[{"name": "lead", "model": "lead/qwen2.5-7b", "role": "You plan and merge.", "approval": "full_auto"},
                 {"name": "writer", "model": "writer/qwen2.5-3b", "role": "You write.", "approval": "full_auto"},
                 {"name": "critic", "model": "critic/llama3.1-8b", "role": "You find problems."}],
        assignments=[{"key": "A", "member": "lead", "instructions": "Outline a short essay about lighthouses."},
                     {"key": "B", "member": "writer", "instructions": "Write the essay.", "depends_on": ["A"]},
                     {"key": "C", "member": "critic", "instructions": "List what it must not forget.",
                      "depends_on": ["A"]},
                     {"key": "D", "member": "lead", "instructions": "Merge draft and critique.",
                      "depends_on": ["B", "C"]}])
    await ctl.rt.teams.run(team.id)
    await ctl.rt.teams.wait_idle(team.id)
    await win.reload_tasks()
    panel = win.open_team(team.id)
    await _settle(0.5)
    panel.select("B")
    await _settle(0.8)
    win.grab().save(str(out / "23-team-board.png"))


async def add_rule_shot(settings, out: Path) -> None:
    """Settings ▸ Permissions' add-rule form, after it refused a rule that is not one plain command."""
    page = settings.permissions
    page.rule_decision.setCurrentIndex(page.rule_decision.findData("allow"))
    page.rule_command.setText("git status; rm -rf build")
    page.rule_add.click()
    await _settle(0.6)
    settings.grab().save(str(out / "24-permissions-add-rule.png"))


async def unsandboxed_shot(ctl, live: ScriptedModel, out: Path) -> None:
    """The approval card of a command that cannot be sandboxed (no bubblewrap), in a full_auto task."""
    win = ctl.window
    await ctl.rt.save_settings({**ctl.rt.settings.dump(), "sandbox_bwrap": "/nonexistent/bwrap"})
    live.add_steps(["I'll list what takes the space in the build folder.",
                    Call("run_shell", {"command": "du -sh build/* | sort -h | tail -5"}), StepUsage(420, 30)])
    task = await ctl.bridge.create_task(title="Why is the build so big?", model="scripted/demo",
                                        approval="full_auto")
    await win.reload_tasks()
    panel = win.open_task(task.id)
    await _settle(0.3)
    panel.composer.edit.setPlainText("The build folder is huge. What is in it?")
    panel.composer.submit()
    await _settle(2.0)
    win.grab().save(str(out / "25-approval-unsandboxed.png"))


async def model_picker_shot(home: Path, out: Path) -> None:
    """The new-task dialog's model list: two running local servers' models (a long id elided in the middle),
    the bundled model, and a configured server that is not running, greyed out."""
    import json

    from app.shell.application import HearthApp
    from tests.support.openai_server import OpenAIServer

    long_id = "bartowski/Meta-Llama-3.1-70B-Instruct-GGUF-Q4_K_M-imatrix-2025-edition"
    async with OpenAIServer(models=["llama3.2:3b", "qwen2.5-coder:7b", long_id]) as ollama, \
            OpenAIServer(models=["mistral-small-3.1-24b"]) as lms:
        (home / "settings.json").write_text(json.dumps({
            "providers": [{"id": "ollama", "kind": "openai", "base_url": ollama.base_url},
                          {"id": "lmstudio", "kind": "openai", "base_url": lms.base_url},
                          {"id": "vllm", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"}],
            "default_model": "ollama/llama3.2:3b"}))
        ctl = HearthApp(home, use_tray=False, preload_model=False)
        await ctl.start()
        dialog = ctl.window.new_task("Plan a weekend in Lisbon")
        for _ in range(100):
            if "lmstudio/mistral-small-3.1-24b" in dialog.model.refs() and "vllm" in dialog.model.unavailable:
                break
            await asyncio.sleep(0.05)
        dialog.model.showPopup()
        await _settle(0.4)
        dialog.model.view().window().grab().save(str(out / "13-model-picker-list.png"))
        dialog.model.hidePopup()
        dialog.close()
        await ctl.shutdown()


async def broken_settings_shot(home: Path, out: Path) -> None:
    from app.shell.application import HearthApp

    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text('{"providers": [{"id": "ollama", "kind": "openai",}]}')
    ctl = HearthApp(home, use_tray=False)
    await ctl.start()
    await _settle(0.5)
    ctl.window.grab().save(str(out / "12-broken-settings.png"))
    await ctl.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", help="seed this data folder and run the app on it")
    parser.add_argument("--shots", help="write screenshots to this folder and exit")
    args = parser.parse_args()
    import qasync
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)
    if args.shots:
        qasync.run(shots(Path(args.shots)))
        return 0
    home = Path(args.home or tempfile.mkdtemp(prefix="hearth-demo-"))

    async def go() -> None:
        from app.shell.application import HearthApp

        if not (home / "hearth.sqlite3").exists():
            await seed(home)
        ctl = HearthApp(home, providers={"scripted": live_model()}, tools=[SLOW_TOOL])
        try:
            await ctl.start()
            await ctl.quit_event.wait()
        finally:
            await ctl.shutdown()

    qasync.run(go())
    return 0


if __name__ == "__main__":
    sys.exit(main())
