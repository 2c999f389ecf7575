"""A downloaded model's own chat template, and the tool-call format it teaches the model (used by
`providers/llama/calls.py` for models of 1 B parameters and more).

- The template is the GGUF's `tokenizer.chat_template`, rendered by llama-cpp-python's `Jinja2ChatFormatter`
  (Jinja's `ImmutableSandboxedEnvironment`: a template cannot reach Python objects or the file system) with
  the request's messages and tools, as Hugging Face renders it.
- The call format is read from the template text: `hermes` (`<tool_call>{"name", "arguments"}</tool_call>`
  blocks: Qwen2.5, Hermes), `mistral` (`[TOOL_CALLS] [{"name", "arguments"}]`) or `llama3_json` (a bare
  `{"name", "parameters"}` object: Llama 3.1/3.2). A template without any of them gets no template path
  (`chat_template_for` → None): such models keep the `chatml-function-calling` protocol of `providers/llama/worker.py`.
- Messages are shaped the way these templates expect: text content, a call's arguments as an object (they
  print `arguments | tojson`), consecutive user messages merged (Mistral's template insists on alternation),
  and for Mistral the nine-character call ids its template checks, derived from Hearth's ids.
- A template that refuses the conversation (`raise_exception`, a Jinja error) is a `ProviderError` naming it.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, cast

from runtime.errors import ProviderError
from runtime.providers.llama.tool_prompt import chat_messages

if TYPE_CHECKING:
    from llama_cpp.llama_types import ChatCompletionRequestMessage, ChatCompletionTool

HERMES, MISTRAL, LLAMA3 = "hermes", "mistral", "llama3_json"


def detect_format(template: str) -> str | None:
    if "<tool_call>" in template:
        return HERMES
    if "[TOOL_CALLS]" in template:
        return MISTRAL
    if "<|start_header_id|>" in template and "tools" in template and '"parameters"' in template:
        return LLAMA3
    return None


def mistral_id(call_id: str) -> str:
    """Mistral's templates take nine alphanumeric characters as a call id."""
    return hashlib.sha1(call_id.encode(), usedforsecurity=False).hexdigest()[:9]


def template_messages(messages: list[dict[str, Any]], fmt: str | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in chat_messages(messages):
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                fn = dict(call.get("function") or {})
                try:
                    fn["arguments"] = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    pass  # shown as the model wrote it
                cid = call.get("id", "")
                calls.append({**call, "id": mistral_id(cid) if fmt == MISTRAL else cid, "function": fn})
            m["tool_calls"] = calls
        if m.get("role") == "tool" and fmt == MISTRAL:
            m["tool_call_id"] = mistral_id(m.get("tool_call_id", ""))
        if out and m.get("role") == "user" and out[-1].get("role") == "user" and not m.get("tool_calls"):
            out[-1] = {**out[-1], "content": f"{out[-1]['content']}\n\n{m['content']}"}
            continue
        out.append(m)
    return out


class ChatTemplate:
    """A model's chat template with the call format it uses."""

    def __init__(self, template: str, *, bos: str, eos: str, fmt: str):
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.format = fmt
        self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        try:
            # JSON-shaped chat-completions messages and tools, which llama-cpp-python types as its TypedDicts.
            return self._formatter(
                messages=cast("list[ChatCompletionRequestMessage]", template_messages(messages, self.format)),
                tools=cast("list[ChatCompletionTool] | None", tools or None)).prompt
        except Exception as exc:  # jinja2.TemplateError, or the template's own raise_exception (ValueError)
            raise ProviderError(f"The model's chat template refused this conversation: {exc}") from exc


def chat_template_for(llm: Any) -> ChatTemplate | None:
    """The template path for a loaded model, or None when its GGUF has no template with a known call format."""
    template: str | None = (getattr(llm, "metadata", None) or {}).get("tokenizer.chat_template")
    if not template or (fmt := detect_format(template)) is None:
        return None
    bos, eos = special_texts(llm)
    try:
        return ChatTemplate(template, bos=bos, eos=eos, fmt=fmt)
    except Exception:  # a template Jinja cannot even parse: the model keeps the generic protocol
        return None


def special_texts(llm: Any) -> tuple[str, str]:
    """The texts of the model's BOS and EOS tokens, as llama-cpp-python hands them to a GGUF template."""
    model, bos, eos = llm._model, llm.token_bos(), llm.token_eos()
    return (model.token_get_text(bos) if bos != -1 else "", model.token_get_text(eos) if eos != -1 else "")


def chat_of(model: Any) -> ChatTemplate | None:
    """The loaded model's template path, read once (`LoadedModel.chat`: None unread, False none usable)."""
    if model.chat is None:
        model.chat = chat_template_for(model.llm) or False
    return model.chat or None
