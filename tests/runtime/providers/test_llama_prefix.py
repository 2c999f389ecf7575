"""The prompt-prefix cache on the real bundled model: the runtime's system prompt and tools evaluated once, their
KV state saved under the data folder and restored by a fresh model (as in a new process), with the same answer
as a full evaluation; a damaged file falls back to evaluating; `warm` does it ahead of the first send; the
small model's first-token list is kept beside it; threads follow the physical cores; cancelling a warm-up stops
its evaluation. The runtime offers the bundled model no tools (it can only talk), so where the runtime builds the
prompt, the bundled file added as a local model of the person's stands in for a small model that calls tools."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from runtime.engine.agent.prompt import SYSTEM_PROMPT
from runtime.local_models.library import ModelLibrary
from runtime.local_models.machine import physical_cores
from runtime.providers.base import TEXT, ModelRequest
from runtime.providers.llama.provider import LlamaCppProvider, unload_models
from runtime.tools.base import tool_spec
from runtime.tools.builtin import builtin_tools
from runtime.tools.interactive import interactive_tools
from tests.support.local_models import add_bundled_file

pytestmark = pytest.mark.slow_model

TOOLS_ALL = [tool_spec(t) for t in [*builtin_tools(), *interactive_tools()]]  # what the runtime offers
TOOLS = [t for t in TOOLS_ALL if t["function"]["name"] in ("read_file", "ask_user")]
SYSTEM = [{"role": "system", "content": SYSTEM_PROMPT}]


def request() -> ModelRequest:
    return ModelRequest(model="smollm2-135m", messages=[*SYSTEM, {"role": "user", "content": "What is 2+2?"}],
                        tools=TOOLS, max_tokens=12, temperature=0.0, seed=3)


async def answer(provider: LlamaCppProvider) -> str:
    return "".join([item[1] async for item in provider.stream(request()) if item[0] == TEXT])


@pytest.fixture
def fresh():
    """Each test starts without loaded models, as a new process does."""
    unload_models()
    yield
    unload_models()


async def test_the_prefix_is_saved_then_restored_by_a_fresh_model_with_the_same_answer(home, fresh):
    library = ModelLibrary(home)
    reference = await answer(LlamaCppProvider("plain"))  # no cache: the whole prompt evaluated
    await asyncio.to_thread(unload_models)

    first = LlamaCppProvider("builtin", library=library)
    assert await answer(first) == reference
    assert first._model.prefix_status == "saved"
    (saved,) = library.kv_cache.glob("*.kv")
    assert saved.stat().st_size > 1_000_000  # the KV state of the ~300-token prefix
    assert list(library.kv_cache.glob("*-message-ban.json"))  # the small model's first-token list, kept

    await asyncio.to_thread(unload_models)  # a fresh Llama, as in a new process
    again = LlamaCppProvider("builtin", library=library)
    assert await answer(again) == reference
    assert again._model.prefix_status == "restored"
    assert await answer(again) == reference and again._model.prefix_status == "warm"  # in memory now


async def test_a_damaged_cache_file_is_evaluated_again(home, fresh):
    library = ModelLibrary(home)
    reference = await answer(LlamaCppProvider("builtin", library=library))
    (saved,) = library.kv_cache.glob("*.kv")
    saved.write_bytes(saved.read_bytes()[: 4096])
    await asyncio.to_thread(unload_models)
    provider = LlamaCppProvider("builtin", library=library)
    assert await answer(provider) == reference
    assert provider._model.prefix_status == "saved"  # the broken file was replaced
    assert saved.stat().st_size > 1_000_000


async def test_warm_prepares_the_first_send_and_threads_follow_the_physical_cores(home, fresh):
    library = ModelLibrary(home)
    provider = LlamaCppProvider("builtin", library=library)
    assert await provider.warm("smollm2-135m", SYSTEM, TOOLS) == "saved"
    llm = provider._model.llm
    assert llm.n_threads == llm.n_threads_batch == physical_cores()
    await answer(provider)
    assert provider._model.prefix_status == "warm"
    await asyncio.to_thread(unload_models)
    assert await LlamaCppProvider("builtin", library=library).warm("smollm2-135m", SYSTEM, TOOLS) == "restored"


async def test_cancelling_warm_stops_the_evaluation_and_waits_for_it(home, fresh):
    library = ModelLibrary(home)
    provider = LlamaCppProvider("builtin", library=library)
    warming = asyncio.ensure_future(provider.warm("smollm2-135m", SYSTEM, TOOLS_ALL))
    while provider._model is None or not provider._model.mutex.locked():  # loaded, and its thread evaluating
        assert not warming.done()
        await asyncio.sleep(0.005)
    model = provider._model
    warming.cancel()  # the app quits while it warms
    with pytest.raises(asyncio.CancelledError):
        await warming
    assert not model.mutex.locked()  # no thread goes on evaluating behind the caller's back
    assert model.prefix_status == "stopped" and not list(library.kv_cache.glob("*.kv"))
    assert await provider.warm("smollm2-135m", SYSTEM, TOOLS_ALL) == "saved"  # a later warm-up starts over


async def first_prompt(home):
    """What a new task's first step sends, as the runtime builds it (a turn's prepare, kits/task.py)."""
    from runtime.api import Runtime

    rt = await Runtime.open(home)
    try:
        return await rt.kit.first_prompt()
    finally:
        await rt.aclose()


def test_hearth_runs_preload_thread_warms_the_default_model_and_its_first_prompt(home, fresh):
    from runtime.cli.preload import start_preload
    from runtime.providers.llama.models import models
    from runtime.providers.llama.tool_prompt import render_tool_prompt

    add_bundled_file(home)  # a local model that is offered tools: the bundled one can only talk, nothing to warm
    # hearth run's: the default model, the runtime's own prompt and tools, and the first input it already knows
    start_preload(home, None, "What is 2+2?").thread.join(120)
    (loaded,) = models.values()
    assert loaded.prefix_status == "saved" and list(ModelLibrary(home).kv_cache.glob("*.kv"))
    system, tools = asyncio.run(first_prompt(home))
    messages = [*system, {"role": "user", "content": "What is 2+2?"}]
    prompt = render_tool_prompt(messages, [t["function"] for t in tools], bare=True)
    tokens = loaded.llm.tokenize(prompt.encode("utf-8"), special=True)
    assert list(loaded.llm.input_ids[: loaded.llm.n_tokens]) == tokens  # the turn's whole first prompt, evaluated


def test_hearth_runs_preload_thread_only_loads_the_model_when_there_are_memories(home, fresh):
    from runtime.cli.preload import start_preload
    from runtime.providers.llama.models import models

    add_bundled_file(home)
    (home / "memory").mkdir()
    (home / "memory" / "tea.md").write_text("# Prefers green tea\nNo sugar.\n")
    start_preload(home, None, "What is 2+2?").thread.join(120)
    (loaded,) = models.values()  # loaded: the turn does not wait for that
    # Their index goes into the first prompt, and the thread cannot read it: no prefix it would guess wrong.
    assert loaded.prefix_status == "" and not list(ModelLibrary(home).kv_cache.glob("*.kv"))


CHILD_LOAD_ORDER = """
import sys, threading
from runtime.providers.llama.provider import LlamaCppProvider
from runtime.cli.preload import start_preload

loading = threading.Event()
real_load = LlamaCppProvider.load_sync

def load_sync(self, name):
    loading.set()
    return real_load(self, name)

class KitImport:  # holds the import of runtime.kits.task until the model load has begun (or 10 s have passed)
    def find_spec(self, name, path=None, target=None):
        if name == "runtime.kits.task":
            print("load began before the imports:", loading.wait(10))
        return None

LlamaCppProvider.load_sync = load_sync
sys.meta_path.insert(0, KitImport())
start_preload(sys.argv[1], None, "What is 2+2?").thread.join(120)
"""


async def test_hearth_runs_preload_starts_the_model_load_before_importing_the_rest(home):
    # llama.cpp loads with the GIL released: begun first, the load runs beside the prompt's imports.
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CHILD_LOAD_ORDER, str(home),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
                                                env={**os.environ, "PYTHONPATH": os.getcwd()})
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0 and out.decode() == "load began before the imports: True\n"


def test_loading_a_model_runs_no_python_for_llama_cpps_log_lines(fresh):
    # Each Python log callback takes the GIL back from the imports running beside the load (a 2,000-line log).
    from runtime.providers.llama.models import bundled_model_path, load_sync

    called: list[str] = []

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code.co_name == "llama_log_callback":  # llama_cpp/_logger.py
            called.append(frame.f_code.co_name)

    sys.setprofile(profile)  # callbacks from C into Python on this thread are profiled too
    try:
        load_sync((str(bundled_model_path()), 2048, None, 1))
    finally:
        sys.setprofile(None)
    assert called == []


async def test_the_runtime_preloads_its_default_model_for_the_app(home, fresh):
    import json

    from runtime.api import Runtime

    rt = await Runtime.open(home)  # the bundled model can only talk: it is loaded, with no tool list to read
    try:
        assert await rt.models.preload_default() is True
        assert rt.providers.get("builtin")._model.prefix_status == "" and not ModelLibrary(home).kv_cache.exists()
    finally:
        await rt.aclose()
    await asyncio.to_thread(unload_models)

    add_bundled_file(home)  # a local model that is offered tools
    for expected in ("saved", "restored"):  # the second time as a new process would: a fresh Llama
        rt = await Runtime.open(home)
        try:
            assert await rt.models.preload_default() is True
            assert rt.providers.get("builtin")._model.prefix_status == expected
        finally:
            await rt.aclose()
        await asyncio.to_thread(unload_models)
    settings = {"providers": [{"id": "remote", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"}],
                "default_model": "remote/some-model"}
    (home / "settings.json").write_text(json.dumps(settings))
    rt = await Runtime.open(home)
    try:
        assert await rt.models.preload_default() is False  # not a local model: nothing to load, no error
    finally:
        await rt.aclose()
