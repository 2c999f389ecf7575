"""Screenshots of Settings ▸ Models' local-models page (app/settings/model_manager.py) downloading from a loopback Hub,
after the download finished, and a download that failed (the Hub unreachable) on its row with Retry.
Run under a display (Xvfb):

    xvfb-run -a .venv/bin/python -m tests.support.model_manager_shots resources/screenshots

The Hub serves a file of the catalog's size for Qwen2.5 1.5B (a small GGUF header, the rest sparse zeros),
slowed to 60 MB/s, so the page shows a real download in progress.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from tests.support.fake_hub import FakeHub, refused_endpoint, tiny_gguf

REPO, FILE = "bartowski/Qwen2.5-1.5B-Instruct-GGUF", "Qwen2.5-1.5B-Instruct-Q4_K_M.gguf"
SIZE = 986_048_768


def catalog_sized_file(folder: Path) -> Path:
    path = tiny_gguf(folder / "qwen.gguf", payload_bytes=1 << 20)
    with open(path, "r+b") as f:
        f.truncate(SIZE)  # sparse: costs no disk on the serving side
    return path


async def shots(out: Path) -> None:
    from app.settings.model_manager import ModelManager
    from app.widgets import theme
    from runtime.api import Runtime

    out.mkdir(parents=True, exist_ok=True)
    theme.apply("light")
    with tempfile.TemporaryDirectory(prefix="hearth-models-shots-") as tmp, FakeHub() as hub:
        hub.add(REPO, FILE, catalog_sized_file(Path(tmp)))
        hub.faults.throttle = 60e6
        os.environ["HF_ENDPOINT"] = hub.endpoint
        rt = await Runtime.open(Path(tmp) / "home")
        try:
            await rt.models.add_local(tiny_gguf(Path(tmp) / "My-Finetune-Q4_K_M.gguf"))
            page = ModelManager(rt.models)
            page.setWindowTitle("Hearth Settings — Models")
            page.resize(940, 760)
            page.show()
            page.pull("qwen2.5-1.5b-instruct", "Qwen2.5 1.5B Instruct")
            row = page.rows["qwen2.5-1.5b-instruct"]
            while row.bar.value() < 400:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            page.grab().save(str(out / "09-models-downloading.png"))
            hub.faults.throttle = None
            while page.rows:
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.3)
            page.grab().save(str(out / "10-models-installed.png"))
            os.environ["HF_ENDPOINT"] = refused_endpoint()  # offline: the next download fails on its row
            page.pull("qwen2.5-3b-instruct", "Qwen2.5 3B Instruct")
            while not page.rows["qwen2.5-3b-instruct"].failed:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            page.grab().save(str(out / "38-model-download-failed.png"))
        finally:
            await rt.aclose()


if __name__ == "__main__":
    from tests.support.qt_helpers import run_shots

    sys.exit(run_shots(shots))
