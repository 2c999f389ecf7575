"""The knowledge library: documents a person adds (files or folders), indexed for the tasks bound to them.

Decisions:
- `add(paths)` checks every path first, expands folders to the files the library
  reads (`knowledge_text.kind_of`; hidden files and folders skipped), records new files as `queued` and a
  changed known file (size or time) as `queued` again, as well as one added again once an embeddings model is
  chosen that its vectors do not come from, and starts the `resource.index` job. A path that is not there (or a
  folder with nothing to read) adds nothing at all, so a task is never created half-bound; `add(..., partial=True)`
  (the library's own Add) adds the others and names each path it could not add, with why (`Added.not_added`).
- The job (one at a time, through the job queue) takes queued documents one by one: hash, extract and split in a
  worker thread (never on the event loop), write passages in batches, report progress after each batch
  (`changes()`). Every failure is the document's status with a sentence (`error`, `missing`), never a stuck
  job: the job goes on with the next document. A document cut off by a quit or a crash is queued again at the
  next open (`resume`), and indexed from its start. A file whose size or time changed is hashed: the same
  content keeps its passages, another is indexed again.
- A document is read up to `max_chars` of text (default 20 million characters, ~20 MB): a bigger one is
  searchable in that part and its status says so.
- With an embeddings model chosen in settings (`Embedder`), passages also get vectors (float32, normalized);
  when the server fails, the document stays searchable by its words and says so.
- Search (`knowledge/search.py`) sees only the documents a task is bound to.
- A document a task's turn wrote or deleted (recorded by services/changes.py) is indexed again after the turn
  (`refresh`), whichever task it is bound to: the same job, the same hash check.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError, ProviderError
from ..store.knowledge_repo import KnowledgeRepo
from .text import DocumentReader, Unreadable, file_digest, kind_of

if TYPE_CHECKING:  # numpy is imported where vectors are made: `hearth run` and the window start without it
    import numpy as np

log = logging.getLogger(__name__)

MAX_DOCUMENT_CHARS = 20_000_000
MAX_FOLDER_FILES = 20_000
BATCH = 256  # passages written per transaction
EMBED_BATCH = 64  # texts per embeddings request


@dataclass
class Added:
    """What `Knowledge.add` did: the documents of the paths it added, and a sentence for each it could not."""

    documents: list[dict]
    not_added: list[str]


class EmbeddingsServer(Protocol):
    """A provider that makes embeddings (providers.openai_compat.OpenAICompatProvider)."""

    id: str

    async def embed(self, model: str, texts: list[str]) -> list[list[float]]: ...


@dataclass
class Embedder:
    """An embeddings model of an OpenAI-compatible provider (settings' `embeddings`)."""

    provider: EmbeddingsServer
    model: str

    @property
    def name(self) -> str:
        return f"{self.provider.id}/{self.model}"

    async def vectors(self, texts: list[str]) -> np.ndarray:
        """Normalized float32 rows, one per text."""
        import numpy as np

        rows = []
        for i in range(0, len(texts), EMBED_BATCH):
            rows.extend(await self.provider.embed(self.model, texts[i:i + EMBED_BATCH]))
        matrix = np.asarray(rows, dtype=np.float32)
        return matrix / (np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12)


class Knowledge:
    def __init__(self, repo: KnowledgeRepo, submit: Callable[[str, Awaitable[Any]], Any],
                 embedder: Callable[[], Embedder | None], max_chars: int = MAX_DOCUMENT_CHARS):
        self.repo = repo
        self._submit = submit
        self.embedder = embedder
        self.max_chars = max_chars
        self._job: asyncio.Future[Any] | None = None
        self._stop = threading.Event()
        self._changed = asyncio.Event()
        self.vector_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # doc id -> (passage ids, matrix)

    # -- the library --

    async def add(self, paths: Sequence[str | os.PathLike], *, partial: bool = False) -> Added:
        """Add files and folders; their documents (new ones queued for indexing). A path that cannot be added is a
        ConfigError before anything is added, or with `partial` a sentence in `not_added` and the rest added."""
        files, not_added = await asyncio.to_thread(_expand, [Path(p).expanduser() for p in paths])
        if not_added and not partial:
            raise ConfigError(" ".join(not_added))
        rows = await self.repo.add_documents(files) if files else []
        seen = {f["path"]: f for f in files}
        embedder = self.embedder()
        for row in rows:
            now = seen[row["path"]]
            changed = (row["size"], row["mtime"]) != (now["size"], now["mtime"])
            # Added again after an embeddings model was chosen: it gets vectors now.
            words_only = embedder is not None and row["status"] == "ready" and row["embed_model"] != embedder.name
            if row["status"] in ("ready", "error", "missing") and (changed or words_only):
                await self.repo.update_document(row["id"], status="queued", progress=0, detail=None)
        if rows:
            self.kick()
        # Read back as they are now: one removed meanwhile (the library's Remove) is no longer there.
        return Added([doc for r in rows if (doc := await self.repo.document(r["id"])) is not None], not_added)

    async def remove(self, path: str) -> bool:
        real = os.path.realpath(Path(path).expanduser())
        for row in await self.repo.documents():
            if row["path"] == real:
                await self.repo.remove_document(row["id"])
                self.vector_cache.pop(row["id"], None)
                self._notify()
                return True
        return False

    async def documents(self) -> list[dict]:
        return await self.repo.documents()

    async def refresh(self, paths: Collection[str]) -> int:
        """Index again the documents among `paths` (real paths a turn wrote or deleted; the post-turn
        `resource.index` job): a task's next search sees their new text, or that they are gone. How many."""
        queued = 0
        for doc in await self.repo.documents():
            if doc["path"] in paths and doc["status"] in ("ready", "error", "missing"):
                await self.repo.update_document(doc["id"], status="queued", progress=0, detail=None)
                queued += 1
        if queued:
            self.kick()
        return queued

    async def status(self) -> dict:
        docs = await self.repo.documents()
        count = {s: sum(d["status"] == s for d in docs) for s in ("queued", "indexing", "ready", "error", "missing")}
        current = next((d for d in docs if d["status"] == "indexing"), None)
        return {"documents": docs, "counts": count, "indexing": current,
                "busy": bool(count["queued"] or count["indexing"])}

    async def changes(self) -> AsyncIterator[dict]:
        """The library's status now, then again after every change (at most ~10 a second), until closed."""
        while True:
            event = self._changed
            yield await self.status()
            await event.wait()
            await asyncio.sleep(0.1)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- indexing --

    async def resume(self) -> None:
        """At open: documents cut off mid-index, and queued ones, are indexed (again) now."""
        if await self.repo.requeue_unfinished():
            self.kick()

    def kick(self) -> None:
        """Start the indexing job unless it runs (it picks up whatever is queued)."""
        if self._job is None or self._job.done():
            self._job = self._submit("resource.index", self._index_queued())

    def close(self) -> None:
        """Let a worker thread that is reading a document give up (the job is cancelled by the queue), and close
        the search connection."""
        self._stop.set()
        self.repo.close()

    async def _index_queued(self) -> None:
        while not self._stop.is_set() and (doc := await self.repo.next_queued()) is not None:
            try:
                await self._index(doc)
            except InterruptedError:
                return  # shutting down: left `indexing`, queued again at the next open (as when cancelled)
            except Exception as exc:  # never a stuck job: the document says what happened, the job goes on
                log.exception("indexing %s failed", doc["path"])
                await self.repo.update_document(doc["id"], status="error",
                                                detail=f"Indexing failed unexpectedly ({type(exc).__name__}).")
            finally:
                self._notify()

    async def _index(self, doc: dict) -> None:
        doc_id, path = doc["id"], Path(doc["path"])
        await self.repo.update_document(doc_id, status="indexing", progress=0, detail=None)
        self._notify()
        try:
            stat = await asyncio.to_thread(path.stat)
            digest = await asyncio.to_thread(file_digest, path, self._stop)
        except FileNotFoundError:
            await self.repo.update_document(doc_id, status="missing", detail="The file was deleted or moved.")
            return
        except OSError as exc:
            await self.repo.update_document(doc_id, status="error", detail=f"Could not be read ({exc.strerror}).")
            return
        embedder = self.embedder()
        if digest == doc["content_hash"] and doc["passages"] and (embedder is None or
                                                                   doc["embed_model"] == embedder.name):
            # Touched, not changed: the passages are those of this very content.
            await self.repo.update_document(doc_id, status="ready", progress=1.0, size=stat.st_size,
                                            mtime=stat.st_mtime, detail=doc["detail"])
            return
        # No hash while the passages are being replaced: a crash now leaves nothing that looks complete.
        await self.repo.update_document(doc_id, content_hash=None)
        await self.repo.clear_passages(doc_id)
        self.vector_cache.pop(doc_id, None)
        reader = DocumentReader(path, doc["kind"], self.max_chars, self._stop)
        batches = reader.batches(BATCH)
        count, embed_problem = 0, None
        try:
            while (batch := await asyncio.to_thread(next, batches, None)) is not None:
                rows = [{"text": p.text, "heading": p.heading, "page": p.page, "line_start": p.line_start,
                         "line_end": p.line_end} for p in batch]
                if embedder is not None and embed_problem is None:
                    try:
                        matrix = await embedder.vectors([p.text for p in batch])
                        for row, vector in zip(rows, matrix, strict=True):
                            row["vector"] = vector.tobytes()
                    except ProviderError as exc:
                        embed_problem = exc.message
                await self.repo.add_passages(doc_id, count, rows)
                count += len(rows)
                await self.repo.update_document(doc_id, progress=reader.progress, passages=count)
                self._notify()
        except Unreadable as exc:
            await self.repo.clear_passages(doc_id)
            await self.repo.update_document(doc_id, status="error", progress=0, passages=0,
                                            detail=f"{path.name} {exc}")
            return
        notes = []
        if reader.truncated:
            notes.append(f"Only the first {reader.chars / 1e6:.0f} million characters are searchable; the rest "
                         "of this large file was left out.")
        if embed_problem:
            notes.append(f"Searchable by its words only: the embeddings server failed ({embed_problem}).")
        if count == 0:
            notes.append("The file has no text.")
        vectors_by = embedder if embed_problem is None and count > 0 else None
        await self.repo.update_document(
            doc_id, status="ready", progress=1.0, passages=count, detail=" ".join(notes) or None,
            content_hash=digest, size=stat.st_size, mtime=stat.st_mtime, indexed_at=time.time(),
            embed_model=vectors_by.name if vectors_by is not None else None)

    async def check_fresh(self, docs: list[dict]) -> list[dict]:
        """Before a search: a document deleted since is marked `missing` (and left out), a changed one is indexed
        again (its old passages serve until then). Returns the documents that can be searched."""
        paths = [d["path"] for d in docs]
        # A few stats cost microseconds: a thread hop would cost more (and much more on a busy machine).
        stats = _stats(paths) if len(paths) <= 32 else await asyncio.to_thread(_stats, paths)
        usable = []
        for doc, st in zip(docs, stats, strict=True):
            if st is None:
                if doc["status"] != "missing":
                    await self.repo.update_document(doc["id"], status="missing", detail="The file was deleted or "
                                                                                        "moved.")
                    self._notify()
                continue
            if doc["status"] == "ready" and (st.st_size, st.st_mtime) != (doc["size"], doc["mtime"]):
                await self.repo.update_document(doc["id"], status="queued", progress=0)
                self.kick()
            usable.append(doc)
        return usable


def _stats(paths: list[str]) -> list[os.stat_result | None]:
    out: list[os.stat_result | None] = []
    for p in paths:
        try:
            out.append(os.stat(p))
        except OSError:
            out.append(None)
    return out


def _expand(paths: list[Path]) -> tuple[list[dict], list[str]]:
    """The files `paths` name, folders walked; and a sentence for each path that adds nothing (not there, not a
    file or folder, a folder with nothing to read or too much)."""
    files: dict[str, dict] = {}
    not_added = []
    for given in paths:
        try:
            found = _files_of(given)
        except ConfigError as exc:
            not_added.append(str(exc))
            continue
        for path, kind in found:
            _add_file(files, path, kind)
    return list(files.values()), not_added


def _files_of(given: Path) -> list[tuple[Path, str]]:
    """(file, kind) for each document `given` names; ConfigError saying why it names none."""
    real = Path(os.path.realpath(given))
    if not real.exists():
        raise ConfigError(f"{given} was not found.")
    if real.is_file():
        return [(real, kind_of(real) or "text")]  # a file chosen by name is tried as text
    if not real.is_dir():
        raise ConfigError(f"{given} is not a regular file or folder.")
    found: list[tuple[Path, str]] = []
    for dirpath, dirnames, names in os.walk(real, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(names):
            kind = kind_of(Path(name))
            if kind is None or name.startswith("."):
                continue
            if len(found) == MAX_FOLDER_FILES:
                raise ConfigError(f"{given} holds more than {MAX_FOLDER_FILES:,} documents; add its subfolders one "
                                  "by one.")
            found.append((Path(dirpath) / name, kind))
    if not found:
        raise ConfigError(f"{given} holds no documents Hearth can read (text, Markdown, HTML, PDF, Word).")
    return found


def _add_file(files: dict[str, dict], path: Path, kind: str) -> None:
    try:
        st = path.stat()
    except OSError:
        return
    files[str(path)] = {"path": str(path), "kind": kind, "size": st.st_size, "mtime": st.st_mtime}
