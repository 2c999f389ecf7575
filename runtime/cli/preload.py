"""Loading the local model while the process starts (`hearth run`).

`start_preload` runs in a thread of its own, started before the rest of Hearth is imported: llama.cpp loads the
model with the GIL released, so the load overlaps the imports of SQLAlchemy, alembic and pydantic, and the
prompt prefix is restored from the disk cache (providers/llama/prefix.py) before the turn asks for it. The
turn then finds the model in the process-wide cache and its KV cache holding the prefix. This module imports
nothing heavy at the top: importing it must not delay the thread's start.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class Preload:
    """The preloading thread. `abandon()` when the command fails before its turn: it stops the warm-up and waits
    for the model load to end, because llama-cpp-python points the process's stdout and stderr at /dev/null
    while it loads a model (`verbose=False`), and the error would be printed into nothing."""

    def __init__(self, thread: threading.Thread, stop: threading.Event):
        self.thread, self.stop = thread, stop

    def abandon(self, timeout: float = 30.0) -> None:
        self.stop.set()
        self.thread.join(timeout)


def start_preload(home: str | Path | None, model_ref: str | None, first_input: str | None = None) -> Preload:
    """Load `model_ref` (or the default model) and warm its prompt prefix, when it is a local llama.cpp model;
    with `first_input` (a new task's first message) the whole first prompt. Anything that goes wrong is left
    for the turn to report."""
    stop = threading.Event()

    def run() -> None:
        loading = None
        try:
            from ..config import load_settings, resolve_home, split_model_ref
            from ..keys import SecretStore
            from ..local_models.library import ModelLibrary
            from ..providers import build_provider

            folder = resolve_home(home)
            settings = load_settings(folder)
            provider_id, name = split_model_ref(model_ref or settings.default_model)
            cfg = settings.provider(provider_id)
            if cfg.kind != "llama_cpp" or settings.mcp_servers:  # MCP tools change the prefix: nothing to warm
                return
            from ..providers.llama.provider import LlamaCppProvider  # build_provider imports it for this entry

            keys, library = SecretStore(folder), ModelLibrary(folder)
            provider = build_provider(cfg, keys, library)
            assert isinstance(provider, LlamaCppProvider)  # what a llama_cpp entry builds
            # The load starts before the imports below: llama.cpp reads the file with the GIL released, so it
            # runs beside them instead of after them.
            loading = threading.Thread(target=_quietly, args=(provider.load_sync, name), name="hearth-model-load")
            loading.start()
            from ..kits.task import AgentKit
            from ..memory.folder import INDEX_NAME, MEMORY_DIR
            from ..tools.base import tool_spec
            from ..tools.mcp.consent import MCPConsents
            from ..tools.memory_tool import MemoryTool
            from ..tools.shell.background import BACKGROUND_DIR, BackgroundCommands
            from ..tools.waiting import BackgroundCommand, Wait

            # Offered what a task's first turn is offered (deliver, background commands, wait), so the prompt it
            # warms is that turn's; nothing runs here, and no database is open yet.
            unopened = _Unopened()
            kit = AgentKit(folder, lambda: settings, keys, {}, [], MCPConsents(folder), library,
                           deliver=unopened.deliver, background=BackgroundCommands(folder / BACKGROUND_DIR, unopened),
                           wakes=lambda: unopened)
            # This thread has no event loop of its own.
            messages, tools = asyncio.run(kit.first_prompt(model_ref or settings.default_model))
            if tools and settings.memory:  # a new task's memory, as kit.first_prompt gives it beside the database
                if any(p.name != INDEX_NAME for p in (folder / MEMORY_DIR).glob("*.md")):
                    tools = []  # their index is in the prompt, and it is read with the database: only load
                else:
                    # where a turn has it (kits/task.py): before the waiting tools, which come last
                    waiting = (BackgroundCommand.name, Wait.name)
                    at = next((i for i, t in enumerate(tools) if t["function"]["name"] in waiting), len(tools))
                    tools.insert(at, tool_spec(MemoryTool))  # type: ignore[arg-type]  # reads only class attributes
            if first_input:
                messages.append({"role": "user", "content": first_input})
            provider.warm_sync(name, messages, tools, stop)
        except Exception as exc:
            log.info("preloading the model failed: %s", exc)
        finally:
            if loading is not None:
                loading.join()  # `abandon()` waits for the load through this thread

    thread = threading.Thread(target=run, name="hearth-preload")
    thread.start()
    return Preload(thread, stop)


def _quietly(load: Callable[[str | None], object], name: str | None) -> None:
    """The model load in a thread of its own; a failure is the turn's to report when it loads the model again."""
    try:
        load(name)
    except Exception as exc:
        log.info("loading the model early failed: %s", exc)


class _Unopened:
    """The records the preload's kit is given so that it offers a turn's every tool: none of them is ever called
    (the preload renders the prompt, it runs no turn)."""

    async def _never(self, *args: Any) -> Any:
        raise RuntimeError("the preload runs no tool")

    deliver = add_background = end_background = background_command = background_commands = _never
    running_background = set = _never
