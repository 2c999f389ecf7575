"""A tool step on a model's own chat template (models of 1 B parameters and more whose template has a known
call format, see `providers/llama/template.py`); called by `providers/llama/worker.py`'s `Job`.

1. The prompt is the model's template rendered with the conversation and the tools; its static prefix comes
   from the prompt-prefix cache (`providers/llama/prefix.py`). A Continue opens the assistant's turn with the cut-off
   answer's text instead (`providers/llama/prefill.py`); a call can then start only with hermes' `<tool_call>`.
2. The model writes freely. Its text streams as TEXT, except the last few characters that could be the start
   of a call (`CallDetector`): `<tool_call>` anywhere (hermes), or at the very start `[TOOL_CALLS]`
   (mistral, a control token, which is why tokens are rendered with their special text) or `{` /
   `<|python_tag|>` (llama3_json). A plain answer ends at the end-of-turn token.
3. Once the start of a call is seen, free writing stops and the call is written under a grammar made from the
   tools' JSON schemas: `{"name": <one of the tool names>, "arguments": <that tool's schema>}` (`parameters`
   for llama3_json; inside `[ … ]` for mistral), so the name is a real tool and the arguments valid JSON of the
   right shape. TOOL_START is sent as soon as the name is complete, TOOL_CALLS when the object is.
A request with `tool_choice="required"` (or naming a tool: the worker then passes only that tool) skips step 2: the call
starts right after the prompt. One call per step (the agent loop calls again in the next step). Tokens are sampled with
llama-cpp-python's own sampler chain (`Llama.generate`: top-k 40, top-p 0.95, min-p 0.05, as `create_completion`; free
text with the model's recommended top-p and repeat penalty, providers/llama/provider.py), decoded incrementally
(multi-byte characters split across tokens come out whole). """

from __future__ import annotations

import codecs
import json
import random
import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any, Protocol

from runtime.errors import ProviderError
from runtime.providers.base import TEXT, TOOL_CALLS, TOOL_START, ModelRequest, ToolCallRequest, must_call
from runtime.providers.llama.models import LoadedModel, quiet_llama_cpp
from runtime.providers.llama.prefill import prefilled
from runtime.providers.llama.prefix import PrefixCache, prepare_prefix
from runtime.providers.llama.reading import read_prompt
from runtime.providers.llama.template import HERMES, LLAMA3, MISTRAL, ChatTemplate
from runtime.providers.llama.tool_prompt import Meter, cached_grammar, parse_args

_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
MARKERS = {HERMES: "<tool_call>\n", MISTRAL: "[TOOL_CALLS]", LLAMA3: ""}  # what a call starts with


class TemplateJob(Protocol):
    """What a template step uses of its generation: the worker's `Job`, which imports this module."""

    model: LoadedModel
    request: ModelRequest
    prefix_cache: PrefixCache | None
    meter: Meter
    stop: threading.Event
    seed: int | None
    temperature: float
    top_p: float
    repeat_penalty: float
    max_tokens: int

    def emit(self, item: Any) -> None: ...
    def finish(self, reason: str) -> None: ...
    def reading(self, percent: int) -> None: ...


class CallDetector:
    """Splits the model's free text into what can be shown now and what might start a call."""

    def __init__(self, fmt: str, *, within: bool = False):
        self.fmt = fmt
        self.found = False
        self._held = ""
        # Something other than white space came out already; `within`: the text goes on from a cut-off answer.
        self._started = within

    def feed(self, text: str) -> str:
        held = self._held + text
        if self.fmt == HERMES:
            at = held.find("<tool_call>")
            if at >= 0:
                self.found, self._held = True, ""
                return held[:at]
            keep = _partial_suffix(held, "<tool_call>")
        else:
            if self._started:
                return held
            stripped = held.lstrip()
            if not stripped:
                self._held = held
                return ""
            markers = ("[TOOL_CALLS]", "[{") if self.fmt == MISTRAL else ("{", "<|python_tag|>")
            if any(stripped.startswith(m) for m in markers):
                self.found, self._held = True, ""
                return ""
            if any(m.startswith(stripped) for m in markers):
                self._held = held
                return ""
            self._started = True
            keep = 0
        self._held = held[len(held) - keep :] if keep else ""
        return held[: len(held) - keep]

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a beginning of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def call_schema(fmt: str, functions: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of one call of any of the tools (each tool's own argument schema under its name)."""
    key = "parameters" if fmt == LLAMA3 else "arguments"
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": f["name"]}, key: f.get("parameters") or {"type": "object"}},
            "required": ["name", key],
            "additionalProperties": False,
        }
        for f in functions
    ]
    one = calls[0] if len(calls) == 1 else {"oneOf": calls}
    return {"type": "array", "items": one, "minItems": 1, "maxItems": 1} if fmt == MISTRAL else one


def call_grammar(fmt: str, functions: list[dict[str, Any]]) -> str:
    """GBNF for one call, after optional white space (Qwen writes `<tool_call>\\n{…}`). A schema the converter
    cannot handle falls back to any JSON value: the call is parsed and checked afterwards anyway."""
    from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

    try:
        gbnf = json_schema_to_gbnf(json.dumps(call_schema(fmt, functions)))
    except Exception:
        gbnf = JSON_GBNF
    return re.sub(r"^root\s*::=", "call ::=", gbnf, count=1, flags=re.MULTILINE) + '\nroot ::= [ \\t\\n]* call\n'


def parse_call(fmt: str, text: str) -> tuple[str | None, str, dict[str, Any] | None]:
    """(name, argument JSON text, parsed arguments) of a call the grammar produced; parsed None when cut off."""
    try:
        value = json.loads(text)
    except ValueError:
        m = _NAME.search(text)
        return (m.group(1) if m else None), text, None
    if fmt == MISTRAL and isinstance(value, list):
        value = value[0] if value else {}
    if not isinstance(value, dict):
        return None, text, None
    args = value.get("parameters", value.get("arguments"))
    name = value.get("name")
    if isinstance(args, str):  # some models quote the arguments object
        args = parse_args(args)
    if not isinstance(args, dict):
        return name, json.dumps(args), None
    return name, json.dumps(args, ensure_ascii=False), args


class Sampler:
    """Tokens and their text from a prompt, with llama-cpp-python's sampler chain. `reason` after the loop:
    "stop" (end of turn), "length" (token budget) or None (stopped, or the caller broke off)."""

    def __init__(self, job: TemplateJob, tokens: list[int], *, max_tokens: int, grammar: Any = None):
        llm = job.model.llm
        if len(tokens) >= llm.n_ctx():
            raise ProviderError(
                f"The conversation is too long for the model's context window ({len(tokens)} tokens of "
                f"{llm.n_ctx()}). Start a new task or raise the context size in Settings."
            )
        self.job, self.tokens, self.grammar = job, tokens, grammar
        self.budget = max(1, min(max_tokens, llm.n_ctx() - len(tokens)))
        self.sampled: list[int] = []
        self.reason: str | None = None

    def __iter__(self) -> Iterator[str]:
        job, llm = self.job, self.job.model.llm
        llama_cpp = quiet_llama_cpp()
        vocab = llm._model.vocab
        llm.set_seed(job.seed if job.seed is not None else random.randint(0, 2**31 - 1))
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        if not read_prompt(llm, self.tokens, job.stop, job.reading):  # a long new part, with progress
            return
        free = self.grammar is None  # the model's recommended top_p and repeat penalty are for its free text
        gen = llm.generate(self.tokens, temp=job.temperature, top_k=40, top_p=job.top_p if free else 0.95,
                           min_p=0.05, repeat_penalty=job.repeat_penalty if free else 1.0, grammar=self.grammar)
        try:
            for token in gen:
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    self.reason = "stop"
                    return
                self.sampled.append(token)
                job.meter.output += 1
                text = decoder.decode(llm.detokenize([token], special=True))
                if text:
                    yield text
                if job.stop.is_set():
                    return
                if len(self.sampled) >= self.budget:
                    self.reason = "length"
                    return
        finally:
            gen.close()


def run_template_step(job: TemplateJob, chat: ChatTemplate, functions: list[dict[str, Any]]) -> None:
    request, llm = job.request, job.model.llm
    tools = [{"type": "function", "function": f} for f in functions]
    written = None
    if not must_call(request):  # a cut-off answer: the model writes on from its text (providers/llama/prefill.py)
        written = prefilled(lambda messages: chat.render(messages, tools), request.messages)
    prompt = written if written is not None else chat.render(request.messages, tools)
    job.model.last_prompt = prompt
    tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
    head = [m for m in request.messages[:1] if m.get("role") == "system"]
    if job.prefix_cache is not None:
        prepare_prefix(job.model, job.prefix_cache, tokens, functions, head, tools, job.reading)
    job.meter.prompt = len(tokens)

    if must_call(request):  # no free writing: the call starts at once
        marker = MARKERS[chat.format]
        before = llm.tokenize(marker.encode("utf-8"), add_bos=False, special=True) if marker else []
        used = 0
    else:
        detector = CallDetector(chat.format, within=written is not None)
        free = Sampler(job, tokens, max_tokens=job.max_tokens)
        for text in free:
            shown = detector.feed(text)
            if shown:
                job.emit((TEXT, shown))
            if detector.found:
                break
        if job.stop.is_set():
            return
        if not detector.found:
            rest = detector.flush()
            if rest:
                job.emit((TEXT, rest))
            job.finish(free.reason or "stop")
            return
        # The call's text so far is dropped for llama3_json (the grammar writes the whole object), kept as the
        # marker for the others (the grammar writes what follows it).
        before, used = ([] if chat.format == LLAMA3 else free.sampled), len(free.sampled)
    grammar = cached_grammar(quiet_llama_cpp(), gbnf=call_grammar(chat.format, functions))
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    names = {f["name"] for f in functions}
    body: list[str] = []
    started = False
    constrained = Sampler(job, tokens + before, max_tokens=max(1, job.max_tokens - used), grammar=grammar)
    for text in constrained:
        body.append(text)
        if not started and (m := _NAME.search("".join(body))) and m.group(1) in names:
            job.emit((TOOL_START, 0, call_id, m.group(1)))
            started = True
    if job.stop.is_set():
        return
    name, arguments, args = parse_call(chat.format, "".join(body).strip())
    if name is None or name not in names:
        raise ProviderError("The model started a tool call but did not name one of its tools.")
    if not started:
        job.emit((TOOL_START, 0, call_id, name))
    job.emit((TOOL_CALLS, [ToolCallRequest(call_id=call_id, name=name, arguments=arguments, args=args)]))
    job.finish("length" if args is None and constrained.reason == "length" else "tool_calls")
