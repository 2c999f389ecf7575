"""Reading a long prompt before generation, in pieces, with progress (used by `providers/llama/worker.py` and
`providers/llama/calls.py`).

llama-cpp-python evaluates the new part of a prompt inside `Llama.generate`, in one `Llama.eval` call that decodes
it in batches of `n_batch` (512) tokens, without a word to the caller and without a way to stop. So before a
generation whose new part is longer than QUIET_TOKENS the worker evaluates that part itself, EVAL_PIECE tokens at a
time (the same decode calls; on CPU pieces of 128 read as fast as 512), says how far it got ("Reading your
message… 40%") and checks Stop between pieces. The last token is left to `generate`: its prefix match finds the
rest in the KV cache and decodes only that token, so sampling starts from fresh logits. The generation loop
itself (one token per decode) is untouched. Recurrent and hybrid models are left to `generate`: their state
cannot be cut back to a prefix, so it would evaluate the whole prompt again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from runtime.providers.llama.prefix import EVAL_PIECE, common_prefix

# What a step waits for while a warm-up (cli/preload.py, `rt.models.preload_default`) holds the model: it is
# reading the prompt's fixed start — in `hearth run`, the whole first prompt — and says how far it got.
PREPARING = "Getting the model ready…"
QUIET_TOKENS = 256  # a new part this short is read without a word (about a second for SmolLM2 on 2 cores)


def preparing(percent: int | None) -> str:
    """PREPARING, with how far the warm-up has read when it has said (`LoadedModel.warming`)."""
    return PREPARING if percent is None else f"{PREPARING} {percent}%"


def reading_label(messages: list[dict[str, Any]]) -> str:
    """What the model is reading, in words for the person: its newest input."""
    return "Reading the tool results" if messages and messages[-1].get("role") == "tool" else "Reading your message"


def read_prompt(llm: Any, prompt: list[int], stop: threading.Event, report: Callable[[int], None]) -> bool:
    """Evaluate the part of `prompt` that the KV cache does not hold, all but its last token, calling
    `report(percent)` before each piece. False when `stop` was set meanwhile (what was read stays cached)."""
    if getattr(llm, "_is_recurrent", True) or getattr(llm, "_is_hybrid", True) or len(prompt) >= llm.n_ctx():
        return True  # (a prompt too long for the context is refused by the library, in its words)
    cached = common_prefix(llm.input_ids[: llm.n_tokens], prompt)
    todo = len(prompt) - 1 - cached
    if todo <= QUIET_TOKENS:
        return True
    llm.n_tokens = cached  # the next eval() drops whatever the cache holds beyond the common prefix
    for done in range(0, todo, EVAL_PIECE):
        if stop.is_set():
            return False
        report(100 * done // todo)
        llm.eval(prompt[cached + done : cached + min(todo, done + EVAL_PIECE)])
    return not stop.is_set()
