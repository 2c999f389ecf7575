"""The person's memories (`rt.memory`): list and search them, read one, write, add, forget one (and undo that) or
all of them, and memory on or off everywhere.

Errors a person caused (a name outside the memory folder, a taken name, text that looks like a secret) are
`ConfigError` with a sentence; the memory folder's own rules are `runtime/memory/folder.py`'s."""

from __future__ import annotations

import builtins  # `Memories.list` hides the builtin in the annotations below it
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from ..errors import ConfigError, ToolError
from ..memory.folder import Memory
from .core import Core

T = TypeVar("T")


class Memories:
    def __init__(self, core: Core, folder: Memory):
        self._core = core
        self._memory = folder

    @property
    def folder(self) -> Path:
        """Where the memory files are (the person may open and edit them)."""
        return self._memory.folder

    @property
    def enabled(self) -> bool:
        return self._core.settings.memory

    async def set_enabled(self, on: bool) -> None:
        """Memory on or off everywhere (settings.json): off, no task uses or saves memories."""
        self._core.writable()
        new = self._core.settings.model_copy(deep=True)
        new.memory = bool(on)
        await self._core.save_settings(new)

    async def list(self, query: str | None = None) -> builtins.list[dict]:
        """Every memory (name, summary, origin, source task and turn, created, updated, last used), by name; with
        `query`, those whose text or name matches it."""
        rows = await self._memory.entries()
        if not query or not query.strip():
            return rows
        found = set(await self._memory.repo.search(query, 10_000))
        words = query.lower().split()
        return [r for r in rows if r["name"] in found or all(w in (r["name"] + " " + r["summary"]).lower()
                                                             for w in words)]

    async def text(self, name: str) -> str:
        """The text of one memory file."""
        return await _plain(self._memory.read(name))

    async def save(self, name: str, text: str) -> str:
        """The person writes or edits a memory (Settings ▸ Memory); returns its file name."""
        self._core.writable()
        return await _plain(self._memory.write(name, text, origin="person", task_id=None, turn_id=None))

    async def add(self, name: str, text: str) -> str:
        """The person adds a new memory (Settings ▸ Memory ▸ New, `hearth memory add`); returns its file name. A
        name without an extension gets `.md`. ConfigError, with the memory tool's own rules, for a name outside
        the memory folder or taken already, text that is empty or too long, or anything that looks like a secret."""
        self._core.writable()
        name = name.strip()
        if name and not Path(name).suffix:
            name += ".md"
        return await _plain(self._memory.write(name, text, origin="person", create=True))

    async def forget(self, name: str) -> None:
        """Delete one memory: its file, its record and its index entry (`restore` undoes it)."""
        self._core.writable()
        await _plain(self._memory.delete(name))

    async def restore(self, name: str) -> str:
        """Undo `forget(name)` (while this runtime is open): the file as it was, with its provenance."""
        self._core.writable()
        return await _plain(self._memory.restore(name))

    async def forget_all(self) -> int:
        """Delete every memory; how many there were."""
        self._core.writable()
        return await self._memory.forget_all()


async def _plain(action: Awaitable[T]) -> T:
    """The memory folder's refusals (ToolError, for the model) as ConfigError for a person."""
    try:
        return await action
    except ToolError as exc:
        raise ConfigError(str(exc)) from None
