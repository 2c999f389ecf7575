"""One generation on a loaded llama.cpp model: a worker thread and the channel it feeds (used by
`providers/llama/provider.py`).

- Each generation runs in its own thread, which converts llama-cpp-python's chunks into the provider tuples
  itself and hands them to the event loop through a small channel (`providers/llama/channel.py`). The thread holds the
  model's `threading.Lock` while it generates, and calls `on_finished` on the loop when it has exited.
- `stop` (a `threading.Event`) is checked between tokens: inside llama.cpp's sampling loop as a stopping
  criterion, and after every chunk; and between the pieces of a long prompt (`providers/llama/reading.py`). One piece
  cannot be interrupted.
- A model of 1 B parameters or more whose GGUF template has a known call format takes its tool steps on that
  template (`providers/llama/calls.py`). Other tool calls follow the `chatml-function-calling` protocol step by step
  with `Llama.create_completion` (see `providers/llama/tool_prompt.py`). First the choice between a message and a call:
  the model's own preference between the first tokens of `message:` and `functions.` (one token at temperature 0, all
  others masked), then the function's name under a grammar. (A single grammar for both branches, sampled greedily as
  llama-cpp-python does, favours the branch with more sub-word prefixes, `f`, `function`, ...: SmolLM2 then answered
  "hello" or "What is the capital of France?" with write_file. Measured on 10 plain and 6 tool prompts with the
  runtime's system prompt and tools: 3/10 plain prompts got a message that way, 9/10 this way, 6/6 tool prompts got a
  call both ways.) Then the arguments, sampled under a grammar built from the tool's JSON schema, so even a 135M model
  emits valid JSON. One call per step by default (`max_tool_calls`): offered a second one, SmolLM2 repeats the first
  (the library never returns a second call either: its follow-up choice keeps the ':' and matches no tool name); with
  more allowed, an exact repeat within a step ends the step. A first call that exactly repeats a call whose results end
  the conversation becomes a message instead: with the result in hand, SmolLM2 otherwise calls the same tool again until
  the step limit.
- Small models (`LoadedModel.small`, such as the bundled SmolLM2-135M) get their own variant of the protocol.
  Measured with the runtime's system prompt and tools on 10 plain prompts ("hello", "What is the capital of
  France?", ...) and 6 tool prompts, at temperature 0 and at 0.2 with two seeds: sensible answers to the plain
  prompts 1/30 before, 20/30 after; tool prompts 18/18 calls both, with valid JSON 16/18 before, 18/18 after.
  (1) The message follows the assistant header directly, its first token neither a branch token nor one
  starting with `<`, and it stops where the model starts writing the protocol: after `message:` SmolLM2 copied
  the format instructions ("<message> You can respond with…") that follow `message:` in the system prompt.
  A tool-less prompt gives answers as good, but then every later turn re-evaluates the ~900-token tool list:
  5-7 s per turn instead of 0.2-0.5 s here; with the tool list after the conversation the choice ignores
  the request, and a compact tool list (530 tokens) makes plain and tool prompts overlap in the choice.
  (2) A call needs `functions` both above `message` and within SMALL_CALL_REACH of the model's favourite first
  token: plain prompts got a call 20/40 times before, 2/40 after ("ok", "yes"), tool prompts 26/26 both; on
  prompts not used to choose the rule, 10/24 and 1/24 plain, 18/18 and 17/18 tool.
  (3) The choice, the name and the arguments come from a prompt with only the system message and the last
  user message (SmolLM2's choice copies its earlier turns: after one chat exchange 0/18 tool prompts got a
  call, after one with a tool call 16/22 plain prompts did); a `KvSnapshot` taken around it keeps the
  conversation's cached prefix, so a later turn costs only its new tokens.
  (4) With tool results in hand it answers instead of calling again (SmolLM2 called write_file on the file it
  had just read, or list_files at random); and its text and arguments are sampled with a repeat penalty
  (SMALL_REPEAT_PENALTY), without which a third of its answers looped until max_tokens and write_file
  contents ran on ("Hello world. This is a test. This is a test…").
- A step whose `tool_choice` is "required" or names a tool (a planning turn asking for its plan) skips the choice
  between a message and a call, as llama-cpp-python's `chatml-function-calling` handler does for a named tool:
  the prompt goes on with `functions.<name>:` and the arguments under the schema's grammar (a named tool_choice
  leaves only that tool; "required" chooses the name under a grammar of the names).
- A Continue (`base.continuation`) gets no instruction: the prompt opens the assistant's turn with the cut-off
  answer's text and the model writes on (`providers/llama/prefill.py`), in a plain chat as in a tool step, where it
  skips the choice between a message and a call (the answer is text already).
- Usage is counted exactly from the sampler (`Meter`; llama-cpp-python's streaming API reports none): input =
  prompt tokens of the step's first completion (for a small model's later turns, of the conversation's prompt),
  output = every sampled token including the end-of-turn token and, for tool steps, the few tokens of the
  constrained choice.
- A job that was stopped never reports USAGE/FINISH: a half step must not look finished.
- A side request (`purpose` "title" or "memory": runtime/engine/titles.py, runtime/memory/extraction.py) runs between a
  `KvSnapshot` and its restore, also when a turn preempts it (its stop event): the conversation stays cached
  for the person's next turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypedDict

from runtime.events import Usage
from runtime.providers.base import (
    FINISH,
    STATUS,
    TEXT,
    TOOL_CALLS,
    TOOL_START,
    USAGE,
    ModelRequest,
    ToolCallRequest,
    forced_tool,
    must_call,
)
from runtime.providers.llama.calls import run_template_step
from runtime.providers.llama.channel import END, Channel
from runtime.providers.llama.models import KvSnapshot, LoadedModel, ModelUnavailable, live_jobs, quiet_llama_cpp
from runtime.providers.llama.prefill import plain_chat_of, prefilled
from runtime.providers.llama.prefix import PrefixCache, message_ban, prepare_prefix
from runtime.providers.llama.reading import preparing, read_prompt, reading_label
from runtime.providers.llama.template import chat_of
from runtime.providers.llama.tool_prompt import (
    Meter,
    answered_calls,
    branch_tokens,
    cached_grammar,
    call_key,
    chat_messages,
    choose_branch,
    current_turn,
    not_first,
    parse_args,
    render_tool_prompt,
)

DEFAULT_MAX_TOKENS = 512
# llama-cpp-python's chat defaults; a model's recommended sampling (local_models/catalog.json) goes over them.
DEFAULT_SAMPLING = {"temperature": 0.2, "top_p": 0.95, "repeat_penalty": 1.0}
SMALL_REPEAT_PENALTY = 1.1  # a small model's text and arguments: else SmolLM2 often loops until max_tokens
SMALL_CALL_REACH = 8.5  # a small model calls only when `functions` is this close to its favourite first token
# A small model's message ends at the end of its turn, and where it starts writing the protocol.
SMALL_MESSAGE_STOPS = ["<|im_end|>", "<|im_start|>", "<message>", "\nmessage:", "\nfunctions."]


class FreeText(TypedDict):
    """The sampling of text a model writes freely (not a call's arguments)."""

    top_p: float
    repeat_penalty: float


class Job(Channel):
    """One generation: a worker thread that feeds the provider tuples into its channel."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        model: LoadedModel,
        request: ModelRequest,
        *,
        max_tool_calls: int = 1,
        sampling: dict[str, float] | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        seed: int | None = None,
        prefix_cache: PrefixCache | None = None,
    ):
        super().__init__(loop)
        self.prefix_cache = prefix_cache
        self.model = model
        self.request = request
        self.max_tool_calls = max(1, max_tool_calls)
        # The request's sampling settings win over the provider's and the model's.
        sampling = {**DEFAULT_SAMPLING, **(sampling or {})}
        self.temperature = sampling["temperature"] if request.temperature is None else request.temperature
        self.top_p = sampling["top_p"]  # these two for free text: calls keep the protocol's own
        self.repeat_penalty = sampling["repeat_penalty"]
        self.max_tokens = request.max_tokens or max_tokens
        self.seed = seed if request.seed is None else request.seed
        self.thread = threading.Thread(target=self._run, name="hearth-llama-cpp", daemon=False)
        self.meter = Meter(self.stop)

    def start(self) -> None:
        live_jobs.add(self)
        self.thread.start()

    def _run(self) -> None:
        try:
            with self.model.claimed(lambda percent: self._put((STATUS, preparing(percent)))):
                if self.model.closed:
                    raise ModelUnavailable("The model was unloaded; send the message again.")
                # A side request (a title, memories), finished or preempted, leaves the conversation in the KV
                # cache: the next turn reads only its new tokens instead of the whole conversation again.
                llm = self.model.llm
                kept = KvSnapshot.take(llm, llm.input_ids[: llm.n_tokens].tolist(), []) if (
                    self.request.purpose != "turn") else None
                try:
                    if not self.stop.is_set():
                        if any((t.get("function") or t).get("name") for t in self.request.tools):
                            self._run_tools()
                        else:
                            self._run_chat()
                finally:
                    if kept is not None:
                        kept.restore(llm)
        except BaseException as exc:  # handed to the consumer, which raises it as a ProviderError
            self._put(exc)
        finally:
            self._put(END)
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._thread_exited)

    def _sampling(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "seed": self.seed}

    @property
    def free_text(self) -> FreeText:
        """The model's recommended top_p and repeat penalty, for text it writes freely (not a call's arguments)."""
        return {"top_p": self.top_p, "repeat_penalty": self.repeat_penalty}

    def emit(self, item: Any) -> None:  # what the template path (providers/llama/calls.py) sends
        self._put(item)

    def finish(self, reason: str) -> None:
        if self.stop.is_set():
            return  # cancelled: the consumer is gone, and a half step must not look finished
        self._put((USAGE, Usage(input_tokens=self.meter.prompt, output_tokens=self.meter.output)))
        self._put((FINISH, reason))

    def reading(self, percent: int) -> None:  # how far the prompt was read (providers/llama/reading.py)
        self._put((STATUS, f"{reading_label(self.request.messages)}… {percent}%"))

    def _run_chat(self) -> None:
        llm, messages = self.model.llm, self.request.messages
        render = plain_chat_of(self.model)
        if render is not None:  # the GGUF's template, rendered here (llama/prefill.py); a Continue is prefilled
            prompt = prefilled(render, messages) or render(messages)
            _, why = self._complete(prompt, max_tokens=self.max_tokens, stop=[], emit_text=True, add_bos=False,
                                    **self.free_text)
            if why is not None:
                self.finish(why)
            return
        self.model.last_prompt = None  # a built-in chat format named in settings: rendered inside the library
        self.meter.begin()
        chunks = llm.create_chat_completion(
            messages=chat_messages(self.request.messages),
            stream=True,
            max_tokens=self.max_tokens,
            logits_processor=[self.meter.logits_processor],
            **self._sampling(),
            **self.free_text,
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
        self.finish(reason or "stop")

    def _complete(
        self,
        prompt: str,
        *,
        max_tokens: int,
        stop: list[str],
        grammar: Any = None,
        logits_processor: Callable[[Any, Any], Any] | None = None,
        emit_text: bool = False,
        temperature: float | None = None,
        top_p: float | None = None,
        repeat_penalty: float = 1.0,
        add_bos: bool = True,
    ) -> tuple[str, str | None]:
        """One streamed `create_completion`; returns (text, finish_reason or None when stopped). `add_bos`
        False: the prompt brings its own BOS (a GGUF template's text). A long new part of the prompt is read
        first, with progress (providers/llama/reading.py)."""
        llm = self.model.llm
        self.model.last_prompt = prompt
        tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True)
        if not read_prompt(llm, tokens, self.stop, self.reading):
            return "", None
        sampling = self._sampling()
        if temperature is not None:
            sampling["temperature"] = temperature
        sampling["repeat_penalty"] = repeat_penalty
        if top_p is not None:
            sampling["top_p"] = top_p
        self.meter.begin()
        chunks = llm.create_completion(
            prompt=tokens,
            stream=True,
            max_tokens=max_tokens,
            stop=stop,
            grammar=grammar,
            logits_processor=[logits_processor] if logits_processor is not None else None,
            stopping_criteria=self.meter.stopping_criterion,
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

    def _choose(self, prompt: str, names: list[str]) -> tuple[str | None, bool]:
        """Step 1 of a tool step: a message (None) or the name of the function to call; False when stopped.

        First the model's own preference between the first tokens of `message:` and `functions.` (one token
        sampled at temperature 0, every other token masked; a small model calls only when `functions` is also
        within SMALL_CALL_REACH of its favourite token), then, for a call, the name under a grammar.
        Greedy sampling under one grammar for both branches, as llama-cpp-python does, favours the branch
        with more sub-word prefixes (`f`, `function`, ...): SmolLM2 then calls a tool for "hello"."""
        llm, llama_cpp = self.model.llm, quiet_llama_cpp()
        choices = " | ".join(json.dumps(f"functions.{name}:") for name in names)
        tokens = branch_tokens(llm)
        if tokens is None:  # a tokenizer without distinct first tokens: one grammar for both branches
            first = cached_grammar(llama_cpp, gbnf=f'root ::= functions | "message:"\nfunctions ::= {choices}\n')
            choice, why = self._complete(prompt, max_tokens=32, stop=[":"], grammar=first, temperature=0.0)
            name = choice[len("functions.") :] if choice.startswith("functions.") else None
            return (name if name in names else None), why is not None
        message, call = tokens
        branch = choose_branch(message, call, SMALL_CALL_REACH if self.model.small else None)
        pick, why = self._complete(prompt, max_tokens=1, stop=[], logits_processor=branch, temperature=0.0)
        if why is None or pick.strip() != llm.detokenize([call]).decode("utf-8", "replace").strip():
            return None, why is not None
        return self._name(prompt, names)

    def _name(self, prompt: str, names: list[str]) -> tuple[str | None, bool]:
        """The function a call is of, written under a grammar of the names; False when stopped."""
        gbnf = "root ::= (" + " | ".join(json.dumps(name) for name in names) + ') ":"\n'
        grammar = cached_grammar(quiet_llama_cpp(), gbnf=gbnf)
        name, why = self._complete(prompt + "functions.", max_tokens=32, stop=[":"], grammar=grammar, temperature=0)
        return (name if name in names else None), why is not None

    def _message(self, prompt: str, *, written: bool = False) -> None:
        """The step is a message: its text streams as it is sampled. A small model writes it right after the
        assistant header, its first token neither a branch token nor one starting with `<`: after `message:`
        it copies the format instructions that follow `message:` in the system prompt. `written`: the prompt
        already ends inside the message (a continuation), so the model just writes on."""
        budget = max(1, self.max_tokens - self.meter.output)
        if not self.model.small:
            head = "" if written else "message:\n"
            _, why = self._complete(prompt + head, max_tokens=budget, stop=["<|im_end|>"], emit_text=True,
                                    **self.free_text)
        else:
            ban = None if written else message_ban(self.model, self.prefix_cache)
            _, why = self._complete(
                prompt,
                max_tokens=budget,
                stop=SMALL_MESSAGE_STOPS,
                logits_processor=None if ban is None else not_first(ban),
                emit_text=True,
                top_p=self.top_p,
                repeat_penalty=max(SMALL_REPEAT_PENALTY, self.repeat_penalty),
            )
        if why is not None:
            self.finish(why)

    def _run_tools(self) -> None:
        tools = self.request.tools
        functions = [t.get("function", t) for t in tools if t.get("type", "function") == "function"]
        by_name = {f["name"]: f for f in functions if f.get("name")}
        forced, must = forced_tool(self.request), must_call(self.request)
        if forced in by_name:  # a named tool_choice: only that tool can be called (as llama-cpp-python does it)
            by_name = {forced: by_name[forced]}
        messages, small, llm = self.request.messages, self.model.small, self.model.llm
        chat = None if small else chat_of(self.model)
        if chat is not None:  # a real model with its own template and call format
            run_template_step(self, chat, [by_name[name] for name in by_name])
            return
        written = None if must else prefilled(lambda msgs: render_tool_prompt(msgs, functions, bare=small), messages)
        if written is not None:  # a cut-off answer: the model writes on from its text (providers/llama/prefill.py)
            self._static_prefix(written, functions, tools)
            self._message(written, written=True)
            return
        base = render_tool_prompt(messages, functions, bare=small)
        if small and not must and messages and messages[-1].get("role") == "tool":
            self._message(base)  # a small model answers with the results in hand
            return
        # A small model decides, and writes its call, from the last user message alone: on a prompt without
        # the rest of the conversation, between a snapshot of the KV cache and its restore.
        source, snapshot = base, None
        turn = current_turn(messages) if small else messages
        if len(turn) < len(messages):
            source = render_tool_prompt(turn, functions, bare=True)
            tokens = llm.tokenize(base.encode("utf-8"), special=True)
            self.meter.prompt = len(tokens)  # the step's input is the conversation
            snapshot = KvSnapshot.take(llm, tokens, llm.tokenize(source.encode("utf-8"), special=True))
        if snapshot is None:  # a first turn: its static prefix may be on disk
            self._static_prefix(source, functions, tools)
        try:
            if must:  # 1. no message: the call starts at once, of the named function or one under a grammar
                name, chosen = (forced, True) if forced in by_name else self._name(source, list(by_name))
            else:  # 1. a message, or which function to call
                name, chosen = self._choose(source, list(by_name))
            if not chosen or (name is not None and self._calls(source, name, by_name, repeat_ok=must)):
                return
        finally:
            if snapshot is not None:
                snapshot.restore(llm)
        self._message(base)

    def _static_prefix(self, prompt: str, functions: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        """Before a ChatML tool prompt is evaluated: its static prefix from the prompt-prefix cache, unless the
        KV cache holds it already (providers/llama/prefix.py)."""
        if self.prefix_cache is not None:
            head = [m for m in self.request.messages[:1] if m.get("role") == "system"]
            tokens = self.model.llm.tokenize(prompt.encode("utf-8"), special=True)
            prepare_prefix(self.model, self.prefix_cache, tokens, functions, head, tools, self.reading)

    def _calls(self, prompt: str, name: str, by_name: dict[str, dict[str, Any]], *, repeat_ok: bool = False) -> bool:
        """2. The arguments under the function's JSON-schema grammar; then, when more than one call per step
        is allowed, another constrained choice: one more call, or the end of the turn. False: the step is a
        message instead, because the first call repeats one whose results end the conversation (small models
        call the same tool again and again with its result in hand); its TOOL_START waits for that check.
        `repeat_ok`: the step must be a call (`tool_choice`), so even a repeat is one."""
        llama_cpp = quiet_llama_cpp()
        choices = " | ".join(json.dumps(f"functions.{name}:") for name in by_name)
        budget = self.max_tokens
        answered = answered_calls(self.request.messages)
        calls: list[ToolCallRequest] = []
        seen: set[tuple[str, str]] = set()
        reason = "tool_calls"
        while True:
            call_id = f"call_{uuid.uuid4().hex[:24]}"
            early = not calls and not answered
            if early:  # the first call shows as pending at once; later ones once known not to repeat
                self._put((TOOL_START, 0, call_id, name))
            prompt += f"functions.{name}:\n"
            schema = by_name[name].get("parameters") or {"type": "object"}
            args, why = self._complete(
                prompt,
                max_tokens=max(1, budget - self.meter.output),
                stop=["<|im_end|>"],
                grammar=cached_grammar(llama_cpp, schema=schema),
                repeat_penalty=SMALL_REPEAT_PENALTY if self.model.small else 1.0,
            )
            if why is None:
                return True
            args = args.strip()
            parsed = parse_args(args)
            key = call_key(name, args)
            if not calls and not repeat_ok and key in answered and self.meter.output < budget:
                return False
            if calls and key in seen:  # small models repeat the same call: that ends the step
                break
            if not early:
                self._put((TOOL_START, len(calls), call_id, name))
            calls.append(ToolCallRequest(call_id=call_id, name=name, arguments=args, args=parsed))
            seen.add(key)
            if parsed is None or self.meter.output >= budget:
                reason = "length" if parsed is None and why == "length" else reason
                break
            if len(calls) >= self.max_tool_calls:
                break
            prompt += args + "\n"
            follow = cached_grammar(llama_cpp, gbnf=f'root ::= functions | "<|im_end|>"\nfunctions ::= {choices}\n')
            nxt, why = self._complete(prompt, max_tokens=32, stop=[":"], grammar=follow, temperature=0.0)
            if why is None:
                return True
            name = nxt[len("functions.") :] if nxt.startswith("functions.") else ""
            if name not in by_name:
                break
        self._put((TOOL_CALLS, calls))
        self.finish(reason)
        return True
