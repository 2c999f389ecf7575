"""(a) Time to the first output byte of a fresh process, side by side on the bundled model and the same question:

  - `hearth run "What is 2+2?"` (python -m runtime.cli): the whole product path, from process start to the first
    byte of the answer on stdout: imports, the data folder's SQLite, the turn, the model (loaded in a thread
    while the rest imports), the system prompt and tool list (restored from the prompt-prefix cache), the
    question, the first token. The first run uses an empty data folder (nothing cached: the prefix is
    evaluated and saved); the later runs reuse that folder, as a person's second `hearth run` does.
  - plain llama-cpp-python in a fresh process: `Llama(bundled GGUF)` + `create_chat_completion(stream=True)`
    with the same question as the only message (no system prompt, no tools), printing the first token.

(b) Time from process start to the first byte of the chat-completions request at a model server (the scripted
    OpenAI-compatible server of the tests, in a process of its own on loopback), side by side:

  - `hearth run "What is 2+2?"` on a data folder whose default model is that server's (a later run: the data
    folder exists): imports, the data folder's SQLite, the turn's setup, the request;
  - a bare script with the `openai` SDK, as a person would write it: `AsyncOpenAI(...)`, then
    `chat.completions.create(stream=True)` with the question as the only message. Goal: hearth well under 1 s.

    python tests/benchmarks/bench_first_token.py [--rounds 5] [--frozen] [--only bundled|server]

`--frozen` runs the installer's bundle (`build/dist/hearth/hearth`, packaging/build.sh) instead of
`python -m runtime.cli`: its first run restores the prompt-prefix state the bundle ships.

Both run with compiled bytecode, as an install has it (pip compiles what it installs; the bundle ships it): in a
private cache (PYTHONPYCACHEPREFIX), filled by an untimed run of each first, because an environment with
PYTHONDONTWRITEBYTECODE=1 (these machines' sessions) otherwise compiles Hearth's ~110 modules from source at
every start, which no installed copy does (0.05-0.13 s of the first answer here: 0.87 against 0.92 s and 0.86
against 1.00 s, medians of 10 and 12 alternating runs). `--no-bytecode-cache` measures that way instead.

Runs alternate between the two, so load from other processes on the machine hits both alike; medians are
reported with every run, and the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "What is 2+2?"
PLAIN = """
import llama_cpp, sys
from runtime.providers.llama.models import bundled_model_path
llm = llama_cpp.Llama(model_path=str(bundled_model_path()), verbose=False)
for chunk in llm.create_chat_completion(messages=[{"role": "user", "content": sys.argv[1]}], stream=True):
    text = chunk["choices"][0]["delta"].get("content")
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
"""


SDK_SCRIPT = """
import asyncio, sys, openai
async def main():
    client = openai.AsyncOpenAI(base_url=sys.argv[1], api_key="not-needed", max_retries=0)
    stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": sys.argv[2]}],
                                                  stream=True)
    async for chunk in stream:
        pass
asyncio.run(main())
"""


def first_byte(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(seconds to the first non-blank stdout byte, seconds to exit, output)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0)
    first, out = None, bytearray()
    while block := os.read(proc.stdout.fileno(), 1):
        if first is None and block.strip():
            first = time.perf_counter() - start
        out += block
    proc.wait()
    if proc.returncode != 0 or first is None:
        raise SystemExit(f"{argv[:4]} failed (exit {proc.returncode}): {out.decode(errors='replace')[:300]}")
    return first, time.perf_counter() - start, out.decode(errors="replace").strip()


def server_first_request(argv: list[str], env: dict[str, str], stats_url: str) -> float:
    """Seconds from starting `argv` to the first byte of its first chat-completions request at the server."""
    import httpx

    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed (exit {done.returncode}): {done.stderr[-300:]}")
    stats = httpx.get(stats_url).json()
    return min(t for t, r in zip(stats["first_byte_times"], stats["requests"], strict=True)
               if t > start and r == "POST /v1/chat/completions") - start


def bench_server(cli: list[str], env: dict[str, str], home: Path, rounds: int) -> None:
    """(b): hearth run and a bare SDK script, alternating, against one server process."""
    server = subprocess.Popen([sys.executable, "-m", "tests.support.openai_server", "--chunks", "5"], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().split()[1]
        home.mkdir()
        (home / "settings.json").write_text(json.dumps(
            {"providers": [{"id": "local", "kind": "openai", "base_url": url}], "default_model": "local/m"}))
        hearth = [*cli, "--home", str(home), "run", PROMPT]
        sdk = [sys.executable, "-c", SDK_SCRIPT, url, PROMPT]
        stats = url.removesuffix("/v1") + "/_stats"
        for argv in (hearth, sdk):  # untimed: the data folder, the bytecode, the page cache
            server_first_request(argv, env, stats)
        runs: dict[str, list[float]] = {"hearth": [], "sdk": []}
        for i in range(rounds):
            for kind in (("hearth", "sdk") if i % 2 == 0 else ("sdk", "hearth")):
                runs[kind].append(server_first_request(hearth if kind == "hearth" else sdk, env, stats))
    finally:
        server.terminate()
        server.wait()
    print("(b) process start -> first byte of the chat request at a loopback model server (medians)")
    for name, label in (("hearth", "hearth run, server model"), ("sdk", "bare openai SDK script")):
        print(f"{label:44} {statistics.median(runs[name]):7.2f} s   runs: "
              f"{', '.join(f'{r:.2f}' for r in runs[name])}")
    print("goal: hearth run well under 1 s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--frozen", action="store_true", help="run the bundle's hearth (packaging/build.sh)")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="compile every module from source at each start (as with PYTHONDONTWRITEBYTECODE=1)")
    ap.add_argument("--only", choices=("bundled", "server"), help="run only (a), the bundled model, or (b)")
    args = ap.parse_args()
    py = sys.executable
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-first-token-") as tmp:
        home, untimed, pycache = (Path(tmp) / name for name in ("home", "untimed", "pycache"))
        env = {k: v for k, v in os.environ.items() if k not in ("HEARTH_HOME", "PYTHONDONTWRITEBYTECODE")}
        if args.no_bytecode_cache:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env["PYTHONPYCACHEPREFIX"] = str(pycache)
        cli = [str(ROOT / "build" / "dist" / "hearth" / "hearth")] if args.frozen else [py, "-m", "runtime.cli"]
        if args.only == "server" or args.only is None:
            bench_server(cli, env, Path(tmp) / "server-home", args.rounds)
            print(f"load average before {load_before[0]:.2f}, now {os.getloadavg()[0]:.2f} (2 cores)\n")
        if args.only == "server":
            return
        hearth = [*cli, "--home", str(home), "run", PROMPT]
        plain = [py, "-c", PLAIN, PROMPT]
        first_plain = first_byte(plain, env)  # also warms the page cache with the model file, and the bytecode
        first_byte([*cli, "--home", str(untimed), "run", PROMPT], env)  # the bytecode of Hearth's whole path
        first_hearth = first_byte(hearth, env)  # empty folder: evaluates and saves the prefix
        later_hearth, later_plain = [], []
        for i in range(args.rounds):
            for kind in (("hearth", "plain") if i % 2 == 0 else ("plain", "hearth")):
                (later_hearth if kind == "hearth" else later_plain).append(first_byte(hearth if kind == "hearth"
                                                                                      else plain, env))
    load_after = os.getloadavg()

    def line(name: str, runs: list[tuple[float, float, str]]) -> str:
        ttfb = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        return f"{name:44} {ttfb:7.2f} {wall:8.2f}    runs: {', '.join(f'{r[0]:.2f}' for r in runs)}"

    print(f"prompt {PROMPT!r}, bundled SmolLM2-135M, {args.rounds} later runs each (medians)"
          + (", hearth from the installer's bundle" if args.frozen else "")
          + (", every module compiled at each start" if args.no_bytecode_cache else ", bytecode cached"))
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (2 cores)\n")
    print(f"{'':44} {'TTFB s':>7} {'exit s':>8}")
    print(line("hearth run, first (empty data folder)", [first_hearth]))
    print(line("hearth run, later runs", later_hearth))
    print(line("plain llama-cpp-python, fresh process", later_plain))
    print(f"\nanswers: hearth {later_hearth[-1][2]!r}  plain {first_plain[2][:60]!r}")
    ratio = statistics.median(r[0] for r in later_hearth) / statistics.median(r[0] for r in later_plain)
    print(f"hearth later runs / plain: {ratio:.2f}x (goal: hearth <= 1.0 s)")


if __name__ == "__main__":
    main()
