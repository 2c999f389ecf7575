"""The static prefix of a local model's prompt (system prompt + tool list), evaluated once and kept on disk, so a
fresh process answers its first input without evaluating it again (used by `providers/llama/worker.py`).

- The static prefix is found by rendering the prompt for the request's system messages with two different
  user messages (PROBES) and keeping the tokens the two have in common: whatever the template puts before the
  person's words (a Llama 3 template puts the tool list into the first user message, a ChatML one into the
  system message). It is remembered per model and rendered input.
- The KV cache of sequence 0 holding exactly those tokens is saved with `llama_state_seq_save_file` (~20 MB for
  ~900 tokens of SmolLM2, ~24 ms) as `<data folder>/cache/kv-prefix/<key>.kv`, the key a sha256 of the model
  file's identity (its sha256), the llama.cpp version, the context size and the prefix tokens. Loading
  (`llama_state_seq_load_file`, ~8 ms) checks the tokens it returns; anything odd falls back to evaluating.
- Only the newest KEEP_FILES files are kept. `memo` keeps small per-model lists beside them (the tokens a small
  model's message must not start with, which take a pass over the whole vocabulary to find).
- The cache is used only when the model's KV cache does not hold the prefix already (later steps and turns of
  a conversation reuse it in memory, through llama-cpp-python's own prefix match).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime.providers.llama.models import LoadedModel, quiet_llama_cpp
from runtime.providers.llama.template import chat_of
from runtime.providers.llama.tool_prompt import branch_tokens, format_tokens, render_tool_prompt

log = logging.getLogger(__name__)

PROBES = ("Hello!", "What is in the file notes.txt?")
MIN_PREFIX_TOKENS = 64  # shorter prefixes evaluate faster than a file is read
KEEP_FILES = 12
EVAL_PIECE = 128  # tokens evaluated between checks of a stop request

Report = Callable[[int], None]  # told how far an evaluation got, in percent, before each piece


def common_prefix(a: Any, b: Any) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def prompt_renderer(model: LoadedModel, functions: list[dict], tools: list[dict]
                    ) -> tuple[str, Callable[[list[dict]], str], bool]:
    """(kind, render, add_bos) of the tool prompt `providers/llama/worker.py` builds for this model: its own template,
    or the ChatML function-calling prompt (bare for a small model)."""
    chat = None if model.small else chat_of(model)
    if chat is not None:
        return "template", lambda msgs: chat.render(msgs, tools), False
    kind = "chatml-bare" if model.small else "chatml"
    return kind, lambda msgs: render_tool_prompt(msgs, functions, bare=model.small), True


def prepare_prefix(model: LoadedModel, cache: PrefixCache, prompt: list[int], functions: list[dict],
                   head: list[dict], tools: list[dict], report: Report | None = None) -> str:
    """Before a tool step's prompt is evaluated: its static prefix from memory, disk or a fresh evaluation (with
    `report(percent)` before each piece, as the step reads the rest of its prompt: providers/llama/reading.py)."""
    kind, render, add_bos = prompt_renderer(model, functions, tools)
    llm = model.llm
    prefix = static_prefix(model, kind, render, head, tools,
                           lambda text: llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True))
    try:
        return cache.prepare(model, prompt, prefix, report=report)
    except Exception:  # the step evaluates its whole prompt as before
        log.exception("preparing the prompt prefix failed")
        llm.reset()
        return "skipped"


def warm_prefix(model: LoadedModel, cache: PrefixCache, messages: list[dict], tools: list[dict],
                stop: threading.Event | None = None) -> str:
    """Ahead of the first send: the static prefix of the prompt these system messages and tools give. When the
    messages go on past the system message (`hearth run` knows its input before the turn starts), the rest of
    the prompt is evaluated too, so that the turn's first step finds its whole prompt in the KV cache. How far
    it has read is kept in `model.warming`, for a turn that waits for it (`LoadedModel.claimed`)."""
    functions = [t.get("function", t) for t in tools if t.get("type", "function") == "function"]
    head = [m for m in messages[:1] if m.get("role") == "system"]
    kind, render, add_bos = prompt_renderer(model, functions, tools)
    llm = model.llm

    def tokenize(text: str) -> list[int]:
        return llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def report(percent: int) -> None:
        model.warming = percent

    try:
        prefix = static_prefix(model, kind, render, head, tools, tokenize)
        status = cache.prepare(model, prefix, prefix, stop, report)
        if len(messages) > len(head) and status != "stopped":
            prompt = tokenize(render(messages))
            cached = common_prefix(llm.input_ids[: llm.n_tokens], prompt)
            if cached >= len(prefix) and cached < len(prompt):
                llm.n_tokens = cached
                evaluate(llm, prompt[cached:], stop, report)
        return status
    finally:
        model.warming = None


def evaluate(llm: Any, tokens: list[int], stop: threading.Event | None, report: Report | None = None) -> bool:
    """`llm.eval(tokens)` in pieces, checking `stop` between them (and calling `report(percent)` before each);
    False (and nothing kept) when stopped."""
    for at in range(0, len(tokens), EVAL_PIECE):
        if stop is not None and stop.is_set():
            llm.reset()
            return False
        if report is not None:
            report(100 * at // len(tokens))
        llm.eval(tokens[at : at + EVAL_PIECE])
    return True


def static_prefix(model: LoadedModel, kind: str, render: Callable[[list[dict]], str], head: list[dict], tools: Any,
                  tokenize: Callable[[str], list[int]]) -> list[int]:
    """The tokens every prompt with these system messages and tools starts with."""
    key = hashlib.sha256(json.dumps([kind, head, tools], sort_keys=True, default=str).encode()).hexdigest()
    tokens = model.prefixes.get(key)
    if tokens is None:
        a, b = (tokenize(render([*head, {"role": "user", "content": p}])) for p in PROBES)
        tokens = model.prefixes[key] = a[: common_prefix(a, b)]
    return tokens


class PrefixCache:
    """The files in `folder` (the data folder's cache)."""

    def __init__(self, folder: Path | None):
        self.folder = folder

    def prepare(self, model: LoadedModel, prompt: list[int], prefix: list[int],
                stop: threading.Event | None = None, report: Report | None = None) -> str:
        """Make the model's KV cache hold `prefix` (the start of `prompt`) before `prompt` is evaluated:
        'warm' (it did), 'restored' (from disk), 'saved' (evaluated now and saved, with `report(percent)` before
        each piece), 'skipped', or 'stopped' (`stop` was set while evaluating). The outcome is also kept in
        `model.prefix_status`."""
        model.prefix_status = status = self._prepare(model, prompt, prefix, stop, report)
        return status

    def _prepare(self, model: LoadedModel, prompt: list[int], prefix: list[int], stop: threading.Event | None,
                 report: Report | None) -> str:
        llm, n = model.llm, len(prefix)
        if self.folder is None or n < MIN_PREFIX_TOKENS or prompt[:n] != prefix:
            return "skipped"
        if common_prefix(llm.input_ids[: llm.n_tokens], prompt) >= n:
            return "warm"
        if getattr(llm, "_is_recurrent", True) or getattr(llm, "_is_hybrid", True):
            return "skipped"  # their state is not a per-position cache that a prefix match can reuse
        path = self.folder / f"{self._key(model, prefix)}.kv"
        if path.is_file() and self._load(llm, path, prefix):
            with contextlib.suppress(OSError):
                os.utime(path)  # recently used: kept longest
            return "restored"
        llm.reset()
        if not evaluate(llm, prefix, stop, report):
            return "stopped"
        self._save(llm, path, prefix)
        return "saved"

    def memo(self, model: LoadedModel, name: str, compute: Callable[[], list[int]]) -> list[int]:
        """A list of token ids that only depends on the model, computed once per model file and kept here."""
        if self.folder is None:
            return compute()
        llama_cpp = quiet_llama_cpp()
        key = hashlib.sha256(f"{model.identity}\0{llama_cpp.__version__}".encode()).hexdigest()[:32]
        path = self.folder / f"{key}-{name}.json"
        with contextlib.suppress(OSError, ValueError):
            value = json.loads(path.read_text(encoding="ascii"))
            if isinstance(value, list) and all(isinstance(v, int) for v in value):
                return value
        value = compute()
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(value), encoding="ascii")
            os.replace(tmp, path)
        return value

    @staticmethod
    def _key(model: LoadedModel, prefix: list[int]) -> str:
        llama_cpp = quiet_llama_cpp()
        h = hashlib.sha256(f"{model.identity}\0{llama_cpp.__version__}\0{model.n_ctx}\0".encode())
        h.update(json.dumps(prefix).encode())
        return h.hexdigest()[:40]

    def _load(self, llm: Any, path: Path, prefix: list[int]) -> bool:
        """Restore `path` into the KV cache; a file that does not hold `prefix` is deleted and the cache left
        empty."""
        llama_cpp, n = quiet_llama_cpp(), len(prefix)
        llm.reset()
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        tokens = (llama_cpp.llama_token * n)()
        count = ctypes.c_size_t(0)
        try:
            read = llama_cpp.llama_state_seq_load_file(llm.ctx, os.fsencode(path), 0, tokens, n, ctypes.byref(count))
        except Exception:
            read = 0
        if not read or count.value != n or list(tokens) != prefix:
            log.info("prompt-prefix cache file %s did not match; evaluating instead", path.name)
            llm._ctx.kv_cache_seq_rm(-1, 0, -1)
            with contextlib.suppress(OSError):
                path.unlink()
            return False
        llm.input_ids[:n] = prefix
        llm.n_tokens = n
        llm._requires_eval = True  # the logits are not those of the restored tokens
        return True

    def _save(self, llm: Any, path: Path, prefix: list[int]) -> None:
        llama_cpp = quiet_llama_cpp()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tokens = (llama_cpp.llama_token * len(prefix))(*prefix)
            if llama_cpp.llama_state_seq_save_file(llm.ctx, os.fsencode(tmp), 0, tokens, len(prefix)):
                os.replace(tmp, path)
            else:
                tmp.unlink(missing_ok=True)
        except OSError:
            log.info("could not save the prompt-prefix cache in %s", path.parent, exc_info=True)
            return
        files = sorted(path.parent.glob("*.kv"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[KEEP_FILES:]:
            with contextlib.suppress(OSError):
                old.unlink()


def message_ban(model: LoadedModel, cache: PrefixCache | None) -> list[int]:
    """The tokens a small model's message must not begin with (`format_tokens`). Finding them detokenizes the
    whole vocabulary (~0.2 s for SmolLM2's 49k tokens), so the list is kept beside the prompt-prefix cache."""
    if model.message_ban is None:

        def compute() -> list[int]:
            return format_tokens(model.llm, branch_tokens(model.llm) or ())

        model.message_ban = cache.memo(model, "message-ban", compute) if cache is not None else compute()
    return model.message_ban
