"""The prompt side of tool calls on llama.cpp (used by `providers/llama/worker.py`): llama-cpp-python's
`chatml-function-calling` ChatML prompt, rendered here with fixes; the tokens and the logits processors of the
choice between a message and a call and of a small model's message (`providers/llama/worker.py` says why); the GBNF
grammars that constrain the function name and its arguments; argument parsing, and what makes two calls the
same; and `Meter`, the token count and stop check inside llama.cpp's sampling loop.

Why not the library's handler (0.3.36): it (1) raises "Automatic streaming tool choice is not supported" for a
streamed tool call, (2) constrains a plain-message answer with the follow-up grammar so the text can only be
empty or `functions.<name>:`, (3) drops `tool` messages from the prompt, so the model never sees a tool result,
(4) lists the tools only when the conversation has a system message, and (5) without an explicit
`tool_choice="auto"` leaves the tools out of the prompt altogether. The prompt here is the same ChatML text as
the library's template, plus those fixes.
"""

from __future__ import annotations

import json
import threading
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


def render_tool_prompt(messages: list[dict[str, Any]], functions: list[dict[str, Any]], *, bare: bool = False) -> str:
    """The ChatML prompt of llama-cpp-python's `chatml-function-calling` format, fixed: the tool list is
    always there (a default system message when the conversation has none), tool results are shown, and an
    assistant turn with tool calls renders as the calls the model would have produced. `bare`: an assistant
    message renders as its text alone, without `message:` (as a small model's messages are generated)."""
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
                head = "" if bare else "message:\n"
                parts.append(f"<|im_start|>assistant\n{head}{content}<|im_end|>\n")
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


def choose_branch(message: int, call: int, reach: float | None = None) -> Callable[[Any, Any], Any]:
    """A logits processor that leaves only one branch token possible: `call` when the model scores it above
    `message` and, with `reach`, at most `reach` below its favourite token of all (see `providers/llama/worker.py`)."""

    def process(_input_ids: Any, scores: Any) -> Any:
        chosen = scores[call] > scores[message] and (reach is None or scores[call] >= scores.max() - reach)
        keep = call if chosen else message
        scores[:] = float("-inf")
        scores[keep] = 0.0
        return scores

    return process


def format_tokens(llm: Any, branch: tuple[int, ...]) -> list[int]:
    """The tokens a small model's message must not begin with: the two branch tokens and every token that
    starts with `<` (the `<message>` placeholder, the end of the turn: the message is never empty)."""
    out = list(branch)
    for token in range(llm.n_vocab()):
        text = llm.detokenize([token], special=True).lstrip()
        if text.startswith(b"<") and token not in out:
            out.append(token)
    return out


def not_first(token_ids: list[int]) -> Callable[[Any, Any], Any]:
    """A logits processor that forbids these tokens as the first sampled token of a completion."""
    first: list[int] = []

    def process(input_ids: Any, scores: Any) -> Any:
        if not first:
            first.append(len(input_ids))
        if len(input_ids) == first[0]:
            scores[token_ids] = float("-inf")
        return scores

    return process


def current_turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The system messages and the conversation from its last user message on."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    return [m for m in messages[:last] if m.get("role") == "system"] + messages[last:]


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


class Meter:
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
