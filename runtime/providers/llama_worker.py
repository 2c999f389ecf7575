"""One generation on a loaded llama.cpp model: a worker thread and the channel it feeds (used by
`llama_cpp.py`).

- Each generation runs in its own thread, which converts llama-cpp-python's chunks into the provider tuples
  itself and hands them to the event loop through a small channel (a list plus one `call_soon_threadsafe`
  wake-up per batch: if the loop is busy, tokens pile up and are delivered together). The thread holds the
  model's `threading.Lock` while it generates, and calls `on_finished` on the loop when it has exited.
- `stop` (a `threading.Event`) is checked between tokens: inside llama.cpp's sampling loop as a stopping
  criterion, and after every chunk. A prompt-evaluation batch cannot be interrupted.
- Tool calls follow the `chatml-function-calling` protocol step by step with `Llama.create_completion` (see
  `llama_tools.py`). First the choice between a message and a call: the model's own preference between the
  first tokens of `message:` and `functions.` (one token at temperature 0, all others masked), then the
  function's name under a grammar. (A single grammar for both branches, sampled greedily as llama-cpp-python
  does, favours the branch with more sub-word prefixes, `f`, `function`, ...: SmolLM2 then answered "hello"
  or "What is the capital of France?" with write_file. Measured on 10 plain and 6 tool prompts with the
  runtime's system prompt and tools: 3/10 plain prompts got a message that way, 9/10 this way, 6/6 tool
  prompts got a call both ways.) Then the arguments, sampled under a grammar built from the tool's JSON
  schema, so even a 135M model emits valid JSON. One call per step by default (`max_tool_calls`): offered a
  second one, SmolLM2 repeats the first (the library never returns a second call either: its follow-up
  choice keeps the ':' and matches no tool name); with more allowed, an exact repeat within a step ends the
  step. A first call that exactly repeats a call whose results end the conversation becomes a message
  instead: with the result in hand, SmolLM2 otherwise calls the same tool again until the step limit.
- Usage is counted exactly from the sampler (`_Meter`; llama-cpp-python's streaming API reports none): input =
  prompt tokens of the step's first completion, output = every sampled token including the end-of-turn token
  and, for tool steps, the few tokens of the constrained choice.
- A job that was stopped never reports USAGE/FINISH: a half step must not look finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

from runtime.events import Usage
from runtime.providers.base import FINISH, TEXT, TOOL_CALLS, TOOL_START, USAGE, ModelRequest, ToolCallRequest
from runtime.providers.llama_models import LoadedModel, ModelUnavailable, live_jobs, quiet_llama_cpp
from runtime.providers.llama_tools import (
    answered_calls,
    branch_tokens,
    cached_grammar,
    call_key,
    chat_messages,
    only_tokens,
    parse_args,
    render_tool_prompt,
)

DEFAULT_MAX_TOKENS = 512
DEFAULT_TEMPERATURE = 0.2  # llama-cpp-python's chat default


END = object()  # the last item of every job


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


class Job:
    """One generation. The worker thread pushes provider tuples; the loop side pulls them in batches."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        model: LoadedModel,
        request: ModelRequest,
        *,
        max_tool_calls: int = 1,
        temperature: float = DEFAULT_TEMPERATURE,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        seed: int | None = None,
    ):
        self.loop = loop
        self.model = model
        self.request = request
        self.max_tool_calls = max(1, max_tool_calls)
        # The request's sampling settings win over the provider's defaults.
        self.temperature = temperature if request.temperature is None else request.temperature
        self.max_tokens = request.max_tokens or max_tokens
        self.seed = seed if request.seed is None else request.seed
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
        live_jobs.add(self)
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
            self._put(END)
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._thread_exited)

    def _sampling(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "seed": self.seed}

    def _finish(self, reason: str) -> None:
        if self.stop.is_set():
            return  # cancelled: the consumer is gone, and a half step must not look finished
        self._put((USAGE, Usage(input_tokens=self._meter.prompt, output_tokens=self._meter.output)))
        self._put((FINISH, reason))

    def _run_chat(self) -> None:
        llm = self.model.llm
        self._meter.begin()
        chunks = llm.create_chat_completion(
            messages=chat_messages(self.request.messages),
            stream=True,
            max_tokens=self.max_tokens,
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
        logits_processor: Callable[[Any, Any], Any] | None = None,
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
            logits_processor=[logits_processor] if logits_processor is not None else None,
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

    def _choose(self, prompt: str, names: list[str]) -> tuple[str | None, bool]:
        """Step 1 of a tool step: a message (None) or the name of the function to call; False when stopped.

        First the model's own preference between the first tokens of `message:` and `functions.` (one token
        sampled at temperature 0, every other token masked), then, for a call, the name under a grammar.
        Greedy sampling under one grammar for both branches, as llama-cpp-python does, favours the branch
        with more sub-word prefixes (`f`, `function`, ...): SmolLM2 then calls a tool for "hello"."""
        llama_cpp = quiet_llama_cpp()
        choices = " | ".join(json.dumps(f"functions.{name}:") for name in names)
        tokens = branch_tokens(self.model.llm)
        if tokens is None:  # a tokenizer without distinct first tokens: one grammar for both branches
            first = cached_grammar(llama_cpp, gbnf=f'root ::= functions | "message:"\nfunctions ::= {choices}\n')
            choice, why = self._complete(prompt, max_tokens=32, stop=[":"], grammar=first, temperature=0.0)
            name = choice[len("functions.") :] if choice.startswith("functions.") else None
            return (name if name in names else None), why is not None
        message, call = tokens
        pick, why = self._complete(
            prompt, max_tokens=1, stop=[], logits_processor=only_tokens(message, call), temperature=0.0
        )
        if why is None:
            return None, False
        if pick.strip() != self.model.llm.detokenize([call]).decode("utf-8", "replace").strip():
            return None, True
        gbnf = "root ::= (" + " | ".join(json.dumps(name) for name in names) + ') ":"\n'
        name, why = self._complete(
            prompt + "functions.",
            max_tokens=32,
            stop=[":"],
            grammar=cached_grammar(llama_cpp, gbnf=gbnf),
            temperature=0.0,
        )
        return (name if name in names else None), why is not None

    def _message(self, prompt: str) -> None:
        """The step is a message: its text streams as it is sampled."""
        _, why = self._complete(
            prompt + "message:\n",
            max_tokens=max(1, self.max_tokens - self._meter.output),
            stop=["<|im_end|>"],
            emit_text=True,
        )
        if why is not None:
            self._finish(why)

    def _run_tools(self) -> None:
        llama_cpp = quiet_llama_cpp()
        tools = self.request.tools
        functions = [t.get("function", t) for t in tools if t.get("type", "function") == "function"]
        by_name = {f["name"]: f for f in functions if f.get("name")}
        choices = " | ".join(json.dumps(f"functions.{name}:") for name in by_name)
        budget = self.max_tokens
        base = prompt = render_tool_prompt(self.request.messages, functions)

        # 1. A message, or which function to call.
        name, chosen = self._choose(prompt, list(by_name))
        if not chosen:
            return
        if name is None:
            self._message(prompt)
            return

        # 2. The arguments under the function's JSON-schema grammar; then, when more than one call per step
        #    is allowed, another constrained choice: one more call, or the end of the turn. A first call that
        #    repeats one whose results end the conversation becomes a message instead (small models call the
        #    same tool again and again with its result in hand); its TOOL_START then waits for that check.
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
                max_tokens=max(1, budget - self._meter.output),
                stop=["<|im_end|>"],
                grammar=cached_grammar(llama_cpp, schema=schema),
            )
            if why is None:
                return
            args = args.strip()
            parsed = parse_args(args)
            key = call_key(name, args)
            if not calls and key in answered and self._meter.output < budget:
                self._message(base)
                return
            if calls and key in seen:  # small models repeat the same call: that ends the step
                break
            if not early:
                self._put((TOOL_START, len(calls), call_id, name))
            calls.append(ToolCallRequest(call_id=call_id, name=name, arguments=args, args=parsed))
            seen.add(key)
            if parsed is None or self._meter.output >= budget:
                reason = "length" if parsed is None and why == "length" else reason
                break
            if len(calls) >= self.max_tool_calls:
                break
            prompt += args + "\n"
            follow = cached_grammar(llama_cpp, gbnf=f'root ::= functions | "<|im_end|>"\nfunctions ::= {choices}\n')
            nxt, why = self._complete(prompt, max_tokens=32, stop=[":"], grammar=follow, temperature=0.0)
            if why is None:
                return
            name = nxt[len("functions.") :] if nxt.startswith("functions.") else ""
            if name not in by_name:
                break
        self._put((TOOL_CALLS, calls))
        self._finish(reason)
