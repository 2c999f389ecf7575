"""The prompt side of tool calls on llama.cpp (used by `llama_worker.py`): llama-cpp-python's
`chatml-function-calling` ChatML prompt, rendered here with fixes; the tokens and the logits processor of the
choice between a message and a call; the GBNF grammars that constrain the function name and its arguments;
argument parsing, and what makes two calls the same.

Why not the library's handler (0.3.36): it (1) raises "Automatic streaming tool choice is not supported" for a
streamed tool call, (2) constrains a plain-message answer with the follow-up grammar so the text can only be
empty or `functions.<name>:`, (3) drops `tool` messages from the prompt, so the model never sees a tool result,
(4) lists the tools only when the conversation has a system message, and (5) without an explicit
`tool_choice="auto"` leaves the tools out of the prompt altogether. The prompt here is the same ChatML text as
the library's template, plus those fixes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # chat-completions content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def cached_grammar(llama_cpp: Any, *, gbnf: str | None = None, schema: dict[str, Any] | None = None) -> Any:
    key = gbnf if gbnf is not None else "schema:" + json.dumps(schema, sort_keys=True)
    compiled = _grammar_cache.get(key)
    if compiled is None:
        lg = llama_cpp.llama_grammar.LlamaGrammar
        if gbnf is not None:
            compiled = lg.from_string(gbnf, verbose=False)
        else:
            try:
                compiled = lg.from_json_schema(json.dumps(schema or {"type": "object"}), verbose=False)
            except Exception:  # a schema the converter does not support: any JSON value
                compiled = lg.from_string(llama_cpp.llama_grammar.JSON_GBNF, verbose=False)
        if len(_grammar_cache) > 256:
            _grammar_cache.clear()
        _grammar_cache[key] = compiled
    return compiled


def parse_args(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def branch_tokens(llm: Any) -> tuple[int, int] | None:
    """The first tokens of `message:` and of `functions.` after the assistant header's newline, or None when
    the tokenizer does not give two distinct tokens there."""
    base = llm.tokenize(b"\n", add_bos=False, special=True)
    message = llm.tokenize(b"\nmessage:", add_bos=False, special=True)
    call = llm.tokenize(b"\nfunctions.", add_bos=False, special=True)
    n = len(base)
    if message[:n] != base or call[:n] != base or len(message) <= n or len(call) <= n or message[n] == call[n]:
        return None
    return message[n], call[n]


def only_tokens(*token_ids: int) -> Callable[[Any, Any], Any]:
    """A logits processor that leaves only these tokens possible."""
    keep = list(token_ids)

    def process(_input_ids: Any, scores: Any) -> Any:
        kept = scores[keep].copy()
        scores[:] = float("-inf")
        scores[keep] = kept
        return scores

    return process


def call_key(name: str, arguments: str) -> tuple[str, str]:
    """What makes two calls the same: the name and the arguments (as parsed JSON when they parse)."""
    parsed = parse_args(arguments)
    return name, json.dumps(parsed, sort_keys=True) if parsed is not None else arguments.strip()


def answered_calls(messages: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """The calls (`call_key`) of the assistant message whose tool results end the conversation."""
    i = len(messages)
    while i and messages[i - 1].get("role") == "tool":
        i -= 1
    if i == len(messages) or not i:
        return set()
    calls = messages[i - 1].get("tool_calls") or []
    return {
        call_key((c.get("function") or {}).get("name", ""), (c.get("function") or {}).get("arguments") or "{}")
        for c in calls
    }
