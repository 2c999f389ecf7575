"""Screenshots of the pages that reach memory, documents and local models: Settings ▸ Models ▸ Local models,
Settings ▸ Memory, Settings ▸ Knowledge, the New task dialog with documents chosen, and a search_knowledge card
with its citation chips. Run under a display (Xvfb):

    xvfb-run -a .venv/bin/python -m tests.support.documents_shots resources/screenshots
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from runtime.providers.scripted import Call, ScriptedModel
from tests.support.fake_hub import tiny_gguf
from tests.support.pdf import write_pdf

MODEL = "scripted/demo"


async def _settle(seconds: float) -> None:
    await asyncio.sleep(seconds)  # lets Qt paint; processEvents() here would re-enter the qasync loop


def _documents(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True)
    manual = write_pdf(folder / "boiler-manual.pdf", ["Contents.", "Bleed each radiator with the small key."])
    notes = folder / "house-notes.md"
    notes.write_text("# House\n\nThe boiler is serviced every May by Hallam Heating.\n\n## Radiators\n\n"
                     "Bleed the hall radiator every autumn; it gets air first.\n")
    receipts = folder / "receipts"
    receipts.mkdir()
    (receipts / "2024-boiler.txt").write_text("Boiler service, 12 May 2024, £95.\n")
    (folder / "scan.txt").write_bytes(b"\x00\x01\x02" * 200)  # a file the library cannot read
    return {"manual": manual, "notes": notes, "receipts": receipts, "scan": folder / "scan.txt"}


async def shots(out: Path) -> None:
    from app.shell.application import HearthApp
    from app.widgets import theme

    out.mkdir(parents=True, exist_ok=True)
    theme.apply("light")
    tmp = Path(tempfile.mkdtemp(prefix="hearth-docs-shots-"))
    try:
        docs = _documents(tmp / "docs")
        model = ScriptedModel([[Call("search_knowledge", {"query": "bleed the radiator"})],
                               ["Use the small key on the bleed valve [1]; the hall radiator needs it first "
                                "every autumn [2]."]])
        ctl = HearthApp(tmp / "home", providers={"scripted": model}, use_tray=False, preload_model=False)
        await ctl.start()
        rt = ctl.rt
        await rt.models.add_local(tiny_gguf(tmp / "My-Finetune-Q4_K_M.gguf"))
        await rt.memory.save("tea.md", "# Prefers green tea\nNo sugar, a slice of lemon.")
        await rt.memory.save("units.md", "# Uses metric units\nKilometres and degrees Celsius.")
        await rt.knowledge.add([docs["scan"], docs["receipts"]])

        settings = ctl.open_settings()
        settings.resize(900, 600)
        settings.models.setCurrentWidget(settings.local_models)
        await _settle(0.6)
        settings.grab().save(str(out / "17-settings-local-models.png"))
        settings.tabs.setCurrentWidget(settings.memory)
        await _settle(0.4)
        settings.memory.list.setCurrentRow(0)
        await _settle(0.4)
        settings.grab().save(str(out / "18-settings-memory.png"))
        settings.tabs.setCurrentWidget(settings.knowledge)
        await _settle(1.0)
        settings.grab().save(str(out / "19-settings-knowledge.png"))
        settings.close()

        dialog = ctl.window.new_task("How do I bleed the radiators?")
        dialog.documents.add([str(docs["manual"]), str(docs["notes"]), str(docs["receipts"])])
        await _settle(0.5)
        dialog.grab().save(str(out / "20-new-task-documents.png"))
        dialog.close()

        task = await ctl.bridge.create_task(title="Radiators", model=MODEL,
                                            knowledge=[str(docs["manual"]), str(docs["notes"])])
        while (await rt.knowledge.status())["busy"]:
            await asyncio.sleep(0.05)
        await ctl.window.reload_tasks()
        panel = ctl.window.open_task(task.id)
        await _settle(0.3)
        panel.composer.edit.setPlainText("How do I bleed the radiators?")
        panel.composer.submit()
        await rt.wait_idle(task.id)
        await _settle(1.0)
        ctl.window.grab().save(str(out / "21-citation-chips.png"))
        await ctl.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from tests.support.qt_helpers import run_shots

    sys.exit(run_shots(shots))
