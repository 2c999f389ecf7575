"""(d) Download throughput: Hearth's pull (huggingface_hub's metadata + resumable http_get, sha256 computed on the way,
verified, placed in the cache) vs huggingface_hub's own `hf_hub_download` of the same file, from the same loopback
Hub (tests/support/fake_hub.py, in its own process), alternating, each download in a fresh process and timed around
the download call only (huggingface_hub already imported in both). Twice: unpaced (the loopback runs as fast as the
CPUs let it, so this measures CPU cost: on 2 cores the server, the client and Hearth's sha256 share them), and paced
at a 1 Gbit/s link (what a fast home connection delivers). Then a resume: the connection is cut at 60 % and the pull
resumes with a Range request.

    python tests/benchmarks/bench_downloads.py [--size-mb 1024] [--rounds 3]

The file is a GGUF header followed by zeros (sparse on disk: the server reads it from the page cache).
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
SUPPORT = ROOT / "tests" / "support"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(SUPPORT))  # fake_hub by its own name: a stray `tests` package elsewhere cannot shadow it

from fake_hub import tiny_gguf  # noqa: E402

REPO, FILE = "bench/Bench-GGUF", "bench-Q4_K_M.gguf"
PY = sys.executable


def child(kind: str, endpoint: str, folder: str) -> None:
    """Runs in a fresh process: one download, printing its seconds."""
    os.environ["HF_ENDPOINT"] = endpoint
    if kind == "hf":
        from huggingface_hub import hf_hub_download

        start = time.perf_counter()
        hf_hub_download(REPO, FILE, cache_dir=folder, endpoint=endpoint, token=False)
    else:
        import asyncio

        import huggingface_hub.file_download  # noqa: F401  imported before the clock starts, as above

        from runtime.api import Runtime

        async def pull() -> float:
            rt = await Runtime.open(folder)
            try:
                t = time.perf_counter()
                await rt.models.pull(f"{REPO}/{FILE}")
                return t
            finally:
                await rt.aclose()

        start = asyncio.run(pull())
    print(json.dumps({"seconds": time.perf_counter() - start}))


def serve(path: Path, *drops: int, throttle: float | None = None) -> tuple[subprocess.Popen, str]:
    args = [PY, str(SUPPORT / "fake_hub.py"), REPO, FILE, str(path), *(f"--drop={d}" for d in drops)]
    if throttle:
        args.append(f"--throttle={throttle}")
    proc = subprocess.Popen(args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    assert line and line[0] == "READY", line
    return proc, line[1]


def stop(proc: subprocess.Popen) -> list:
    out, _ = proc.communicate("", timeout=30)
    line = next(ln for ln in out.splitlines() if ln.startswith("RANGES"))
    return json.loads(line.split(" ", 1)[1])


def download(kind: str, endpoint: str) -> float:
    with tempfile.TemporaryDirectory(prefix=f"bench-{kind}-") as folder:
        out = subprocess.run([PY, __file__, "--child", kind, endpoint, folder], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])["seconds"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", nargs=3, metavar=("KIND", "ENDPOINT", "FOLDER"))
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory(prefix="bench-hub-") as tmp:
        path = tiny_gguf(Path(tmp) / FILE, payload_bytes=1 << 20)
        size = args.size_mb * 1_000_000
        with open(path, "r+b") as f:
            f.truncate(size)
        mb = size / 1e6
        print(f"file: {mb:.0f} MB from a loopback Hub in another process; {args.rounds} rounds each, medians")
        for label, throttle in (("unpaced loopback", None), ("paced at 1 Gbit/s", 125e6)):
            proc, endpoint = serve(path, throttle=throttle)
            try:
                download("hf", endpoint)  # warm the page cache and the interpreter's files
                hearth, hf = [], []
                for i in range(args.rounds):  # alternate, swapping the order, so drift hits both alike
                    for kind in (("hearth", "hf") if i % 2 == 0 else ("hf", "hearth")):
                        (hearth if kind == "hearth" else hf).append(download(kind, endpoint))
            finally:
                stop(proc)
            print(f"\n{label}\n{'downloader':34} {'seconds':>8} {'MB/s':>8}")
            for name, times in (("huggingface_hub hf_hub_download", hf), ("Hearth pull (+ sha256 verified)", hearth)):
                t = statistics.median(times)
                print(f"{name:34} {t:8.2f} {mb / t:8.0f}    runs: {', '.join(f'{x:.2f}' for x in times)}")
            print(f"Hearth / huggingface_hub throughput: {statistics.median(hf) / statistics.median(hearth):.3f}x")

        cut = int(size * 0.6)
        proc, endpoint = serve(path, cut)
        try:
            seconds = download("hearth", endpoint)
        finally:
            ranges = stop(proc)
        print(f"\nresume: the connection was cut after {cut / 1e6:.0f} MB; requests' Range headers: {ranges}; "
              f"finished and verified in {seconds:.2f} s ({mb / seconds:.0f} MB/s including the cut)")


if __name__ == "__main__":
    main()
