"""The knowledge library (`rt.knowledge`): add and remove documents and folders, list them, their indexing
status and its changes, search what one task works from, and the embeddings model that searches by meaning.

Errors a person caused (a path that is not there, an embeddings model that makes none) are `ConfigError` or
`ProviderError` with a sentence; the library's own rules are `runtime/knowledge/library.py`'s."""

from __future__ import annotations

import builtins  # `KnowledgeLibrary.list` hides the builtin in the annotations below it
import os
from collections.abc import AsyncIterator, Callable, Iterable
from typing import cast

from ..config import EmbeddingsConfig, Settings, split_model_ref
from ..errors import ConfigError
from ..knowledge.library import Added, Embedder, EmbeddingsServer, Knowledge
from ..knowledge.search import search
from ..providers.base import Provider
from .core import Core
from .providers import Providers
from .tasks import Tasks


class KnowledgeLibrary:
    def __init__(self, core: Core, library: Knowledge, providers: Providers, tasks: Tasks):
        self._core = core
        self._library = library
        self._providers = providers  # the embeddings model's
        self._tasks = tasks  # which documents a task works from

    @property
    def embeddings_model(self) -> str | None:
        """The chosen embeddings model as provider/model, or None: knowledge search by words alone."""
        chosen = self._core.settings.embeddings
        return f"{chosen.provider}/{chosen.model}" if chosen else None

    async def set_embeddings_model(self, ref: str | None) -> int:
        """Search the library by meaning too, with the embeddings model `ref` (provider/model of an
        OpenAI-compatible provider), or by words alone (None). The model is tried on a line of text first, so a
        wrong name or a server without embeddings is a ProviderError/ConfigError with a sentence, and nothing
        changes. Returns how many ready documents were queued again to get vectors."""
        self._core.writable()
        new = self._core.settings.model_copy(deep=True)
        if ref is None or not ref.strip():
            new.embeddings = None
            await self._core.save_settings(new)
            return 0
        provider_id, model = split_model_ref(ref.strip())
        if not model:
            raise ConfigError(f"An embeddings model is written provider/model, not {ref!r}.")
        provider = self._providers.get(provider_id)  # ConfigError naming the configured providers
        if not hasattr(provider, "embed"):
            raise ConfigError(f"{provider_id!r} runs models on this computer and makes no embeddings: choose a "
                              "model of an OpenAI-compatible server (e.g. Ollama's nomic-embed-text).")
        await provider.embed(model, ["Hearth checks that this model makes embeddings."])
        new.embeddings = EmbeddingsConfig(provider=provider_id, model=model)
        await self._core.save_settings(new)
        ready = [d["path"] for d in await self._library.documents()
                 if d["status"] == "ready" and os.path.exists(d["path"])]  # a vanished file stays as it is
        if not ready:
            return 0
        added = await self._library.add(ready, partial=True)  # one deleted since the check is simply left out
        return sum(d["status"] == "queued" for d in added.documents)

    async def add(self, paths: Iterable[str | os.PathLike]) -> Added:
        """Add files or folders to the library: what can be added is, and `not_added` has a sentence for each path
        that could not be (not there, or no document in it). `documents`: those of the paths added (new and
        changed ones are indexed in the background: follow `changes()`)."""
        self._core.writable()
        paths = builtins.list(paths)
        if not paths:
            raise ConfigError("Give at least one file or folder to add.")
        return await self._library.add(paths, partial=True)

    async def remove(self, path: str | os.PathLike) -> bool:
        """Take a document out of the library (the file stays where it is)."""
        self._core.writable()
        return await self._library.remove(str(path))

    async def list(self) -> builtins.list[dict]:
        """The library's documents: path, kind, size, status (queued, indexing, ready, error, missing), detail (a
        sentence), progress (0..1), passages."""
        return await self._library.documents()

    async def status(self) -> dict:
        """{"documents", "counts" by status, "indexing" (the document being indexed or None), "busy"}."""
        return await self._library.status()

    async def changes(self) -> AsyncIterator[dict]:
        """`status()` now and after every change, for a library view; ends when the consumer stops."""
        async for status in self._library.changes():
            yield status

    async def search(self, task_id: str, query: str, limit: int = 6) -> builtins.list[dict]:
        """What the task's `search_knowledge` tool finds: passages of only this task's documents, with path, name,
        kind, `where` (page, lines, heading in words), page, line_start, line_end, heading and text."""
        task = await self._tasks.get(task_id)
        hits, _ = await search(self._library, builtins.list(task.knowledge), query, limit)
        return [h.as_dict() for h in hits]


def chosen_embedder(settings: Settings, provider: Callable[[str], Provider]) -> Embedder | None:
    """The embeddings model chosen in settings, when its provider can embed; None: BM25 alone."""
    chosen = settings.embeddings
    if chosen is None:
        return None
    try:
        found = provider(chosen.provider)
    except ConfigError:
        return None
    return Embedder(cast(EmbeddingsServer, found), chosen.model) if hasattr(found, "embed") else None

