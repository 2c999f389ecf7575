"""Continuing a cut-off answer on a local model (used by `providers/llama/worker.py` and `providers/llama/calls.py`).

An OpenAI-compatible server gets a Continue as the partial answer followed by the instruction
`base.CONTINUE`. A local model gets no instruction: its prompt is rendered up to where the assistant's text goes,
the saved partial text is put there as the open start of its turn (no end-of-turn token after it), and the model
writes on from it; only the new text streams. Measured with SmolLM2-135M at temperature 0, "Count from 1 to 10
separated by commas" cut after "1, 2, 3, 4,": with the instruction it started over ("1, 2, 3, 4, 5, …"),
prefilled it wrote " 5, 6, 7, 8, 9, 10".

- A prompt format renders the messages before the answer plus a stand-in assistant message (MARK); the prompt is
  cut where MARK begins and the partial text goes there (Hugging Face's `continue_final_message` cuts the same
  way). So every format (bare ChatML, the function-calling ChatML, a GGUF's own template) opens the assistant's
  turn exactly as it would show that answer in the history.
- Where that is not possible the request keeps the instruction: a format that does not show the message's text
  as it is (MARK missing), a template that refuses the conversation, and a plain chat whose format is one of
  llama-cpp-python's built-in handlers named in settings (`chat_format`), which Hearth cannot render itself.
- A plain chat (no tools) in a GGUF's own template (what a model gets by default) is always rendered here
  (`chat_renderer`) and completed with `create_completion`, as `create_chat_completion` would (same template,
  BOS/EOS texts and sampling: token for token the same answers at temperature 0), so that its prompt can be
  prefilled and read with progress (`providers/llama/reading.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from runtime.providers.base import continuation
from runtime.providers.llama.template import special_texts
from runtime.providers.llama.tool_prompt import chat_messages

if TYPE_CHECKING:
    from llama_cpp.llama_types import ChatCompletionRequestMessage

MARK = "\u27e6hearth: the answer so far\u27e7"  # stands in for the partial text while the prompt is rendered

Render = Callable[[list[dict[str, Any]]], str]


def prefilled(render: Render, messages: list[dict[str, Any]]) -> str | None:
    """The prompt that lets the model write on from a cut-off answer, or None when the request is no
    continuation (`base.continuation`) or this format cannot show the answer's text as it is."""
    split = continuation(messages)
    if split is None:
        return None
    before, partial = split
    try:
        rendered = render([*before, {"role": "assistant", "content": MARK}])
    except Exception:  # the template refuses this conversation: the request keeps the instruction
        return None
    at = rendered.rfind(MARK)
    return rendered[:at] + partial if at >= 0 else None


def template_renderer(template: str, *, bos: str, eos: str) -> Render:
    """A GGUF chat template rendered as llama-cpp-python's chat handler renders it (content as text, the
    assistant's header at the end)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
    # JSON-shaped chat-completions messages, which llama-cpp-python types as its TypedDicts.
    return lambda messages: formatter(
        messages=cast("list[ChatCompletionRequestMessage]", chat_messages(messages))).prompt


def plain_chat_of(model: Any) -> Render | None:
    """The loaded model's plain-chat renderer (`chat_renderer`), read once (`LoadedModel.plain_chat`: None
    unread, False none)."""
    if model.plain_chat is None:
        model.plain_chat = chat_renderer(model.llm) or False
    return model.plain_chat or None


def chat_renderer(llm: Any) -> Render | None:
    """The prompt format `create_chat_completion` uses for this model, when it is the GGUF's own template: one
    llama-cpp-python named `chat_template.*`, or a built-in format it chose because the template is exactly
    that one. None for a built-in handler named in settings."""
    from llama_cpp.llama_chat_format import guess_chat_format_from_gguf_metadata

    metadata, name = getattr(llm, "metadata", None) or {}, llm.chat_format or ""
    if llm.chat_handler is not None:
        return None
    if name.startswith("chat_template."):
        key = "tokenizer.chat_template" if name == "chat_template.default" else f"tokenizer.{name}"
    elif "tokenizer.chat_template" in metadata and guess_chat_format_from_gguf_metadata(metadata) == name:
        key = "tokenizer.chat_template"
    else:
        return None
    if not metadata.get(key):
        return None
    bos, eos = special_texts(llm)
    try:
        return template_renderer(metadata[key], bos=bos, eos=eos)
    except Exception:  # a template Jinja cannot parse: create_chat_completion reports it as usual
        return None
