"""Local models (`rt.models`): the catalog, installed models, downloads, and loading the default model ahead of
the first send.

    rt.models.catalog()                       # catalog entries, with installed / won't-fit marks
    rt.models.installed()                     # the bundled model and every downloaded or added one
    await rt.models.pull("qwen2.5-3b-instruct", on_progress)  # or "OWNER/REPO/FILE.gguf", or a hf.co URL
    await rt.models.cancel("qwen2.5-3b-instruct")             # stop it (or a paused one) and delete the partial file
    rt.models.paused()                        # started, not finished, not running: resume with pull(p.ref)
    await rt.models.remove("qwen2.5-3b-instruct")
    await rt.models.add_local("/models/mine.gguf")
    rt.models.set_hf_token("hf_...")          # into the keyring, for gated repositories
    await rt.models.preload_default()         # load + warm the prompt prefix in the background

Decisions:
- Installed models are served by the data folder's local llama.cpp provider (the first `llama_cpp` provider
  without a `model_path`, `builtin` by default) under `builtin/<name>`.
- `pull` runs the download in a worker thread; cancelling the awaiting task pauses it (the thread stops
  at its next 1 MB chunk, waited for up to PAUSE_WAIT; the partial file stays and the next pull resumes it).
  `on_progress` gets `DownloadProgress` snapshots on the event loop. A second pull of a file that is
  downloading fails with a sentence, except right after a pause: then it waits for the paused thread to let go
  and resumes. A paused download stays listed by `paused()` (local_models/partials.py) until it finishes or
  is cancelled, across restarts.
- No token is sent for public repositories; only when the Hub says a repository is gated or private is the
  keyring's `huggingface` entry looked up (so a headless machine never hears about keyrings it does not need).
- Removing a model deletes a downloaded file (not a file the person added: that is theirs), frees it if loaded,
  and moves the default model back to the bundled one when it was the default.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from ..config import BUILTIN_MODEL, split_model_ref
from ..errors import ConfigError, DownloadCancelled, ModelError, ProviderError
from ..kits.task import AgentKit
from ..local_models.catalog import (
    CatalogEntry,
    catalog_entry,
    catalog_entry_for_file,
    estimated_ram_bytes,
    fits_in_ram,
    load_catalog,
)
from ..local_models.gguf_info import read_gguf_info
from ..local_models.hub import (
    DownloadStop,
    HubFile,
    download,
    fetch_metadata,
    hub_endpoint,
    parse_hub_ref,
    partial_path,
    remove_file,
)
from ..local_models.library import BUNDLED_MODEL_NAME, ModelRecord, model_name_for, sha256_of
from ..local_models.machine import human_bytes
from ..local_models.partials import PartialDownload
from ..local_models.progress import DownloadProgress, ProgressReporter
from .core import Core

log = logging.getLogger(__name__)
HF_TOKEN_NAME = "huggingface"
PAUSE_WAIT = 2.0  # how long a paused pull waits for its thread to write its last chunk


class CatalogModel(BaseModel):
    id: str
    label: str
    params: str
    summary: str
    repo: str
    file: str
    size: int | None  # bytes: exact when known, else the Hub listing's rounded size
    context_length: int
    ram_needed: int
    fits: bool | None  # False: this computer has less memory than the model needs
    tool_format: str
    license: str
    installed: str | None  # the model reference when installed


class InstalledModel(BaseModel):
    name: str
    ref: str  # what a task's model is set to
    label: str
    source: str  # bundled | hub | local
    path: str
    size: int
    present: bool  # False when an added file was moved or deleted outside Hearth
    repo: str | None = None
    file: str | None = None
    sha256: str = ""
    ram_needed: int | None = None
    fits: bool | None = None


class PausedDownload(BaseModel):
    ref: str  # what `pull` resumes it with
    label: str
    downloaded: int  # bytes in the partial file
    total: int | None


class LocalModels:
    def __init__(self, core: Core, kit: AgentKit):
        self._core = core
        self._library = core.library
        self._kit = kit  # the default model's provider and first prompt, for preloading
        self._pulls: dict[str, tuple[asyncio.Future, DownloadStop]] = {}

    # -- what there is --

    def local_provider_id(self) -> str:
        for p in self._core.settings.providers:
            if p.kind == "llama_cpp" and not p.model_path:
                return p.id
        return split_model_ref(BUILTIN_MODEL)[0]

    def catalog(self) -> list[CatalogModel]:
        installed = {r.catalog_id: r.name for r in self._library.records() if r.catalog_id}
        pid = self.local_provider_id()
        return [
            CatalogModel(
                id=e.id, label=e.label, params=e.params, summary=e.summary, repo=e.repo, file=e.file, size=e.size,
                context_length=e.context_length, ram_needed=e.ram_bytes, fits=fits_in_ram(e.ram_bytes),
                tool_format=e.tool_format, license=e.license,
                installed=f"{pid}/{installed[e.id]}" if e.id in installed else None,
            )
            for e in load_catalog()
        ]

    def installed(self) -> list[InstalledModel]:
        pid = self.local_provider_id()
        out = [self._bundled_info(pid)]
        for r in self._library.records():
            entry = catalog_entry(r.catalog_id) if r.catalog_id else None
            ram = entry.ram_bytes if entry else estimated_ram_bytes(r.size)
            path = self._library.path(r)
            out.append(InstalledModel(
                name=r.name, ref=f"{pid}/{r.name}", label=entry.label if entry else r.name, source=r.source,
                path=str(path), size=r.size, present=path.is_file(), repo=r.repo, file=r.file, sha256=r.sha256,
                ram_needed=ram, fits=fits_in_ram(ram),
            ))
        return out

    def _bundled_info(self, pid: str) -> InstalledModel:
        from ..providers.llama.models import bundled_model_path

        try:
            path = bundled_model_path()
            size, present = path.stat().st_size, True
        except (ProviderError, OSError):
            path, size, present = Path(""), 0, False
        return InstalledModel(name=BUNDLED_MODEL_NAME, ref=f"{pid}/{BUNDLED_MODEL_NAME}",
                              label="SmolLM2 135M (bundled)", source="bundled", path=str(path), size=size,
                              present=present, ram_needed=estimated_ram_bytes(size), fits=True)

    # -- downloads --

    async def pull(self, ref: str,
                   on_progress: Callable[[DownloadProgress], None] | None = None) -> InstalledModel:
        """Download a catalog model (by id) or a Hugging Face file (OWNER/REPO/FILE.gguf or its URL), resuming a
        partial download; returns it installed. `ModelError` says what went wrong; cancelling pauses it."""
        self._core.writable()
        entry = catalog_entry(ref.strip())
        target = HubFile(entry.repo, entry.file, entry.revision) if entry else parse_hub_ref(ref)
        entry = entry or catalog_entry_for_file(target.repo, target.file)
        key = str(target)
        previous = self._pulls.get(key)
        if previous is not None:
            fut, cancel = previous
            if not cancel.is_set():
                raise ModelError(f"{target.file} is already downloading.")
            discarded = cancel.discard
            await asyncio.wait({fut})  # a paused download's thread lets go of the partial file
            if cancel.discard and not discarded:  # cancelled while this pull waited for it: so is this one
                raise DownloadCancelled(target.file, discarded=True)
        known = self._library.find_download(target.repo, target.file)
        if known is not None and self._library.path(known).is_file():
            return self._info(known.name)
        cancel = DownloadStop()
        reporter = ProgressReporter(asyncio.get_running_loop(), on_progress, entry.id if entry else target.file)
        fut = asyncio.ensure_future(asyncio.to_thread(self._pull_sync, target, entry, reporter, cancel))
        self._pulls[key] = (fut, cancel)
        fut.add_done_callback(lambda f: self._pull_ended(key, f))
        try:
            record = await asyncio.shield(fut)
        except asyncio.CancelledError:
            cancel.set()  # the thread stops at its next chunk, which has then reached the partial file
            await asyncio.wait({fut}, timeout=PAUSE_WAIT)
            raise
        return self._info(record.name)

    def paused(self) -> list[PausedDownload]:
        """Downloads started and not finished that are not running now (paused, or cut by a quit or a crash),
        oldest first; `pull(p.ref)` resumes one, `cancel(p.ref)` deletes its partial file."""
        running = {key for key, (_fut, stop) in self._pulls.items() if not stop.is_set()}
        return [PausedDownload(ref=e.ref, label=e.label, downloaded=size, total=e.total)
                for e, size in self._library.partials.entries(skip=running)]

    async def cancel(self, ref: str) -> bool:
        """Stop a running download and delete what it downloaded so far (its `pull` raises
        `DownloadCancelled` with `discarded`), or delete a paused one's partial file; False when there is no
        download of `ref`."""
        entry = catalog_entry(ref.strip())
        key = str(HubFile(entry.repo, entry.file, entry.revision) if entry else parse_hub_ref(ref))
        running = self._pulls.get(key)
        if running is None:
            return await asyncio.to_thread(self._library.partials.discard, key)
        fut, stop = running
        stop.discard = True
        stop.set()
        await asyncio.wait({fut}, timeout=PAUSE_WAIT)
        return True

    def _pull_ended(self, key: str, fut: asyncio.Future) -> None:
        if self._pulls.get(key, (None,))[0] is fut:
            del self._pulls[key]
        if not fut.cancelled():
            fut.exception()  # retrieved: a paused download's DownloadCancelled is expected, not "never retrieved"

    def _pull_sync(self, target: HubFile, entry: CatalogEntry | None, reporter: ProgressReporter,
                   cancel: threading.Event) -> ModelRecord:
        try:
            return self._download_sync(target, entry, reporter, cancel)
        except DownloadCancelled:
            raise
        except ModelError as exc:  # a partial download is mentioned only when there is one
            kept = next((size for e, size in self._library.partials.entries() if e.key == str(target)), 0)
            if not kept:
                raise
            raise ModelError(f"{exc} The {human_bytes(kept)} downloaded so far are kept: trying again goes on "
                             "from there.") from exc

    def _download_sync(self, target: HubFile, entry: CatalogEntry | None, reporter: ProgressReporter,
                       cancel: threading.Event) -> ModelRecord:
        endpoint = hub_endpoint()
        reporter.phase("checking")
        token = None
        try:
            remote = fetch_metadata(target, endpoint=endpoint, token=None)
        except ModelError as exc:
            token = self._hub_token() if "gated" in str(exc) or "private" in str(exc) else None
            if token is None:
                raise
            remote = fetch_metadata(target, endpoint=endpoint, token=token)
        ram = entry.ram_bytes if entry else estimated_ram_bytes(remote.size)
        reporter.phase("downloading", total=remote.size, ram_needed=ram, fits=fits_in_ram(ram))
        partial, partials = partial_path(self._library.hub_cache, target, remote), self._library.partials
        partials.note(PartialDownload(key=str(target), ref=_resume_ref(target, entry), partial=self._library.relative(
            partial), label=entry.label if entry else target.file, total=remote.size))
        try:
            path = download(target, remote, self._library.hub_cache, token=token, endpoint=endpoint,
                            on_bytes=reporter.bytes, cancel=cancel, expected_sha256=entry.sha256 if entry else "")
        finally:
            if not partial.exists():  # done, cancelled, or deleted for a wrong checksum: nothing to resume
                partials.drop(str(target))
        if read_gguf_info(str(path), template=False) is None:
            remove_file(self._library.hub_cache, target.repo, path)
            raise ModelError(f"{target.file} is not a GGUF model file; it was deleted.")
        record = self._library.add(ModelRecord(
            name=entry.id if entry else model_name_for(target.file), source="hub", path=self._library.relative(path),
            size=path.stat().st_size, sha256=remote.sha256 or "", repo=target.repo, file=target.file,
            revision=target.revision, commit=remote.commit, catalog_id=entry.id if entry else None,
        ))
        reporter.phase("done", done=record.size, total=record.size, eta=None)
        return record

    def _hub_token(self) -> str | None:
        try:
            return self._core.keys.get(HF_TOKEN_NAME)
        except Exception:  # a broken keyring: go on without a token, the Hub's refusal says the rest
            log.warning("reading the Hugging Face token failed", exc_info=True)
            return None

    def set_hf_token(self, token: str) -> None:
        """Keep a Hugging Face token in the keyring; used only for gated or private repositories."""
        if not token.strip():
            raise ConfigError("The Hugging Face token is empty.")
        self._core.keys.set(HF_TOKEN_NAME, token.strip())

    # -- adding and removing --

    async def add_local(self, path: str | Path) -> InstalledModel:
        """Use a GGUF file from elsewhere on this computer (it stays where it is)."""
        self._core.writable()
        file = Path(path).expanduser()
        if not file.is_file():
            raise ModelError(f"There is no file {file}.")
        file = file.resolve()
        known = self._library.find_path(file)
        if known is not None:
            return self._info(known.name)
        if await asyncio.to_thread(read_gguf_info, str(file), template=False) is None:
            raise ModelError(f"{file.name} is not a GGUF model file; Hearth runs .gguf files (llama.cpp).")
        digest = await asyncio.to_thread(sha256_of, file)
        record = self._library.add(ModelRecord(name=model_name_for(file.name), source="local", path=str(file),
                                             size=file.stat().st_size, sha256=digest))
        return self._info(record.name)

    async def remove(self, name: str) -> None:
        """Remove an installed model: a downloaded file is deleted, an added one only forgotten."""
        self._core.writable()
        if name == BUNDLED_MODEL_NAME:
            raise ModelError("The bundled model is part of Hearth and cannot be removed.")
        record = self._library.get(name)
        if record is None:
            raise ModelError(f"No installed model is named {name!r}; `hearth models list` shows them.")
        path = self._library.path(record)
        from ..providers.llama.models import unload_file

        await asyncio.to_thread(unload_file, str(path))
        self._library.remove(name)
        if record.source == "hub" and record.repo:
            await asyncio.to_thread(remove_file, self._library.hub_cache, record.repo, path)
        if self._core.settings.default_model == f"{self.local_provider_id()}/{name}":
            await self._core.save_settings(self._core.settings.model_copy(update={"default_model": BUILTIN_MODEL}))

    def _info(self, name: str) -> InstalledModel:
        return next(m for m in self.installed() if m.name == name)

    # -- a fast first answer --

    async def preload_default(self) -> bool:
        """Load the default model and evaluate (or restore from disk) its prompt prefix, so the first send
        answers at once. Returns False when the default model is not a local one. Never raises: a problem
        shows at the first send, with the turn."""
        try:
            provider_id, model = split_model_ref(self._core.settings.default_model)
            provider = self._kit.provider(provider_id)
            warm = getattr(provider, "warm", None)
            if warm is None:
                return False
            await warm(model, *await self._kit.first_prompt())
            return True
        except (ConfigError, ProviderError, ModelError) as exc:
            log.info("preloading the default model failed: %s", exc)
            return False


def _resume_ref(target: HubFile, entry: CatalogEntry | None) -> str:
    if entry is not None:
        return entry.id
    if target.revision == "main":
        return str(target)
    return f"https://huggingface.co/{target.repo}/resolve/{target.revision}/{target.file}"
