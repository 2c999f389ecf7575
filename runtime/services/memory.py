"""The memory and knowledge part of the Runtime facade (runtime/api.py): the person's memories (list, read, add,
edit, forget and undo it, on/off) and the knowledge library (add, list, status, progress, search within a task).

Errors a person caused (a name outside the memory folder, a path that is not there) are `ConfigError` with a sentence;
the memory folder's own rules are `runtime/memory/folder.py`'s, the library's `runtime/knowledge/library.py`'s. """

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import EmbeddingsConfig, Settings, split_model_ref
from ..engine.jobs import job_label
from ..errors import ConfigError, ToolError
from ..knowledge.library import Added, Embedder
from ..knowledge.search import search
from ..store.fts import match_query

if TYPE_CHECKING:
    from ..knowledge.library import Knowledge
    from ..memory.folder import Memory


class MemoryMixin:
    settings: Settings
    memory: Memory
    knowledge: Knowledge

    # -- memory --

    @property
    def memory_folder(self) -> Path:
        return self.memory.folder

    @property
    def memory_enabled(self) -> bool:
        return self.settings.memory

    async def set_memory_enabled(self, on: bool) -> None:
        """Memory on or off everywhere (settings.json): off, no task uses or saves memories."""
        self._writable()
        new = self.settings.model_copy(deep=True)
        new.memory = bool(on)
        await self.save_settings(new)

    async def memories(self, query: str | None = None) -> list[dict]:
        """Every memory (name, summary, origin, source task and turn, created, updated, last used), by name; with
        `query`, those whose text or name matches it."""
        rows = await self.memory.entries()
        if not query or not query.strip():
            return rows
        match = match_query(query)
        found = set(await self.memory.repo.search(match, 10_000)) if match else set()
        words = query.lower().split()
        return [r for r in rows if r["name"] in found or all(w in (r["name"] + " " + r["summary"]).lower()
                                                             for w in words)]

    async def memory_text(self, name: str) -> str:
        """The text of one memory file."""
        return await _plain(self.memory.read(name))

    async def save_memory(self, name: str, text: str) -> str:
        """The person writes or edits a memory (Settings ▸ Memory); returns its file name."""
        self._writable()
        return await _plain(self.memory.write(name, text, origin="person", task_id=None, turn_id=None))

    async def add_memory(self, name: str, text: str) -> str:
        """The person adds a new memory (Settings ▸ Memory ▸ New, `hearth memory add`); returns its file name. A
        name without an extension gets `.md`. ConfigError, with the memory tool's own rules, for a name outside
        the memory folder or taken already, text that is empty or too long, or anything that looks like a secret."""
        self._writable()
        name = name.strip()
        if name and not Path(name).suffix:
            name += ".md"
        return await _plain(self.memory.write(name, text, origin="person", create=True))

    async def forget(self, name: str) -> None:
        """Delete one memory: its file, its record and its index entry (`restore_memory` undoes it)."""
        self._writable()
        await _plain(self.memory.delete(name))

    async def restore_memory(self, name: str) -> str:
        """Undo `forget(name)` (while this runtime is open): the file as it was, with its provenance."""
        self._writable()
        return await _plain(self.memory.restore(name))

    async def forget_all(self) -> int:
        """Delete every memory; how many there were."""
        self._writable()
        return await self.memory.forget_all()

    async def job_log(self, kind: str | None = None, limit: int = 50, *, failed: bool = False) -> list[dict]:
        """The newest background jobs (memory.extraction, resource.index, ...): kind and its `label` for people,
        task_id and task_title, status, error, created_at. `failed`: only the jobs that failed."""
        rows = await self.memory.repo.jobs(kind, limit, failed=failed)
        return [{**row, "label": job_label(row["kind"])} for row in rows]

    # -- knowledge --

    def _embedder(self) -> Embedder | None:
        """The embeddings model chosen in settings, when its provider can embed; None: BM25 alone."""
        chosen = self.settings.embeddings
        if chosen is None:
            return None
        try:
            provider = self.provider(chosen.provider)
        except ConfigError:
            return None
        return Embedder(provider, chosen.model) if hasattr(provider, "embed") else None

    @property
    def embeddings_model(self) -> str | None:
        """The chosen embeddings model as provider/model, or None: knowledge search by words alone."""
        chosen = self.settings.embeddings
        return f"{chosen.provider}/{chosen.model}" if chosen else None

    async def set_embeddings_model(self, ref: str | None) -> int:
        """Search the library by meaning too, with the embeddings model `ref` (provider/model of an
        OpenAI-compatible provider), or by words alone (None). The model is tried on a line of text first, so a
        wrong name or a server without embeddings is a ProviderError/ConfigError with a sentence, and nothing
        changes. Returns how many ready documents were queued again to get vectors."""
        self._writable()
        new = self.settings.model_copy(deep=True)
        if ref is None or not ref.strip():
            new.embeddings = None
            await self.save_settings(new)
            return 0
        provider_id, model = split_model_ref(ref.strip())
        if not model:
            raise ConfigError(f"An embeddings model is written provider/model, not {ref!r}.")
        provider = self.provider(provider_id)  # ConfigError naming the configured providers
        if not hasattr(provider, "embed"):
            raise ConfigError(f"{provider_id!r} runs models on this computer and makes no embeddings: choose a "
                              "model of an OpenAI-compatible server (e.g. Ollama's nomic-embed-text).")
        await provider.embed(model, ["Hearth checks that this model makes embeddings."])
        new.embeddings = EmbeddingsConfig(provider=provider_id, model=model)
        await self.save_settings(new)
        ready = [d["path"] for d in await self.knowledge.documents()
                 if d["status"] == "ready" and os.path.exists(d["path"])]  # a vanished file stays as it is
        if not ready:
            return 0
        added = await self.knowledge.add(ready, partial=True)  # one deleted since the check is simply left out
        return sum(d["status"] == "queued" for d in added.documents)

    async def knowledge_add(self, paths: Iterable[str | os.PathLike]) -> Added:
        """Add files or folders to the library: what can be added is, and `not_added` has a sentence for each path
        that could not be (not there, or no document in it). `documents`: those of the paths added (new and
        changed ones are indexed in the background: follow `knowledge_changes()`)."""
        self._writable()
        paths = list(paths)
        if not paths:
            raise ConfigError("Give at least one file or folder to add.")
        return await self.knowledge.add(paths, partial=True)

    async def knowledge_remove(self, path: str | os.PathLike) -> bool:
        """Take a document out of the library (the file stays where it is)."""
        self._writable()
        return await self.knowledge.remove(str(path))

    async def knowledge_list(self) -> list[dict]:
        """The library's documents: path, kind, size, status (queued, indexing, ready, error, missing), detail (a
        sentence), progress (0..1), passages."""
        return await self.knowledge.documents()

    async def knowledge_status(self) -> dict:
        """{"documents", "counts" by status, "indexing" (the document being indexed or None), "busy"}."""
        return await self.knowledge.status()

    async def knowledge_changes(self) -> AsyncIterator[dict]:
        """`knowledge_status()` now and after every change, for a library view; ends when the consumer stops."""
        async for status in self.knowledge.changes():
            yield status

    async def search_knowledge(self, task_id: str, query: str, limit: int = 6) -> list[dict]:
        """What the task's `search_knowledge` tool finds: passages of only this task's documents, with path, name,
        kind, `where` (page, lines, heading in words), page, line_start, line_end, heading and text."""
        task = await self._task_row(task_id)
        hits, _ = await search(self.knowledge, list(task.get("knowledge") or ()), query, limit)
        return [h.as_dict() for h in hits]


async def _plain(action):
    """The memory folder's refusals (ToolError, for the model) as ConfigError for a person."""
    try:
        return await action
    except ToolError as exc:
        raise ConfigError(str(exc)) from None


def real_paths(paths: Iterable[str | os.PathLike]) -> list[str]:
    """Knowledge paths as a task binds them: real, absolute, in the order given, without repeats."""
    return list(dict.fromkeys(os.path.realpath(Path(p).expanduser()) for p in paths))
