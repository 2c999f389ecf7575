"""(a) Time to the first output byte of a fresh process, side by side on the bundled model and the same question:

  - `hearth run "What is 2+2?"` (python -m runtime.cli): the whole product path, from process start to the first
    byte of the answer on stdout: imports, the data folder's SQLite, the turn, the model (loaded in a thread
    while the rest imports), the system prompt and tool list (restored from the prompt-prefix cache), the
    question, the first token. The first run uses an empty data folder (nothing cached: the prefix is
    evaluated and saved); the later runs reuse that folder, as a person's second `hearth run` does.
  - plain llama-cpp-python in a fresh process: `Llama(bundled GGUF)` + `create_chat_completion(stream=True)`
    with the same question as the only message (no system prompt, no tools), printing the first token.

    python tests/benchmarks/bench_first_token.py [--rounds 5] [--frozen]

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
from runtime.providers.llama_models import bundled_model_path
llm = llama_cpp.Llama(model_path=str(bundled_model_path()), verbose=False)
for chunk in llm.create_chat_completion(messages=[{"role": "user", "content": sys.argv[1]}], stream=True):
    text = chunk["choices"][0]["delta"].get("content")
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--frozen", action="store_true", help="run the bundle's hearth (packaging/build.sh)")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="compile every module from source at each start (as with PYTHONDONTWRITEBYTECODE=1)")
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
